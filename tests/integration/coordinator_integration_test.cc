// Runs the real cccoord binary on an ephemeral loopback port and talks to it
// through the generated stub, as workers and ccctl do.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ccl/v1/coordinator.grpc.pb.h"
#include "common/unique_id_plan.h"
#include "coordinator/client/coordinator_client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/rpc/coordinator_kv_store.h"
#include "tests/testing/subprocess.h"

namespace ccl {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;
using testing::Subprocess;

constexpr auto kStartTimeout = milliseconds(10000);
constexpr auto kRpcDeadline = milliseconds(10000);

std::unique_ptr<grpc::ClientContext> Context(
    milliseconds deadline = kRpcDeadline) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + deadline);
  return context;
}

class CoordinatorIntegrationTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& p : processes_) p->DumpLogOnFailure();
  }

  Subprocess* Start(std::vector<std::string> args,
                    Subprocess::Options options = {}) {
    auto binary = testing::BinaryPath("cccoord");
    EXPECT_TRUE(binary.ok()) << binary.status();
    if (!binary.ok()) return nullptr;
    auto p = Subprocess::Start(*binary, args, std::move(options));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    processes_.push_back(std::move(*p));
    return processes_.back().get();
  }

  // Starts a coordinator and connects a stub to it.
  Subprocess* StartServing(int world_size,
                           std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--world-size", std::to_string(world_size),
                                     "--listen", "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    Subprocess* p = Start(args);
    if (p == nullptr) return nullptr;
    auto port = p->WaitForPort(kStartTimeout);
    EXPECT_TRUE(port.ok()) << port.status();
    if (!port.ok()) return nullptr;
    channel_ = grpc::CreateChannel(p->loopback_address(),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::Coordinator::NewStub(channel_);
    return p;
  }

  grpc::Status Register(const std::string& worker_id, v1::RegisterResponse* out,
                        int64_t timeout_ms = 10000,
                        std::optional<int> rank = std::nullopt,
                        bool include_members = true) {
    v1::RegisterRequest request;
    request.set_include_members(include_members);
    request.set_address("127.0.0.1:" + std::to_string(40000 + counter_++));
    request.set_host("localhost");
    request.mutable_device()->set_kind(v1::DEVICE_KIND_CPU);
    request.set_worker_id(worker_id);
    request.set_worker_secret(SecretOf(worker_id));
    request.set_timeout_ms(timeout_ms);
    if (rank) request.set_requested_rank(*rank);
    return stub_->Register(Context().get(), request, out);
  }

  // What each test worker proves itself with, as a ccworker brings its own.
  static std::string SecretOf(const std::string& worker_id) {
    return "secret-of-" + worker_id + "-0123456789abcdef0123456789abcdef";
  }

  // The registration of NCCL worker "gpu-<i>" for rank i, with one id for
  // the world (made by rank 0).
  static v1::RegisterRequest NcclWorkerRequest(int i) {
    v1::RegisterRequest request;
    request.set_address("127.0.0.1:" + std::to_string(41000 + i));
    request.set_host("localhost");
    request.mutable_device()->set_kind(v1::DEVICE_KIND_CUDA);
    request.mutable_device()->set_index(i);
    request.set_worker_id("gpu-" + std::to_string(i));
    request.set_worker_secret(SecretOf("gpu-" + std::to_string(i)));
    request.set_requested_rank(i);
    request.set_nccl_ranks_per_root(0);
    return request;
  }

  v1::World GetWorld() {
    v1::World world;
    grpc::Status s = stub_->GetWorld(Context().get(), {}, &world);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return world;
  }

  std::vector<std::unique_ptr<Subprocess>> processes_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::atomic<int> counter_{0};
};

