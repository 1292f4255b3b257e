// The fixture of the failure suites (failure_test.cc, refusal_test.cc):
// real processes on 127.0.0.1 (CUDA workers when built with
// CCL_CONFORMANCE_DEVICE="cuda"), short heartbeats so a lost rank is
// noticed quickly, and the checks every case ends with.
#ifndef CCL_TESTS_INTEGRATION_FAILURE_FIXTURE_H_
#define CCL_TESTS_INTEGRATION_FAILURE_FIXTURE_H_

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/client_wire.h"
#include "tests/testing/local_cluster.h"

#ifndef CCL_CONFORMANCE_DEVICE
#define CCL_CONFORMANCE_DEVICE "cpu"
#endif

namespace ccl::failure_testing {

using client::ClusterClient;
using client::FillKind;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr bool kCuda = std::string_view(CCL_CONFORMANCE_DEVICE) == "cuda";
// CPU: three ranks, so a kill leaves two survivors. A 2-GPU machine has two;
// $CCL_FAILURE_WORKERS sets another size (scripts/gpu-check.sh runs 4
// simulated hosts on one GPU, so that a shrink goes 4 -> 3).
inline int FailureWorkers() {
  const char* value = std::getenv("CCL_FAILURE_WORKERS");
  if (value != nullptr && std::atoi(value) >= 2) return std::atoi(value);
  return kCuda ? 2 : 3;
}
inline const int kWorkers = FailureWorkers();
constexpr int kOpTimeoutMs = kCuda ? 8000 : 4000;
// Every survivor's op ends within the op timeout plus the arrival check
// and slack for a loaded 2-core machine.
constexpr auto kOpBound = milliseconds(kOpTimeoutMs) + seconds(6);
constexpr auto kRecovery = seconds(60);

inline int Repeats(int fallback) {
  const char* value = std::getenv("CCL_FAILURE_REPEATS");
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : fallback;
}

// A float32 tensor on the worker's own device (cuda:i for worker i on the
// GPU machine).
inline absl::StatusOr<client::TensorInfo> AllocOnDevice(ClusterClient& client,
                                                        int rank,
                                                        const std::string& name,
                                                        int64_t numel,
                                                        FillKind fill) {
  return client.Alloc(rank, client::TensorSpec{name, DType::kFloat32, {numel}},
                      client::Fill{fill});
}

inline client::Op AllReduce(const std::string& tensor, bool async = false) {
  client::Op op;
  op.kind = OpKind::kAllReduce;
  op.input = tensor;
  op.async = async;
  return op;
}

inline v1::OpRequest WireAllReduce(const std::string& tensor, bool async) {
  v1::OpRequest op;
  op.set_kind(v1::OP_KIND_ALL_REDUCE);
  op.set_input(tensor);
  op.set_reduce_op(v1::REDUCE_OP_SUM);
  op.set_async(async);
  return op;
}

// Each rank's part of an op at a seq the test chose, sent as is (the
// library always sends every rank the same op at a seq of its own).
inline client::RankResults<v1::OpResponse> Submit(
    ClusterClient& client, const std::vector<int>& ranks,
    const std::function<v1::OpRequest(int rank)>& op_for_rank) {
  return testing::ClientWire(client).Submit(
      ranks, op_for_rank,
      client.options().timeout + milliseconds(kOpTimeoutMs));
}

class FailureTest : public ::testing::Test {
 protected:
  virtual std::vector<std::string> ExtraCoordinatorArgs() const { return {}; }

