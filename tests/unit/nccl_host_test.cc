// The NCCL backend's host-side pieces (no GPU needed), and the worker core's
// behaviour for cuda devices on a machine without one.
#include "server/comm/nccl/nccl_host.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/worker_core.h"
#include "server/cuda/device_memory.h"
#include "tests/testing/in_memory_kv_store.h"

namespace ccl {
namespace {

TEST(NcclHost, DTypeMap) {
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kFloat32), ncclFloat32);
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kFloat64), ncclFloat64);
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kFloat16), ncclFloat16);
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kBFloat16), ncclBfloat16);
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kInt8), ncclInt8);
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kUInt8), ncclUint8);
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kInt32), ncclInt32);
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kInt64), ncclInt64);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kFp8E4M3), ncclFloat8e4m3);
  EXPECT_EQ(*nccl::ToNcclDataType(DType::kFp8E5M2), ncclFloat8e5m2);
#else
  EXPECT_EQ(nccl::ToNcclDataType(DType::kFp8E4M3).status().code(),
            absl::StatusCode::kUnimplemented);
#endif
}

TEST(NcclHost, RedOpMap) {
  EXPECT_EQ(*nccl::ToNcclRedOp(ReduceOp::kSum), ncclSum);
  EXPECT_EQ(*nccl::ToNcclRedOp(ReduceOp::kProd), ncclProd);
  EXPECT_EQ(*nccl::ToNcclRedOp(ReduceOp::kMin), ncclMin);
  EXPECT_EQ(*nccl::ToNcclRedOp(ReduceOp::kMax), ncclMax);
  EXPECT_EQ(*nccl::ToNcclRedOp(ReduceOp::kAvg), ncclAvg);
  EXPECT_EQ(nccl::ToNcclRedOp(ReduceOp::kPremulSum).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(NcclHost, ErrorMapping) {
  EXPECT_EQ(nccl::NcclResultCode(ncclSuccess), absl::StatusCode::kOk);
  EXPECT_EQ(nccl::NcclResultCode(ncclInvalidArgument),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nccl::NcclResultCode(ncclInvalidUsage),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(nccl::NcclResultCode(ncclRemoteError),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(nccl::NcclResultCode(ncclSystemError),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(nccl::NcclResultCode(ncclInternalError),
            absl::StatusCode::kInternal);
  EXPECT_EQ(cuda::CudaErrorCode(cudaErrorMemoryAllocation),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cuda::CudaErrorCode(cudaErrorNoDevice),
            absl::StatusCode::kFailedPrecondition);

  absl::Status s = nccl::NcclErrorStatus(ncclInvalidArgument, "ncclFoo(x)",
                                         "a.cc", 12, "bad count");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a.cc:12"), std::string::npos) << s;
  EXPECT_NE(s.message().find("ncclFoo(x)"), std::string::npos) << s;
  EXPECT_NE(s.message().find("bad count"), std::string::npos) << s;
  EXPECT_NE(s.message().find(ncclGetErrorString(ncclInvalidArgument)),
            std::string::npos)
      << s;

  absl::Status c =
      cuda::CudaErrorStatus(cudaErrorMemoryAllocation, "cudaMalloc", "b.cc", 3);
  EXPECT_EQ(c.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.message().find("b.cc:3"), std::string::npos) << c;
  EXPECT_NE(c.message().find("cudaErrorMemoryAllocation"), std::string::npos)
      << c;
}

absl::Status UsesMacros(ncclResult_t nccl_result, cudaError_t cuda_result) {
  CCL_NCCL_RETURN_IF_ERROR(nccl_result);
  CCL_CUDA_RETURN_IF_ERROR(cuda_result);
  return absl::OkStatus();
}

TEST(NcclHost, Macros) {
  EXPECT_TRUE(UsesMacros(ncclSuccess, cudaSuccess).ok());
  // In progress is left to the caller of a non-blocking comm.
  EXPECT_TRUE(UsesMacros(ncclInProgress, cudaSuccess).ok());
  EXPECT_EQ(UsesMacros(ncclInvalidUsage, cudaSuccess).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(UsesMacros(ncclSuccess, cudaErrorMemoryAllocation).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(NcclHost, UniqueIdRoundTrip) {
  ncclUniqueId id;
  for (size_t i = 0; i < sizeof(id.internal); ++i) {
    id.internal[i] = static_cast<char>(i * 37 + 5);
  }
  const std::string text = nccl::EncodeUniqueId(id);
  EXPECT_EQ(text.size(), 2 * sizeof(id.internal));
  auto back = nccl::DecodeUniqueId(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(std::memcmp(back->internal, id.internal, sizeof(id.internal)), 0);
  EXPECT_FALSE(nccl::DecodeUniqueId("abc").ok());
  EXPECT_FALSE(nccl::DecodeUniqueId(std::string(text.size(), 'z')).ok());
  EXPECT_EQ(nccl::UniqueIdKey("gen3/world"), "nccl/gen3/world/id");
}

TEST(NcclHost, UniqueIdListRoundTrip) {
  std::vector<ncclUniqueId> ids(3);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (size_t b = 0; b < sizeof(ids[i].internal); ++b) {
      ids[i].internal[b] = static_cast<char>(i * 31 + b);
    }
  }
  const std::string bytes = nccl::EncodeUniqueIdList(ids);
  // No trailing zeros to drop here: the length byte is all it adds.
  EXPECT_EQ(bytes.size(), 3 * (1 + nccl::kUniqueIdBytes));
  auto back = nccl::DecodeUniqueIdList(bytes, 3);
  ASSERT_TRUE(back.ok()) << back.status();
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(std::memcmp((*back)[i].internal, ids[i].internal,
                          sizeof(ids[i].internal)),
              0);
  }
  EXPECT_EQ(nccl::DecodeUniqueIdList(bytes, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(nccl::DecodeUniqueIdList("", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Every rank of a world runs the exchange on its own thread over one store,
// with ids that name the rank that made them.
std::vector<std::vector<ncclUniqueId>> Exchange(int size, int ranks_per_root,
                                                std::vector<int>* makers) {
  testing::InMemoryKvStore store;
  std::vector<std::vector<ncclUniqueId>> got(size);
  std::vector<absl::Status> errors(size);
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto ids = nccl::ExchangeUniqueIds(
          rank, size, ranks_per_root, "gen1/world", store,
          std::chrono::seconds(30),
          [&, rank]() -> absl::StatusOr<ncclUniqueId> {
            std::lock_guard<std::mutex> lock(mutex);
            makers->push_back(rank);
            ncclUniqueId id{};
            std::snprintf(id.internal, sizeof(id.internal), "made by %d", rank);
            return id;
          });
      if (ids.ok()) {
        got[rank] = *ids;
      } else {
        errors[rank] = ids.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_TRUE(errors[rank].ok()) << rank << ": " << errors[rank];
  }
  return got;
}

TEST(NcclHost, ExchangeHandsEveryRankTheIdsOfEveryBlock) {
  std::vector<int> makers;
  // 40 ranks, 16 per root: 3 blocks of 14, 13 and 13 ranks.
  auto got = Exchange(40, 16, &makers);
  std::sort(makers.begin(), makers.end());
  EXPECT_EQ(makers, (std::vector<int>{0, 14, 27}));
  for (int rank = 0; rank < 40; ++rank) {
    ASSERT_EQ(got[rank].size(), 3u) << rank;
    for (int block = 0; block < 3; ++block) {
      EXPECT_EQ(std::memcmp(got[rank][block].internal, got[0][block].internal,
                            sizeof(ncclUniqueId)),
                0);
    }
  }
  EXPECT_STREQ(got[39][1].internal, "made by 14");
}

TEST(NcclHost, ExchangeOfASmallWorldIsOneIdFromRankZero) {
  std::vector<int> makers;
  auto got = Exchange(5, 16, &makers);
  EXPECT_EQ(makers, (std::vector<int>{0}));
  for (const auto& ids : got) {
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_STREQ(ids[0].internal, "made by 0");
  }
}

TEST(NcclHost, ExchangeWithoutRankZeroTimesOut) {
  testing::InMemoryKvStore store;
  auto ids = nccl::ExchangeUniqueIds(1, 2, 128, "gen1/world", store,
                                     std::chrono::milliseconds(20),
                                     []() -> absl::StatusOr<ncclUniqueId> {
                                       return absl::InternalError("not called");
                                     });
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(NcclHost, RanksPerRootComesFromTheEnvironment) {
  unsetenv(nccl::kRanksPerRootEnv);
  EXPECT_EQ(*nccl::RanksPerRootFromEnv(), nccl::kDefaultRanksPerRoot);
  setenv(nccl::kRanksPerRootEnv, "1", 1);
  EXPECT_EQ(*nccl::RanksPerRootFromEnv(), 1);
  setenv(nccl::kRanksPerRootEnv, "lots", 1);
  auto bad = nccl::RanksPerRootFromEnv();
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              ::testing::HasSubstr("CCL_NCCL_RANKS_PER_ROOT='lots'"));
  unsetenv(nccl::kRanksPerRootEnv);
}

TEST(NcclHost, CudaWorkerWithoutGpu) {
  if (cuda::DeviceCount() > 0) {
    GTEST_SKIP() << "a CUDA device is visible; this checks the no-GPU path";
  }
  WorkerConfig config;
  config.device = Device{DeviceKind::kCuda, 0};
  auto core = WorkerCore::Create(config);
  EXPECT_EQ(core.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(core.status().message().find("no CUDA device"), std::string::npos)
      << core.status();
}

}  // namespace
}  // namespace ccl
