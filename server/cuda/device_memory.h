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

// Host <-> device copies, streamed in 4 MiB chunks through a pinned staging
// buffer of the device (allocated on first use, one copy at a time per
// device) with cudaMemcpyAsync on a dedicated stream; the copy is complete
// when these return. If pinned memory cannot be had they fall back to a
// plain cudaMemcpy.
absl::Status CopyToDevice(int device, void* dst, const void* src, size_t bytes);
absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes);

// Same bytes as the host FillBuffer. Zeros and constants are written on the
// device (memset / a replicating kernel), arange, arange + rank, random and
// affine by an element-wise kernel (fill_math.h); only affine fills that
// could overflow or produce a NaN (see ElementFillFor) are computed on the
// host in chunks and copied.
absl::Status FillDevice(int device, DType dtype, void* data, int64_t numel,
                        const Fill& fill, int rank);

}  // namespace ccl::cuda
