// Subgroups (torch.distributed.new_group) end to end, with real processes:
// four workers, groups "even" = world ranks [0, 2] and "odd" = [1, 3], ops
// on them from the client library and from ccctl, interleaved clients,
// world ops afterwards, and bad requests. Ranks the client takes (root,
// peer, PointToPoint keys) are world ranks; it translates them.
//
// Built for cpu (Gloo) here; with CCL_CONFORMANCE_DEVICE="cuda" and
// CCL_CONFORMANCE_CUDA the same tests run on NCCL (ncclCommSplit) and skip
// visibly with fewer than four GPUs.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/client_wire.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/subprocess.h"

#ifndef CCL_CONFORMANCE_DEVICE
#define CCL_CONFORMANCE_DEVICE "cpu"
#endif
#ifdef CCL_CONFORMANCE_CUDA
#include <cuda_runtime.h>
#endif

namespace ccl {
namespace {

namespace fs = std::filesystem;
using client::ClusterClient;
using client::FillKind;
using client::Op;
using client::OpResult;
using client::RankResults;
using std::chrono::seconds;

constexpr int kWorkers = 4;

class GroupsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#ifdef CCL_CONFORMANCE_CUDA
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
    if (std::string missing = testing::CudaWorkersMissing(kWorkers, gpus);
        !missing.empty()) {
      skip_reason_ = new std::string(std::move(missing));
      return;
    }
#endif
    testing::LocalClusterOptions options;
    options.workers = kWorkers;
    options.device = CCL_CONFORMANCE_DEVICE;
    options.worker_args = {"--op-timeout-ms", "20000", "--seq-gap-timeout-ms",
                           "8000"};
    auto cluster = testing::LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
    auto client = cluster_->Client();
    ASSERT_TRUE(client.ok()) << client.status();
    for (const auto& [name, ranks] :
         std::vector<std::pair<std::string, std::vector<int>>>{
             {"even", {0, 2}}, {"odd", {1, 3}}}) {
      for (const auto& r : (*client)->CreateGroup(name, ranks)) {
        ASSERT_TRUE(r.result.ok())
            << name << " rank " << r.rank << ": " << r.result.status();
      }
    }
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (skip_reason_ != nullptr) GTEST_SKIP() << *skip_reason_;
    ASSERT_NE(cluster_, nullptr);
  }
  void TearDown() override {
    if (HasFailure() && cluster_ != nullptr) cluster_->DumpLogsOnFailure();
  }

  static std::unique_ptr<ClusterClient> Client(const std::string& group) {
    auto client = cluster_->Client();
    EXPECT_TRUE(client.ok()) << client.status();
    if (!client.ok()) return nullptr;
    absl::Status used = (*client)->UseGroup(group);
    EXPECT_TRUE(used.ok()) << used;
    return *std::move(client);
  }

  // Float32 `name` of `numel` elements holding rank+1 on every world rank.
  static void AllocEverywhere(ClusterClient& on, const std::string& name,
                              int64_t numel,
                              FillKind fill = FillKind::kRankPlusOne) {
    for (const auto& made : on.Alloc(
             on.AllRanks(), client::TensorSpec{name, DType::kFloat32, {numel}},
             client::Fill{fill})) {
      ASSERT_TRUE(made.result.ok()) << made.result.status();
    }
  }

  static double First(ClusterClient& client, int rank,
                      const std::string& name) {
    auto summary = client.Summarize(rank, name, 1);
    EXPECT_TRUE(summary.ok()) << summary.status();
    return summary.ok() && !summary->head.empty() ? summary->head[0] : -1;
  }

