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

template <DType D>
__global__ void ElementFillKernel(void* dst, int64_t numel,
                                  ElementFillParams params) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < numel; i += stride) {
    StoreFillElement<D>(dst, i, ElementFillValue(params, i));
  }
}

template <DType D>
cudaError_t LaunchElement(void* dst, int64_t numel,
                          const ElementFillParams& params,
                          cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t want = (numel + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(want < 65535 ? want : 65535);
  ElementFillKernel<D><<<blocks, kThreads, 0, stream>>>(dst, numel, params);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchElementFill(DType dtype, void* dst, int64_t numel,
                              const ElementFillParams& params,
                              cudaStream_t stream) {
  if (numel <= 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      return LaunchElement<DType::kFloat32>(dst, numel, params, stream);
    case DType::kFloat64:
      return LaunchElement<DType::kFloat64>(dst, numel, params, stream);
    case DType::kFloat16:
      return LaunchElement<DType::kFloat16>(dst, numel, params, stream);
    case DType::kBFloat16:
      return LaunchElement<DType::kBFloat16>(dst, numel, params, stream);
    case DType::kInt8:
      return LaunchElement<DType::kInt8>(dst, numel, params, stream);
    case DType::kUInt8:
      return LaunchElement<DType::kUInt8>(dst, numel, params, stream);
    case DType::kInt32:
      return LaunchElement<DType::kInt32>(dst, numel, params, stream);
    case DType::kInt64:
      return LaunchElement<DType::kInt64>(dst, numel, params, stream);
    case DType::kFp8E4M3:
      return LaunchElement<DType::kFp8E4M3>(dst, numel, params, stream);
    case DType::kFp8E5M2:
      return LaunchElement<DType::kFp8E5M2>(dst, numel, params, stream);
  }
  return cudaErrorInvalidValue;
}

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
