#include "server/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace ccl::cuda {

absl::StatusCode CudaErrorCode(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudaErrorStatus(cudaError_t error, const char* expr,
                             const char* file, int line) {
  return absl::Status(CudaErrorCode(error),
                      absl::StrCat(file, ":", line, ": ", expr,
                                   " failed: ", cudaGetErrorName(error), ": ",
                                   cudaGetErrorString(error)));
}

}  // namespace ccl::cuda