TEST_F(CoordinatorIntegrationTest, ConcurrentWorkersFormOneWorld) {
  constexpr int kWorld = 8;
  ASSERT_NE(StartServing(kWorld), nullptr);
  std::vector<v1::RegisterResponse> responses(kWorld);
  std::vector<grpc::Status> statuses(kWorld);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWorld; ++i) {
    threads.emplace_back([&, i] {
      // Odd workers leave the member list out of their reply.
      statuses[i] = Register("worker-" + std::to_string(i), &responses[i],
                             10000, std::nullopt, i % 2 == 0);
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int> ranks;
  for (int i = 0; i < kWorld; ++i) {
    ASSERT_TRUE(statuses[i].ok()) << statuses[i].error_message();
    EXPECT_EQ(responses[i].generation(), 1);
    EXPECT_EQ(responses[i].world().members_size(), i % 2 == 0 ? kWorld : 0);
    EXPECT_EQ(responses[i].world().world_size(), kWorld);
    ranks.push_back(responses[i].rank());
  }
  std::sort(ranks.begin(), ranks.end());
  for (int i = 0; i < kWorld; ++i) EXPECT_EQ(ranks[i], i);

  v1::World world = GetWorld();
  EXPECT_EQ(world.generation(), 1);
  EXPECT_EQ(world.world_size(), kWorld);
  EXPECT_EQ(world.state(), v1::WORLD_STATE_COMPLETE);
  ASSERT_EQ(world.members_size(), kWorld);
  for (int i = 0; i < kWorld; ++i) {
    EXPECT_EQ(world.members(i).rank(), i);
    EXPECT_EQ(world.members(i).state(), v1::MEMBER_STATE_READY);
    EXPECT_EQ(world.members(i).device().kind(), v1::DEVICE_KIND_CPU);
  }

  // Heartbeat, carrying stats that GetWorld reports.
  v1::HeartbeatRequest hb;
  hb.set_rank(0);
  hb.set_generation(1);
  hb.set_worker_id(world.members(0).worker_id());
  hb.set_worker_secret(SecretOf(world.members(0).worker_id()));
  hb.set_tensor_count(2);
  hb.set_tensor_bytes(1024);
  v1::HeartbeatResponse hb_out;
  ASSERT_TRUE(stub_->Heartbeat(Context().get(), hb, &hb_out).ok());
  EXPECT_EQ(hb_out.world_state(), v1::WORLD_STATE_COMPLETE);
  EXPECT_EQ(GetWorld().members(0).tensor_bytes(), 1024);

  // A KV wait on one client is released by a set from another.
  auto waiter = std::async(std::launch::async, [&] {
    auto stub = v1::Coordinator::NewStub(grpc::CreateChannel(
        processes_[0]->loopback_address(), grpc::InsecureChannelCredentials()));
    v1::KvWaitRequest request;
    request.add_keys("rendezvous/0");
    request.add_keys("rendezvous/1");
    request.set_timeout_ms(5000);
    v1::KvWaitResponse out;
    return stub->KvWait(Context().get(), request, &out);
  });
  std::this_thread::sleep_for(milliseconds(100));
  for (const char* key : {"rendezvous/0", "rendezvous/1"}) {
    v1::KvSetRequest set;
    set.set_key(key);
    set.set_value("addr");
    v1::KvSetResponse set_out;
    ASSERT_TRUE(stub_->KvSet(Context().get(), set, &set_out).ok());
    EXPECT_EQ(set_out.generation(), 1);
  }
  grpc::Status waited = waiter.get();
  EXPECT_TRUE(waited.ok()) << waited.error_message();

  // Rank 0 posts the unique id; the others get it, even if they ask first.
  auto getter = std::async(std::launch::async, [&] {
    v1::GetUniqueIdRequest request;
    request.set_generation(1);
    request.set_timeout_ms(5000);
    v1::GetUniqueIdResponse out;
    grpc::Status s = stub_->GetUniqueId(Context().get(), request, &out);
    return s.ok() ? out.unique_id() : "error: " + s.error_message();
  });
  std::this_thread::sleep_for(milliseconds(50));
  v1::PostUniqueIdRequest post;
  post.set_generation(1);
  post.set_unique_id(std::string(128, '\x7'));
  v1::PostUniqueIdResponse post_out;
  ASSERT_TRUE(stub_->PostUniqueId(Context().get(), post, &post_out).ok());
  EXPECT_EQ(getter.get(), std::string(128, '\x7'));

  v1::ReserveSequenceRequest seq;
  seq.set_count(10);
  v1::ReserveSequenceResponse seq_out;
  ASSERT_TRUE(stub_->ReserveSequence(Context().get(), seq, &seq_out).ok());
  ASSERT_TRUE(stub_->ReserveSequence(Context().get(), seq, &seq_out).ok());
  EXPECT_EQ(seq_out.first(), 10);
}

TEST_F(CoordinatorIntegrationTest, BadInputGetsCanonicalCodesAndServerStaysUp) {
  Subprocess* p = StartServing(2);
  ASSERT_NE(p, nullptr);
  v1::RegisterResponse out;
  v1::RegisterRequest empty;
  grpc::Status s = stub_->Register(Context().get(), empty, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("address"));
  s = Register("w", &out, 10000, 2);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  s = Register("w", &out, 10000, -1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  s = Register("w", &out, 200);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr("1 of 2 ranks registered"));

  v1::KvGetRequest get;
  get.set_key("absent");
  v1::KvGetResponse get_out;
  EXPECT_EQ(stub_->KvGet(Context().get(), get, &get_out).error_code(),
            grpc::StatusCode::NOT_FOUND);
  get.set_generation(9);
  s = stub_->KvGet(Context().get(), get, &get_out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("unknown generation"));

  v1::KvSetRequest set;
  v1::KvSetResponse set_out;
  EXPECT_EQ(stub_->KvSet(Context().get(), set, &set_out).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::KvWaitRequest wait;
  wait.add_keys("never");
  wait.set_timeout_ms(100);
  v1::KvWaitResponse wait_out;
  s = stub_->KvWait(Context().get(), wait, &wait_out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(s.error_message(), HasSubstr("never"));

  v1::ReserveSequenceRequest seq;
  v1::ReserveSequenceResponse seq_out;
  EXPECT_EQ(stub_->ReserveSequence(Context().get(), seq, &seq_out).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::HeartbeatRequest hb;
  hb.set_rank(1);
  hb.set_worker_id("nobody");
  v1::HeartbeatResponse hb_out;
  EXPECT_EQ(stub_->Heartbeat(Context().get(), hb, &hb_out).error_code(),
            grpc::StatusCode::NOT_FOUND);

  v1::PostUniqueIdRequest post;
  v1::PostUniqueIdResponse post_out;
  EXPECT_EQ(stub_->PostUniqueId(Context().get(), post, &post_out).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  EXPECT_TRUE(p->running());
  v1::World world = GetWorld();
  EXPECT_EQ(world.world_size(), 2);
  EXPECT_EQ(world.members_size(), 0);  // The timed-out rank was withdrawn.
  EXPECT_EQ(world.state(), v1::WORLD_STATE_FORMING);
}

TEST_F(CoordinatorIntegrationTest, ClientThatGivesUpReleasesItsRank) {
  ASSERT_NE(StartServing(2), nullptr);
  v1::RegisterRequest request;
  request.set_address("127.0.0.1:1");
  request.set_worker_id("impatient");
  request.set_requested_rank(1);
  v1::RegisterResponse out;
  grpc::Status s =
      stub_->Register(Context(milliseconds(200)).get(), request, &out);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (GetWorld().members_size() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(GetWorld().members_size(), 0);
}

TEST_F(CoordinatorIntegrationTest, SilentWorkerIsReportedLost) {
  ASSERT_NE(StartServing(1, {"--heartbeat-interval-ms", "50",
                             "--heartbeat-timeout-ms", "200"}),
            nullptr);
  v1::RegisterResponse out;
  ASSERT_TRUE(Register("quiet", &out).ok());
  EXPECT_EQ(out.world().heartbeat_timeout_ms(), 200);
  auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  v1::World world = GetWorld();
  while (world.state() != v1::WORLD_STATE_DEGRADED &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(50));
    world = GetWorld();
  }
  EXPECT_EQ(world.state(), v1::WORLD_STATE_DEGRADED);
  ASSERT_EQ(world.members_size(), 1);
  EXPECT_EQ(world.members(0).state(), v1::MEMBER_STATE_LOST);
  // Coming back re-forms the world in a new generation.
  ASSERT_TRUE(Register("quiet", &out).ok());
  EXPECT_EQ(out.generation(), 2);
}

TEST_F(CoordinatorIntegrationTest, SigtermExitsCleanlyWhileCallsAreParked) {
  Subprocess* p = StartServing(2);
  ASSERT_NE(p, nullptr);
  auto parked = std::async(std::launch::async, [&] {
    v1::RegisterResponse out;
    return Register("waiting", &out, 60000);
  });
  auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (GetWorld().members_size() != 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  auto signalled = std::chrono::steady_clock::now();
  ASSERT_TRUE(p->Signal(SIGTERM).ok());
  auto exit = p->WaitForExit(milliseconds(5000));
  std::cerr << "exited "
            << std::chrono::duration_cast<milliseconds>(
                   std::chrono::steady_clock::now() - signalled)
                   .count()
            << " ms after SIGTERM\n";
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited) << exit->ToString();
  EXPECT_EQ(exit->code, 0) << exit->ToString();
  EXPECT_FALSE(parked.get().ok());
  EXPECT_THAT(p->ReadLog(), HasSubstr("cccoord listening on 127.0.0.1:"));
}

// What ccworker does on a CUDA device: Register asks for the NCCL id, and
// the store of the generation answers the id's read from the reply.
TEST_F(CoordinatorIntegrationTest, RegisterCarriesTheNcclIdToRanksThatReadIt) {
  constexpr int kWorld = 4;
  Subprocess* p = StartServing(kWorld);
  ASSERT_NE(p, nullptr);
  auto client =
      CoordinatorClient::Connect(p->loopback_address(), milliseconds(10000));
  std::vector<std::future<absl::StatusOr<v1::RegisterResponse>>> replies;
  for (int i = 0; i < kWorld; ++i) {
    replies.push_back(std::async(std::launch::async, [&, i] {
      return client->Register(NcclWorkerRequest(i));
    }));
  }
  absl::StatusOr<v1::RegisterResponse> first = replies[0].get();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(first->kv().empty());
  // The others are held until rank 0 posts the id.
  EXPECT_EQ(replies[1].wait_for(milliseconds(100)),
            std::future_status::timeout);
  const std::string key = nccl::UniqueIdKey(nccl::WorldPrefix(1));
  ASSERT_TRUE(client->KvSet(1, key, "the-id-in-hex").ok());
  std::vector<v1::RegisterResponse> held;
  for (int i = 1; i < kWorld; ++i) {
    absl::StatusOr<v1::RegisterResponse> r = replies[i].get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->rank(), i);
    ASSERT_EQ(r->kv().count(key), 1u);
    EXPECT_EQ(r->kv().at(key), "the-id-in-hex");
    held.push_back(*r);
  }
  CoordinatorKvStore store(*client, 1,
                           {held[0].kv().begin(), held[0].kv().end()});
  // Served from the reply: it still answers with the coordinator gone,
  // while a key the reply did not carry needs the coordinator.
  ASSERT_TRUE(p->Signal(SIGTERM).ok());
  ASSERT_TRUE(p->WaitForExit(milliseconds(5000)).ok());
  absl::StatusOr<std::string> id = store.Get(key, milliseconds(1000));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, "the-id-in-hex");
  absl::StatusOr<std::vector<std::string>> ids =
      store.GetMany({key}, milliseconds(1000));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->front(), "the-id-in-hex");
  EXPECT_FALSE(store.Get("other", milliseconds(100)).ok());
}

// What a host agent sends for the workers of its host: each member is
// answered on the stream when its own Register would have been, with its own
// status, and a key an earlier reply carried is not repeated.
TEST_F(CoordinatorIntegrationTest, RegisterHostAnswersEachMemberAsItsRegister) {
  constexpr int kWorld = 4;
  Subprocess* p = StartServing(kWorld);
  ASSERT_NE(p, nullptr);
  auto client =
      CoordinatorClient::Connect(p->loopback_address(), milliseconds(10000));
  v1::RegisterHostRequest host;
  *host.add_members() = NcclWorkerRequest(0);
  *host.add_members() = NcclWorkerRequest(1);
  v1::RegisterRequest bad = NcclWorkerRequest(9);
  bad.clear_address();
  *host.add_members() = bad;
  *host.add_members() = NcclWorkerRequest(2);
  auto context = Context();
  std::unique_ptr<grpc::ClientReader<v1::RegisterHostReply>> stream =
      stub_->RegisterHost(context.get(), host);

  // The invalid member is answered at once, alone.
  v1::RegisterHostReply reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.member(), 2);
  EXPECT_EQ(reply.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(reply.message(), HasSubstr("address"));
  EXPECT_FALSE(reply.has_response());

  // The world completes with a fourth worker registering on its own.
  auto last = std::async(std::launch::async, [&] {
    return client->Register(NcclWorkerRequest(3));
  });
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.member(), 0);
  ASSERT_EQ(reply.code(), 0) << reply.message();
  EXPECT_EQ(reply.response().rank(), 0);
  EXPECT_EQ(reply.response().world().world_size(), kWorld);
  EXPECT_EQ(reply.response().worker_secret(), SecretOf("gpu-0"));
  EXPECT_TRUE(reply.response().kv().empty());  // rank 0 makes the id

  // The others are held until rank 0 posts the id, as with Register.
  const std::string key = nccl::UniqueIdKey(nccl::WorldPrefix(1));
  ASSERT_TRUE(client->KvSet(1, key, "the-id-in-hex").ok());
  std::map<int, v1::RegisterResponse> held;
  int carried_key = 0;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(stream->Read(&reply));
    ASSERT_EQ(reply.code(), 0) << reply.message();
    held[reply.member()] = reply.response();
    if (reply.response().kv().count(key) == 1) {
      EXPECT_EQ(reply.response().kv().at(key), "the-id-in-hex");
      // The first reply with the key carries it; the next one relies on it.
      EXPECT_EQ(i, 0);
      ++carried_key;
    }
  }
  EXPECT_EQ(carried_key, 1);
  ASSERT_EQ(held.count(1), 1u);
  ASSERT_EQ(held.count(3), 1u);
  EXPECT_EQ(held[1].rank(), 1);
  EXPECT_EQ(held[3].rank(), 2);
  EXPECT_FALSE(stream->Read(&reply));
  const grpc::Status finished = stream->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();

  absl::StatusOr<v1::RegisterResponse> alone = last.get();
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_EQ(alone->rank(), 3);
  EXPECT_EQ(alone->kv().at(key), "the-id-in-hex");
  EXPECT_EQ(GetWorld().state(), v1::WORLD_STATE_COMPLETE);
}

TEST_F(CoordinatorIntegrationTest, RegisterHostRefusesEmptyAndOversizedCalls) {
  ASSERT_NE(StartServing(1), nullptr);
  auto finish = [&](const v1::RegisterHostRequest& request) {
    auto context = Context();
    auto stream = stub_->RegisterHost(context.get(), request);
    v1::RegisterHostReply reply;
    EXPECT_FALSE(stream->Read(&reply)) << "no member may be answered";
    return stream->Finish();
  };
  grpc::Status empty = finish({});
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(empty.error_message(), HasSubstr("no members"));

  v1::RegisterHostRequest oversized;
  for (int i = 0; i < 1025; ++i) {
    v1::RegisterRequest* m = oversized.add_members();
    m->set_address("127.0.0.1:" + std::to_string(43000 + i));
    m->set_worker_id("w" + std::to_string(i));
  }
  grpc::Status too_many = finish(oversized);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_many.error_message(), HasSubstr("at most 1024"));
  // Nobody was registered by either, and the coordinator still serves.
  EXPECT_EQ(GetWorld().members_size(), 0);
  v1::RegisterResponse out;
  grpc::Status s = Register("after", &out);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(out.rank(), 0);
}

