// Workers that register through cchostagent (one per "host"): the world
// forms with one RegisterHost per host, collectives run, and a worker
// restarted behind its agent, or a restarted coordinator, is re-joined
// through it.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "ccl/v1/coordinator.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/client_wire.h"
#include "tests/testing/local_cluster.h"

namespace ccl {
namespace {

using client::FillKind;
using client::Op;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr int kWorkers = 4;
constexpr int kHosts = 2;

std::unique_ptr<testing::LocalCluster> StartBehindAgents(
    std::vector<std::string> agent_args, bool all_calls_through_agents) {
  testing::LocalClusterOptions options;
  options.workers = kWorkers;
  options.host_agents = kHosts;
  options.all_calls_through_host_agent = all_calls_through_agents;
  options.host_agent_args = std::move(agent_args);
  // Heartbeats pass through the agents too; a killed worker is lost within
  // 1.5 s, so that its replacement can take the rank soon (as the failure
  // tests do).
  options.coordinator_args = {"--heartbeat-interval-ms", "200",
                              "--heartbeat-timeout-ms", "1500"};
  auto cluster = testing::LocalCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

// Every rank holds rank+1 in `name`; after an all_reduce, the sum.
void ExpectCorrectAllReduce(testing::LocalCluster& cluster,
                            const std::string& name) {
  auto client = cluster.Client(seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  for (int r = 0; r < kWorkers; ++r) {
    auto allocated =
        (*client)->Alloc(r, client::TensorSpec{name, DType::kFloat32, {64}},
                         client::Fill{FillKind::kRankPlusOne});
    ASSERT_TRUE(allocated.ok()) << allocated.status();
  }
  Op op;
  op.kind = OpKind::kAllReduce;
  op.input = name;
  for (const auto& r : (*client)->Collective(op)) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  for (int r = 0; r < kWorkers; ++r) {
    auto summary = (*client)->Summarize(r, name, 1);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(summary->min, kWorkers * (kWorkers + 1) / 2.0) << "rank " << r;
    EXPECT_EQ(summary->max, kWorkers * (kWorkers + 1) / 2.0) << "rank " << r;
  }
}

TEST(HostAgentTest, EachHostRegistersItsWorkersInOneCall) {
  // A window longer than the test: a batch can only leave by its count, so
  // one RegisterHost per host is what must happen, however slowly the
  // workers start.
  // The workers register through their agent (ccworker --host-agent) and
  // make every other call to the coordinator.
  auto cluster = StartBehindAgents({"--window-ms", "600000"}, false);
  ASSERT_NE(cluster, nullptr);
  ASSERT_NO_FATAL_FAILURE(ExpectCorrectAllReduce(*cluster, "x"));
  for (int k = 0; k < kHosts; ++k) {
    const std::string log = cluster->host_agent(k).ReadLog();
    EXPECT_THAT(log, HasSubstr("registering 2 worker(s) in one RegisterHost"))
        << "agent " << k;
    EXPECT_THAT(log, ::testing::Not(HasSubstr("registering 1 worker(s)")))
        << "agent " << k;
  }
}

// Here the agents are the workers' coordinator: heartbeats, the KV store and
// the re-joins all pass through them.
TEST(HostAgentTest, WorkersAndTheCoordinatorRestartedBehindAgentsRejoin) {
  auto cluster = StartBehindAgents({}, true);
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Client(seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  const int64_t generation = (*client)->world().generation;

  // A worker killed and started again: it registers alone, through its
  // agent (the window, then a RegisterHost of one), and the world re-forms.
  ASSERT_TRUE(cluster->worker(1).Signal(SIGKILL).ok());
  ASSERT_TRUE(cluster->worker(1).WaitForExit(seconds(10)).ok());
  ASSERT_TRUE(cluster->RestartWorker(1).ok());
  auto ready = cluster->WaitUntilReady(seconds(60), generation + 1);
  ASSERT_TRUE(ready.ok()) << ready.status();
  ASSERT_NO_FATAL_FAILURE(ExpectCorrectAllReduce(*cluster, "after_worker"));

  // A coordinator that comes back knows nothing: every worker registers
  // again through its agent, whose channel reconnects to it.
  ASSERT_TRUE(cluster->coordinator().Signal(SIGKILL).ok());
  ASSERT_TRUE(cluster->coordinator().WaitForExit(seconds(10)).ok());
  ASSERT_TRUE(cluster->RestartCoordinator().ok());
  ready = cluster->WaitUntilReady(seconds(90));
  ASSERT_TRUE(ready.ok()) << ready.status();
  ASSERT_NO_FATAL_FAILURE(
      ExpectCorrectAllReduce(*cluster, "after_coordinator"));
  for (int k = 0; k < kHosts; ++k) {
    EXPECT_TRUE(cluster->host_agent(k).running()) << "agent " << k;
  }
}

// Workers that go away while their batch is at the coordinator (killed, or
// a client that cancels) leave no rank behind: the agent cancels the
// RegisterHost once every worker it still owed an answer has gone, and the
// coordinator withdraws their registrations, as it does for a lone Register
// whose caller went away. The calls carry no deadline, so nothing but the
// agent's cancel ends the RegisterHost.
TEST(HostAgentTest, WorkersThatGoAwayLeaveNoRankBehind) {
  auto cccoord = testing::BinaryPath("cccoord");
  auto cchostagent = testing::BinaryPath("cchostagent");
  ASSERT_TRUE(cccoord.ok() && cchostagent.ok());
  auto coordinator = testing::Subprocess::Start(
      *cccoord, {"--world-size", "3", "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ASSERT_TRUE((*coordinator)->WaitForPort(seconds(20)).ok());
  auto agent = testing::Subprocess::Start(
      *cchostagent, {"--coordinator", (*coordinator)->loopback_address(),
                     "--listen", "127.0.0.1:0", "--workers", "2"});
  ASSERT_TRUE(agent.ok()) << agent.status();
  ASSERT_TRUE((*agent)->WaitForPort(seconds(20)).ok());

  grpc::ClientContext contexts[2];
  auto register_until_cancelled = [&](int i) {
    auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
        (*agent)->loopback_address(), grpc::InsecureChannelCredentials()));
    v1::RegisterRequest request;
    request.set_address("127.0.0.1:" + std::to_string(45000 + i));
    request.set_worker_id("goes-away-" + std::to_string(i));
    v1::RegisterResponse response;
    return stub->Register(&contexts[i], request, &response).error_code();
  };
  auto first = std::async(std::launch::async, register_until_cancelled, 0);
  auto second = std::async(std::launch::async, register_until_cancelled, 1);
  // Cancelled once their batch has left (and, so, once both are parked).
  const std::string sent = "registering 2 worker(s) in one RegisterHost";
  const auto sent_by = std::chrono::steady_clock::now() + seconds(20);
  while ((*agent)->ReadLog().find(sent) == std::string::npos &&
         std::chrono::steady_clock::now() < sent_by) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT((*agent)->ReadLog(), HasSubstr(sent));
  contexts[0].TryCancel();
  contexts[1].TryCancel();
  EXPECT_EQ(first.get(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(second.get(), grpc::StatusCode::CANCELLED);

  auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
      (*coordinator)->loopback_address(), grpc::InsecureChannelCredentials()));
  int members = -1;
  const auto deadline = std::chrono::steady_clock::now() + seconds(10);
  while (members != 0 && std::chrono::steady_clock::now() < deadline) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(5));
    v1::World world;
    if (stub->GetWorld(&context, {}, &world).ok()) {
      members = world.members_size();
    }
    if (members != 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(members, 0) << "the workers that went away still hold ranks";
  EXPECT_TRUE((*agent)->running());
}

}  // namespace
}  // namespace ccl
