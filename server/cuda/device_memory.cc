#include "server/cuda/device_memory.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/element.h"
#include "server/cuda/cuda_status.h"
#include "server/cuda/fill_kernels.h"

namespace ccl::cuda {
namespace {

// Pinned staging buffer of each device, for host <-> device copies.
constexpr size_t kPinnedBytes = 4 << 20;

// One per device, created on first use and kept for the life of the process
// (deliberately never freed: a static destructor would run after the CUDA
// runtime may have torn down). `mutex` serialises copies through `buffer`.
struct PinnedStaging {
  std::mutex mutex;
  bool tried = false;  // allocation attempted (and `buffer` set if it worked)
  std::byte* buffer = nullptr;
  cudaStream_t stream = nullptr;
};

PinnedStaging& StagingFor(int device) {
  static std::mutex mutex;
  static auto* stagings = new std::map<int, std::unique_ptr<PinnedStaging>>;
  std::lock_guard<std::mutex> lock(mutex);
  auto& staging = (*stagings)[device];
  if (!staging) staging = std::make_unique<PinnedStaging>();
  return *staging;
}

// With staging.mutex held and the device set: allocates the buffer and the
// stream once. False when pinned memory is unavailable (the caller falls
// back to a pageable cudaMemcpy).
bool EnsureStaging(PinnedStaging& staging) {
  if (staging.tried) return staging.buffer != nullptr;
  staging.tried = true;
  void* buffer = nullptr;
  if (cudaMallocHost(&buffer, kPinnedBytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreate(&stream) != cudaSuccess) {
    cudaGetLastError();
    cudaFreeHost(buffer);
    return false;
  }
  staging.buffer = static_cast<std::byte*>(buffer);
  staging.stream = stream;
  return true;
}

}  // namespace

int DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

absl::Status SetDevice(int device) {
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return absl::OkStatus();
}

absl::StatusOr<std::string> PciBusId(int device) {
  // NCCL's own buffer size (NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE).
  char bus_id[64] = {};
  CCL_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetPCIBusId(bus_id, static_cast<int>(sizeof(bus_id)), device));
  return std::string(bus_id);
}

absl::StatusOr<std::byte*> Malloc(int device, size_t bytes) {
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky, but keep the thread's error clean
    if (e == cudaErrorMemoryAllocation) {
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return absl::ResourceExhaustedError(absl::StrCat(
          "out of device memory on cuda:", device, " allocating ", bytes,
          " bytes (", free_bytes, " of ", total_bytes, " bytes free)"));
    }
    return cuda::CudaErrorStatus(e, "cudaMalloc", __FILE__, __LINE__);
  }
  return static_cast<std::byte*>(p);
}

void Free(int device, void* data) {
  if (data == nullptr) return;
  cudaSetDevice(device);
  cudaFree(data);
}

namespace {

// Host <-> device through the device's pinned staging buffer, a chunk at a
// time; a pageable copy where no buffer could be pinned.
absl::Status StagedCopy(int device, void* dst, const void* src, size_t bytes,
                        cudaMemcpyKind kind) {
  if (bytes == 0) return absl::OkStatus();
  const bool to_device = kind == cudaMemcpyHostToDevice;
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  PinnedStaging& staging = StagingFor(device);
  std::lock_guard<std::mutex> lock(staging.mutex);
  if (!EnsureStaging(staging)) {
    CCL_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, kind));
    // Pageable copies to the device may return before the DMA lands; ops
    // run on other streams, so finish here.
    if (to_device) CCL_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return absl::OkStatus();
  }
  auto* out = static_cast<std::byte*>(dst);
  const auto* in = static_cast<const std::byte*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kPinnedBytes, bytes - done);
    if (to_device) std::memcpy(staging.buffer, in + done, n);
    CCL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        to_device ? static_cast<void*>(out + done) : staging.buffer,
        to_device ? staging.buffer : static_cast<const void*>(in + done), n,
        kind, staging.stream));
    // The copy has landed (and the buffer is free again) once this returns.
    CCL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(staging.stream));
    if (!to_device) std::memcpy(out + done, staging.buffer, n);
    done += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CopyToDevice(int device, void* dst, const void* src,
                          size_t bytes) {
  return StagedCopy(device, dst, src, bytes, cudaMemcpyHostToDevice);
}

absl::Status CopyToHost(int device, void* dst, const void* src, size_t bytes) {
  return StagedCopy(device, dst, src, bytes, cudaMemcpyDeviceToHost);
}

absl::Status FillZeros(int device, void* data, size_t bytes) {
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  CCL_CUDA_RETURN_IF_ERROR(cudaMemset(data, 0, bytes));
  CCL_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::Status FillRepeated(int device, void* data, size_t bytes,
                          const void* pattern, int pattern_bytes) {
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  CCL_CUDA_RETURN_IF_ERROR(
      LaunchReplicate(data, bytes, pattern, pattern_bytes, nullptr));
  CCL_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

absl::Status FillElements(int device, DType dtype, void* data, int64_t numel,
                          const ElementFillParams& params) {
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  CCL_CUDA_RETURN_IF_ERROR(
      LaunchElementFill(dtype, data, numel, params, nullptr));
  CCL_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return absl::OkStatus();
}

}  // namespace ccl::cuda