TEST_F(CoordinatorIntegrationTest, HostAgentThatGivesUpReleasesEveryRank) {
  ASSERT_NE(StartServing(3), nullptr);
  v1::RegisterHostRequest host;
  for (int i = 0; i < 2; ++i) {
    v1::RegisterRequest* m = host.add_members();
    m->set_address("127.0.0.1:" + std::to_string(44000 + i));
    m->set_worker_id("impatient-" + std::to_string(i));
  }
  auto context = Context(milliseconds(200));
  auto stream = stub_->RegisterHost(context.get(), host);
  v1::RegisterHostReply reply;
  EXPECT_FALSE(stream->Read(&reply));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  auto deadline = std::chrono::steady_clock::now() + milliseconds(5000);
  while (GetWorld().members_size() != 0 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(GetWorld().members_size(), 0);
}

TEST_F(CoordinatorIntegrationTest, WorldSizeFromEnvironment) {
  Subprocess::Options options;
  options.env = {"WORLD_SIZE=3"};
  Subprocess* p = Start({"--listen", "127.0.0.1:0"}, options);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->WaitForPort(kStartTimeout).ok());
  stub_ = v1::Coordinator::NewStub(grpc::CreateChannel(
      p->loopback_address(), grpc::InsecureChannelCredentials()));
  EXPECT_EQ(GetWorld().world_size(), 3);
}

TEST_F(CoordinatorIntegrationTest, InvalidWorldSizeExitsWithUsageError) {
  for (const char* size : {"0", "-4"}) {
    Subprocess::Options options;
    options.port_file_flag = "";
    Subprocess* p = Start({"--world-size", size}, options);
    ASSERT_NE(p, nullptr);
    auto exit = p->WaitForExit(milliseconds(5000));
    ASSERT_TRUE(exit.ok()) << exit.status();
    EXPECT_EQ(exit->code, 2) << exit->ToString();
    EXPECT_THAT(p->ReadLog(), HasSubstr("world-size"));
  }
}

}  // namespace
}  // namespace ccl
