// Host-side pieces of the NCCL backend that need no GPU: dtype and reduce-op
// mapping, NCCL error mapping to absl::Status, and the unique id's
// encoding for the KV store. Compiled only when CCL_HAVE_CUDA (it needs
// nccl.h and cuda_runtime.h), unit-tested without a device.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/types.h"
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

// KV-store key of the unique id of communicator `prefix` ("gen3/world").
std::string UniqueIdKey(const std::string& prefix);
// Hex, so that any store (text or bytes) carries it.
std::string EncodeUniqueId(const ncclUniqueId& id);
absl::StatusOr<ncclUniqueId> DecodeUniqueId(const std::string& text);

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