  template <typename T>
  static void ExpectAllOk(const RankResults<T>& results,
                          std::vector<int> ranks) {
    std::vector<int> got;
    for (const auto& r : results) {
      got.push_back(r.rank);
      EXPECT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
    EXPECT_EQ(got, ranks);
  }

  static testing::LocalCluster* cluster_;
  static std::string* skip_reason_;
};

testing::LocalCluster* GroupsTest::cluster_ = nullptr;
std::string* GroupsTest::skip_reason_ = nullptr;

TEST_F(GroupsTest, AllReduceOnEvenTouchesOnlyItsMembers) {
  auto world = Client("world");
  AllocEverywhere(*world, "ar", 4);
  auto even = Client("even");
  EXPECT_EQ(even->GroupRanks(), (std::vector<int>{0, 2}));
  Op op;
  op.kind = OpKind::kAllReduce;
  op.input = "ar";
  ExpectAllOk(even->Collective(op), {0, 2});
  EXPECT_EQ(First(*world, 0, "ar"), 4.0);  // 1 + 3
  EXPECT_EQ(First(*world, 2, "ar"), 4.0);
  EXPECT_EQ(First(*world, 1, "ar"), 2.0);  // untouched
  EXPECT_EQ(First(*world, 3, "ar"), 4.0);
  // odd: 2 + 4 on ranks 1 and 3.
  auto odd = Client("odd");
  ExpectAllOk(odd->Collective(op), {1, 3});
  EXPECT_EQ(First(*world, 0, "ar"), 4.0);
  EXPECT_EQ(First(*world, 1, "ar"), 6.0);
  EXPECT_EQ(First(*world, 3, "ar"), 6.0);
}

TEST_F(GroupsTest, BroadcastOnOddFromWorldRankThree) {
  auto world = Client("world");
  AllocEverywhere(*world, "bc", 3);
  auto odd = Client("odd");
  Op op;
  op.kind = OpKind::kBroadcast;
  op.input = "bc";
  op.root = 3;  // a world rank; group rank 1
  ExpectAllOk(odd->Collective(op), {1, 3});
  EXPECT_EQ(First(*world, 1, "bc"), 4.0);
  EXPECT_EQ(First(*world, 3, "bc"), 4.0);
  EXPECT_EQ(First(*world, 0, "bc"), 1.0);
  EXPECT_EQ(First(*world, 2, "bc"), 3.0);
  // A root outside the group is refused before any seq is taken.
  op.root = 0;
  for (const auto& r : odd->Collective(op)) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kInvalidArgument)
        << r.result.status();
  }
}

