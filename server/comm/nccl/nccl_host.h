// Host-side pieces of the NCCL backend that need no GPU: dtype and reduce-op
// mapping, NCCL error mapping to absl::Status, and the unique id's
// encoding for the KV store. Compiled only when CCL_HAVE_CUDA (it needs
// nccl.h and cuda_runtime.h), unit-tested without a device.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/types.h"
#include "common/unique_id_plan.h"
#include "server/comm/kv_store.h"
#include "server/cuda/cuda_status.h"

namespace ccl::nccl {

// UNIMPLEMENTED for dtypes this NCCL build cannot carry.
absl::StatusOr<ncclDataType_t> ToNcclDataType(DType dtype);
// Built-in reduce ops; premul_sum is created per op with
// ncclRedOpCreatePreMulSum, so it is not mapped here (UNIMPLEMENTED).
absl::StatusOr<ncclRedOp_t> ToNcclRedOp(ReduceOp op);

absl::StatusCode NcclResultCode(ncclResult_t result);

// "<file>:<line>: <expr> failed: <ncclGetErrorString> (<last_error>)".
absl::Status NcclErrorStatus(ncclResult_t result, const char* expr,
                             const char* file, int line,
                             const char* last_error);

// Hex, so that any store (text or bytes) carries it. The keys are in
// unique_id_plan.h.
std::string EncodeUniqueId(const ncclUniqueId& id);
absl::StatusOr<ncclUniqueId> DecodeUniqueId(const std::string& text);
// The value of UniqueIdListKey: the ids in order, packed (PackUniqueIds),
// not hex: every rank of a large world reads it, so its size is paid
// world-wide.
std::string EncodeUniqueIdList(const std::vector<ncclUniqueId>& ids);
absl::StatusOr<std::vector<ncclUniqueId>> DecodeUniqueIdList(
    const std::string& bytes, int count);

// The unique ids of the communicator under `prefix` ("gen3/world"), made
// and handed out through `store` as unique_id_plan.h describes: one, or one
// per block of ranks. `make_id` is ncclGetUniqueId (tests pass their own).
// Waits up to `timeout` for what other ranks post.
absl::StatusOr<std::vector<ncclUniqueId>> ExchangeUniqueIds(
    int rank, int size, int ranks_per_root, const std::string& prefix,
    KvStore& store, std::chrono::milliseconds timeout,
    const std::function<absl::StatusOr<ncclUniqueId>()>& make_id);

// Ranks per unique id for ncclCommInitRankScalable: $CCL_NCCL_RANKS_PER_ROOT
// or the default (unique_id_plan.h); INVALID_ARGUMENT naming the variable
// when it is malformed. 0 (always one id) when this NCCL predates 2.23.
absl::StatusOr<int> RanksPerRootFromEnv();

}  // namespace ccl::nccl

// Returns from the enclosing function (absl::Status or StatusOr) on error.
// ncclInProgress is NOT an error here; callers of non-blocking comms that
// can see it handle it themselves.
#define CCL_NCCL_RETURN_IF_ERROR(expr)                                       \
  do {                                                                       \
    ncclResult_t _ccl_nccl_result = (expr);                                  \
    if (_ccl_nccl_result != ncclSuccess &&                                   \
        _ccl_nccl_result != ncclInProgress) {                                \
      return ::ccl::nccl::NcclErrorStatus(_ccl_nccl_result, #expr, __FILE__, \
                                          __LINE__,                          \
                                          ncclGetLastError(nullptr));        \
    }                                                                        \
  } while (0)
