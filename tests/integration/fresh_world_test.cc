// A fresh world's first requests, sent as soon as the coordinator reports
// every rank registered, while the workers may still be building their
// communicators (NCCL's init over sockets takes seconds: on one GPU shared
// by simulated hosts, 6 of 6 fresh 2-rank worlds filled rank 1's tensor with
// rank 0's values and the first all_reduce printed [2.0] instead of [3.0]).
// A fill with the rank must get each worker's rank in that world, and the
// first all_reduce must be right, every time.
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/local_cluster.h"
#if CCL_CONFORMANCE_CUDA
#include <cuda_runtime.h>
#endif

#ifndef CCL_CONFORMANCE_DEVICE
#define CCL_CONFORMANCE_DEVICE "cpu"
#endif

namespace ccl {
namespace {

using client::FillKind;
using std::chrono::seconds;

int EnvOr(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : fallback;
}

TEST(FreshWorldTest, TheFirstRankFillAndAllReduceOfAFreshWorldAreRight) {
  const int workers = EnvOr("CCL_FRESH_WORLD_WORKERS", 2);
  const int repeats = EnvOr("CCL_FRESH_WORLD_REPEATS", 3);
#if CCL_CONFORMANCE_CUDA
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (std::string missing = testing::CudaWorkersMissing(workers, gpus);
      !missing.empty()) {
    GTEST_SKIP() << missing;
  }
#endif
  const double want = workers * (workers + 1) / 2.0;
  for (int rep = 0; rep < repeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("fresh world ", rep + 1, " of ", repeats));
    testing::LocalClusterOptions options;
    options.workers = workers;
    options.device = CCL_CONFORMANCE_DEVICE;
    options.wait_for_workers_ready = false;
    auto cluster = testing::LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    auto client = (*cluster)->Client(seconds(60));
    ASSERT_TRUE(client.ok()) << client.status();
    const std::vector<int> ranks = (*client)->AllRanks();
    for (const auto& r :
         (*client)->Alloc(ranks, client::TensorSpec{"y", DType::kFloat32, {4}},
                          client::Fill{FillKind::kRankPlusOne})) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
    for (int rank : ranks) {
      auto filled = (*client)->Summarize(rank, "y", 4);
      ASSERT_TRUE(filled.ok()) << filled.status();
      EXPECT_EQ(filled->head, std::vector<double>(4, rank + 1.0))
          << "rank " << rank << " was filled with another rank's values";
    }
    client::Op all_reduce;
    all_reduce.kind = OpKind::kAllReduce;
    all_reduce.input = "y";
    for (const auto& r : (*client)->Collective(all_reduce)) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
    for (int rank : ranks) {
      auto reduced = (*client)->Summarize(rank, "y", 4);
      ASSERT_TRUE(reduced.ok()) << reduced.status();
      EXPECT_EQ(reduced->head, std::vector<double>(4, want)) << "rank " << rank;
    }
    if (HasFailure()) (*cluster)->DumpLogsOnFailure();
  }
}

}  // namespace
}  // namespace ccl