TEST_F(GroupsTest, SendRecvInsideAGroup) {
  auto world = Client("world");
  AllocEverywhere(*world, "p2p", 2);
  auto even = Client("even");
  Op send;
  send.kind = OpKind::kSend;
  send.input = "p2p";
  send.peer = 0;  // world ranks
  Op recv;
  recv.kind = OpKind::kRecv;
  recv.input = "p2p";
  recv.peer = 2;
  ExpectAllOk(even->PointToPoint({{2, send}, {0, recv}}), {0, 2});
  EXPECT_EQ(First(*world, 0, "p2p"), 3.0);
  EXPECT_EQ(First(*world, 2, "p2p"), 3.0);
  EXPECT_EQ(First(*world, 1, "p2p"), 2.0);
  // A peer outside the group is refused.
  recv.peer = 1;
  for (const auto& r : even->PointToPoint({{0, recv}})) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(GroupsTest, InterleavedClientsOnTwoGroupsThenTheWorld) {
  auto world = Client("world");
  AllocEverywhere(*world, "il", 8, FillKind::kOnes);
  constexpr int kOps = 10;
  auto run = [&](const std::string& group) {
    auto client = Client(group);
    ASSERT_NE(client, nullptr);
    Op op;
    op.kind = OpKind::kAllReduce;
    op.input = "il";
    op.async = true;
    std::vector<RankResults<OpResult>> all;
    for (int i = 0; i < kOps; ++i) all.push_back(client->Collective(op));
    for (const auto& results : all) {
      for (const auto& r : results) {
        ASSERT_TRUE(r.result.ok()) << group << ": " << r.result.status();
        auto waited = client->Wait(r.rank, r.result->work_id, seconds(30));
        EXPECT_TRUE(waited.ok()) << group << ": " << waited.status();
      }
    }
  };
  std::thread a([&] { run("even"); });
  std::thread b([&] { run("odd"); });
  a.join();
  b.join();
  for (int rank = 0; rank < kWorkers; ++rank) {
    EXPECT_EQ(First(*world, rank, "il"), 1024.0) << "rank " << rank;  // 2^10
  }
  // The world still runs, across both groups' members.
  Op op;
  op.kind = OpKind::kAllReduce;
  op.input = "il";
  ExpectAllOk(world->Collective(op), {0, 1, 2, 3});
  EXPECT_EQ(First(*world, 3, "il"), 4096.0);
}

TEST_F(GroupsTest, BadRequestsFailWithTheRightCodesAndLeaveNoGap) {
  auto world = Client("world");
  struct Bad {
    std::string name;
    std::vector<int> ranks;
    absl::StatusCode code;
  };
  const std::vector<Bad> cases = {
      {"even", {0, 1}, absl::StatusCode::kAlreadyExists},
      {"world", {0, 1}, absl::StatusCode::kAlreadyExists},
      {"far", {0, 4}, absl::StatusCode::kInvalidArgument},
      {"neg", {-1}, absl::StatusCode::kInvalidArgument},
      {"empty", {}, absl::StatusCode::kInvalidArgument},
      {"twice", {1, 1}, absl::StatusCode::kInvalidArgument},
      {"bad name", {0}, absl::StatusCode::kInvalidArgument},
  };
  for (const Bad& bad : cases) {
    auto results = world->CreateGroup(bad.name, bad.ranks);
    ASSERT_EQ(results.size(), static_cast<size_t>(kWorkers));
    for (const auto& r : results) {
      EXPECT_EQ(r.result.status().code(), bad.code)
          << bad.name << " rank " << r.rank << ": " << r.result.status();
    }
  }
  // Refused creations still took their world seqs: the next world op runs
  // at once instead of waiting out the gap timeout (8 s).
  const auto start = std::chrono::steady_clock::now();
  Op barrier;
  barrier.kind = OpKind::kBarrier;
  ExpectAllOk(world->Collective(barrier), {0, 1, 2, 3});
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(5));

  // Unknown group: the client says so before reserving anything.
  auto client = cluster_->Client();
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->UseGroup("nope").code(), absl::StatusCode::kNotFound);
  // A non-member asked directly refuses.
  v1::OpRequest op;
  op.set_kind(v1::OP_KIND_BARRIER);
  op.set_group("even");
  op.set_seq(1000);
  grpc::ClientContext context;
  v1::OpResponse response;
  auto stub = testing::ClientWire(**client).Worker(1);
  ASSERT_TRUE(stub.ok()) << stub.status();
  const grpc::Status status = (*stub)->Submit(&context, op, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
      << status.error_message();
}

TEST_F(GroupsTest, WorkersReportTheirGroups) {
  auto world = Client("world");
  for (int rank = 0; rank < kWorkers; ++rank) {
    auto info = world->Info(rank);
    ASSERT_TRUE(info.ok()) << info.status();
    std::map<std::string, client::GroupInfo> groups;
    for (const auto& g : info->groups) groups[g.name] = g;
    ASSERT_TRUE(groups.count("world") && groups.count("even") &&
                groups.count("odd"));
    const client::GroupInfo& even = groups["even"];
    EXPECT_EQ(even.ranks, (std::vector<int>{0, 2}));
    EXPECT_EQ(even.group_rank, rank % 2 == 0 ? rank / 2 : -1);
    EXPECT_EQ(groups["odd"].group_rank, rank % 2 == 1 ? rank / 2 : -1);
    EXPECT_EQ(even.state, rank % 2 == 0 ? "ready" : "not a member");
  }
}

