// CUDA device memory: allocation, copies and fills on one device. Every call
// sets the device on the calling thread first, so any thread (gRPC, executor)
// may call. Compiled only when CCL_HAVE_CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/cuda/fill_math.h"

namespace ccl::cuda {

// Number of visible devices; 0 (not an error) when there is no GPU or no
// driver.
int DeviceCount();
absl::Status SetDevice(int device);
// The device's PCI bus id ("0000:3b:00.0"), NCCL's name for a GPU.
absl::StatusOr<std::string> PciBusId(int device);

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

// Fills, complete when they return: zeros; a repeated element pattern of
// `pattern_bytes`; an element-wise fill computed by the same code as the
// host's (fill_math.h), so the bytes are identical.
absl::Status FillZeros(int device, void* data, size_t bytes);
absl::Status FillRepeated(int device, void* data, size_t bytes,
                          const void* pattern, int pattern_bytes);
absl::Status FillElements(int device, DType dtype, void* data, int64_t numel,
                          const ElementFillParams& params);

}  // namespace ccl::cuda
