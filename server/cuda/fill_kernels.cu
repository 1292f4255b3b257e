#include <cstdint>
#include <cstring>

#include "server/cuda/fill_kernels.h"

namespace ccl::cuda {
namespace {

template <typename T>
__global__ void ReplicateKernel(T* dst, size_t n, T value) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = value;
  }
}

template <typename T>
cudaError_t Launch(void* dst, size_t bytes, const void* pattern,
                   cudaStream_t stream) {
  T value;
  std::memcpy(&value, pattern, sizeof(T));
  const size_t n = bytes / sizeof(T);
  if (n == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const size_t want = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(want < 65535 ? want : 65535);
  ReplicateKernel<T>
      <<<blocks, kThreads, 0, stream>>>(static_cast<T*>(dst), n, value);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchReplicate(void* dst, size_t bytes, const void* pattern,
                            int esize, cudaStream_t stream) {
  switch (esize) {
    case 1:
      return Launch<uint8_t>(dst, bytes, pattern, stream);
    case 2:
      return Launch<uint16_t>(dst, bytes, pattern, stream);
    case 4:
      return Launch<uint32_t>(dst, bytes, pattern, stream);
    case 8:
      return Launch<uint64_t>(dst, bytes, pattern, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ccl::cuda
