// CUDA runtime errors as absl::Status, with the file, line and call that
// failed and CUDA's own name and message for the error.
#pragma once

#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace ccl::cuda {

absl::StatusCode CudaErrorCode(cudaError_t error);
// "<file>:<line>: <expr> failed: <cudaGetErrorName>: <cudaGetErrorString>".
absl::Status CudaErrorStatus(cudaError_t error, const char* expr,
                             const char* file, int line);

}  // namespace ccl::cuda

// Returns from the enclosing function (absl::Status or StatusOr) on error.
#define CCL_CUDA_RETURN_IF_ERROR(expr)                                      \
  do {                                                                      \
    cudaError_t _ccl_cuda_error = (expr);                                   \
    if (_ccl_cuda_error != cudaSuccess) {                                   \
      return ::ccl::cuda::CudaErrorStatus(_ccl_cuda_error, #expr, __FILE__, \
                                          __LINE__);                        \
    }                                                                       \
  } while (0)