// ccctl: create a group, run on it with --group, list it in status, and
// destroy it.
TEST_F(GroupsTest, Ccctl) {
  auto binary = testing::BinaryPath("ccctl");
  ASSERT_TRUE(binary.ok()) << binary.status();
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("groups_test.", getpid());
  fs::create_directories(dir);
  struct Result {
    int exit_code;
    std::string out, err;
  };
  auto ccctl = [&](const std::string& args) {
    const std::string out = (dir / "out").string(),
                      err = (dir / "err").string();
    const std::string command =
        absl::StrCat("CCCTL_STATE_DIR=", (dir / "state").string(), " ", *binary,
                     " --coordinator ", cluster_->coordinator_address(), " ",
                     args, " >", out, " 2>", err, " </dev/null");
    const int status = std::system(command.c_str());
    auto slurp = [](const std::string& path) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      return text.str();
    };
    return Result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(out),
                  slurp(err)};
  };
  Result created = ccctl("group create pair --ranks 2,0");
  ASSERT_EQ(created.exit_code, 0) << created.err;
  Result dup = ccctl("group create pair --ranks 2,0");
  EXPECT_EQ(dup.exit_code, 1);
  EXPECT_NE(dup.err.find("ALREADY_EXISTS"), std::string::npos) << dup.err;

  Result reduced = ccctl("--group pair allreduce --op sum");
  ASSERT_EQ(reduced.exit_code, 0) << reduced.err;
  std::istringstream lines(reduced.out);
  std::string line;
  std::vector<std::string> rows;
  while (std::getline(lines, line)) {
    if (line.rfind("RANK", 0) == 0 || line.empty()) continue;
    rows.push_back(line);
    EXPECT_NE(line.find("[4.0]"), std::string::npos) << line;
  }
  ASSERT_EQ(rows.size(), 2u) << reduced.out;
  EXPECT_EQ(rows[0].substr(0, 1), "2");  // group order: world 2, then 0
  EXPECT_EQ(rows[1].substr(0, 1), "0");

  // Broadcast from world rank 0 (group rank 1) of "pair".
  Result broadcast = ccctl("--group pair broadcast --src 0 -o json");
  ASSERT_EQ(broadcast.exit_code, 0) << broadcast.err;
  EXPECT_NE(broadcast.out.find("1.0"), std::string::npos) << broadcast.out;
  Result outside = ccctl("--group pair broadcast --src 1");
  EXPECT_EQ(outside.exit_code, 2) << outside.err;

  Result bench =
      ccctl("--group pair bench all_reduce -b 64 -e 256 -n 2 -w 1 -c 1");
  EXPECT_EQ(bench.exit_code, 0) << bench.out << bench.err;

  Result status = ccctl("status");
  ASSERT_EQ(status.exit_code, 0) << status.err;
  for (const char* name : {"pair", "even", "odd"}) {
    EXPECT_NE(status.out.find(name), std::string::npos) << status.out;
  }
  EXPECT_NE(status.out.find("2,0"), std::string::npos) << status.out;
  Result ls = ccctl("group ls");
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("pair"), std::string::npos) << ls.out;
  Result unknown = ccctl("--group nope allreduce");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("NOT_FOUND"), std::string::npos) << unknown.err;

  // Destroyed: gone from every worker, ops on it refused, the name free.
  Result destroyed = ccctl("group destroy pair");
  ASSERT_EQ(destroyed.exit_code, 0) << destroyed.err;
  Result after = ccctl("group ls");
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.out.find("pair"), std::string::npos) << after.out;
  Result gone = ccctl("--group pair allreduce");
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("NOT_FOUND"), std::string::npos) << gone.err;
  Result again = ccctl("group destroy pair");
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("no group named 'pair'"), std::string::npos)
      << again.err;
  Result world = ccctl("group destroy world");
  EXPECT_EQ(world.exit_code, 1);
  EXPECT_NE(world.err.find("INVALID_ARGUMENT"), std::string::npos) << world.err;
  Result remade = ccctl("group create pair --ranks 0,1");
  EXPECT_EQ(remade.exit_code, 0) << remade.err;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ccl
