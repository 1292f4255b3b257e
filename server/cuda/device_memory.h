// CUDA device memory for the tensor store: allocation, copies and fills on
// one device. Every call sets the device on the calling thread first, so any
// thread (gRPC, executor) may call. Compiled only when CCL_HAVE_CUDA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/types.h"
#include "server/worker_core.h"

namespace ccl::cuda {

// Number of visible devices; 0 (not an error) when there is no GPU or no
// driver.
int DeviceCount();
absl::Status SetDevice(int device);

// RESOURCE_EXHAUSTED when the device is out of memory.
absl::StatusOr<std::byte*> Malloc(int device, size_t bytes);
void Free(int device, void* data);

absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes);
absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes);

// Same values as the host FillBuffer. Zeros and constants are written on the
// device (memset / a replicating kernel); element-wise fills are computed on
// the host in chunks and copied.
absl::Status FillDevice(int device, DType dtype, void* data, int64_t numel,
                        const Fill& fill, int rank);

}  // namespace ccl::cuda