  void SetUp() override {
    testing::LocalClusterOptions options;
    options.workers = kWorkers;
    options.device = CCL_CONFORMANCE_DEVICE;
    options.worker_args = {"--op-timeout-ms", absl::StrCat(kOpTimeoutMs)};
    // Lost within 1.5 s, so a replacement can take the rank soon.
    options.coordinator_args = {"--heartbeat-interval-ms", "200",
                                "--heartbeat-timeout-ms", "1500"};
    for (const std::string& arg : ExtraCoordinatorArgs()) {
      options.coordinator_args.push_back(arg);
    }
    auto cluster = testing::LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  std::unique_ptr<ClusterClient> Client(milliseconds timeout = seconds(30)) {
    auto client = cluster_->Client(timeout);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Every rank's "x" = rank + 1 (n elements), all-reduced: each element is
  // 1 + 2 + ... + world on every rank.
  void ExpectCorrectAllReduce(const std::string& name, int64_t n = 1000) {
    auto client = Client();
    ASSERT_NE(client, nullptr);
    const int world = client->world_size();
    for (int r = 0; r < world; ++r) {
      (void)client->Free(r, name);
      ASSERT_TRUE(
          AllocOnDevice(*client, r, name, n, FillKind::kRankPlusOne).ok());
    }
    for (const auto& r : client->Collective(AllReduce(name))) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
    std::vector<int> ranks(world);
    std::iota(ranks.begin(), ranks.end(), 0);
    ExpectEveryElement(*client, name, ranks, world * (world + 1) / 2.0);
  }

  // Every element of `name` on each of `ranks` is `expected`.
  void ExpectEveryElement(ClusterClient& client, const std::string& name,
                          const std::vector<int>& ranks, double expected) {
    for (int r : ranks) {
      auto summary = client.Summarize(r, name, 1);
      ASSERT_TRUE(summary.ok()) << "rank " << r << ": " << summary.status();
      EXPECT_EQ(summary->min, expected) << "rank " << r;
      EXPECT_EQ(summary->max, expected) << "rank " << r;
    }
  }

  // "keep" = arange + rank on every rank, to check survivors keep tensors.
  void AllocKeep(int rank) {
    auto client = Client();
    ASSERT_NE(client, nullptr);
    auto keep =
        AllocOnDevice(*client, rank, "keep", 4096, FillKind::kArangePlusRank);
    ASSERT_TRUE(keep.ok()) << "rank " << rank << ": " << keep.status();
  }
  void ExpectKeep(int rank) {
    auto client = Client();
    ASSERT_NE(client, nullptr);
    auto summary = client->Summarize(rank, "keep", 2);
    ASSERT_TRUE(summary.ok()) << "rank " << rank << ": " << summary.status();
    ASSERT_EQ(summary->head.size(), 2u);
    EXPECT_EQ(summary->head[0], rank);
    EXPECT_EQ(summary->head[1], rank + 1);
    EXPECT_EQ(summary->sum, 4096.0 * 4095 / 2 + 4096.0 * rank);
  }

  // Every rank's `name`, n float32 elements filled as `fill`.
  void AllocEverywhere(ClusterClient& client, const std::string& name,
                       int64_t n, FillKind fill) {
    for (int r = 0; r < kWorkers; ++r) {
      auto allocated = AllocOnDevice(client, r, name, n, fill);
      ASSERT_TRUE(allocated.ok()) << "rank " << r << ": " << allocated.status();
    }
  }

  // Element 0 of `name` on every rank is `expected(rank)`: what a refused or
  // withdrawn op must leave untouched.
  void ExpectFirstElements(ClusterClient& client, const std::string& name,
                           const std::function<double(int rank)>& expected,
                           const std::string& why) {
    for (int r = 0; r < kWorkers; ++r) {
      auto summary = client.Summarize(r, name, 1);
      ASSERT_TRUE(summary.ok()) << summary.status();
      ASSERT_FALSE(summary->head.empty());
      EXPECT_EQ(summary->head[0], expected(r)) << "rank " << r << ": " << why;
    }
  }

  // After a refusal the world goes on as it was: a correct all_reduce, no
  // new generation.
  void ExpectTheWorldGoesOnAt(int64_t generation) {
    ExpectCorrectAllReduce("check");
    auto client = Client();
    ASSERT_NE(client, nullptr);
    EXPECT_EQ(client->world().generation, generation);
  }

  // An async all_reduce of `tensor` at a reserved seq, submitted to every
  // rank but `victim` on the GPU machine: a 1 GiB all_reduce lasts ~7 ms on
  // NVLink, shorter than a kill or a stop can be aimed, so there the victim
  // never joins and its peers' kernels wait for it in NCCL, which is the
  // abort path under test. On CPU every rank runs it and the fault lands
  // while bytes move. Returns each runner's work id (0 for the victim).
  std::vector<int64_t> SubmitAsyncAllReduceWithout(ClusterClient& client,
                                                   int victim,
                                                   const std::string& tensor,
                                                   int64_t generation) {
    std::vector<int> runners;
    for (int r = 0; r < kWorkers; ++r) {
      if (!kCuda || r != victim) runners.push_back(r);
    }
    std::vector<int64_t> work_ids(kWorkers, 0);
    auto seq = testing::ClientWire(client).ReserveSeq(1);
    EXPECT_TRUE(seq.ok()) << seq.status();
    if (!seq.ok()) return work_ids;
    for (const auto& r : Submit(client, runners, [&](int) {
           v1::OpRequest op = WireAllReduce(tensor, true);
           op.set_seq(*seq);
           op.set_generation(generation);
           return op;
         })) {
      EXPECT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
      if (r.result.ok()) work_ids[r.rank] = r.result->work_id();
    }
    return work_ids;
  }

  // SIGKILLs worker `rank` and waits until the process is gone.
  void KillWorker(int rank) {
    ASSERT_TRUE(cluster_->worker(rank).Signal(SIGKILL).ok());
    ASSERT_TRUE(cluster_->worker(rank).WaitForExit(seconds(10)).ok());
  }

  // Kills worker `rank`, starts a new process in its place, and waits until
  // the world has re-formed at `generation` + 1.
  void ReplaceWorker(int rank, int64_t generation) {
    ASSERT_NO_FATAL_FAILURE(KillWorker(rank));
    ASSERT_TRUE(cluster_->RestartWorker(rank).ok());
    auto ready = cluster_->WaitUntilReady(kRecovery, generation + 1);
    ASSERT_TRUE(ready.ok()) << ready.status();
  }

  // Every worker's threads, when a worker stopped answering: what a hang
  // report needs. Uses gdb when the machine has it, else eu-stack (the GPU
  // machine has no gdb; scripts/gpu-check.sh bundles eu-stack).
  void DumpStacks() {
    for (int r = 0; r < kWorkers; ++r) {
      if (!cluster_->worker(r).running()) continue;
      const int pid = cluster_->worker(r).pid();
      const std::string command = absl::StrCat(
          "if command -v gdb >/dev/null; then gdb -p ", pid,
          " -batch -ex 'thread apply all bt 25' 2>/dev/null | grep -E "
          "'^Thread|^#' >&2; elif command -v eu-stack >/dev/null; then "
          "eu-stack -p ",
          pid, " >&2 2>/dev/null; fi");
      std::fprintf(stderr, "----- threads of worker %d -----\n", r);
      (void)std::system(command.c_str());
    }
  }

  std::unique_ptr<testing::LocalCluster> cluster_;
};

}  // namespace ccl::failure_testing

#endif  // CCL_TESTS_INTEGRATION_FAILURE_FIXTURE_H_
