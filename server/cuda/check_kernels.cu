#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "server/cuda/check_kernels.h"

namespace ccl::cuda {
namespace {

template <typename T, long long kLo, unsigned long long kHi>
__device__ T Saturate(double v) {
  if (isnan(v)) return 0;
  if (v <= static_cast<double>(kLo)) return static_cast<T>(kLo);
  if (v >= static_cast<double>(kHi)) return static_cast<T>(kHi);
  return static_cast<T>(v);
}

// Conversions as the host's StoreElement / LoadElement do them: floats
// round to nearest, integers saturate.
template <typename T>
struct Elem;
template <>
struct Elem<float> {
  static __device__ float Store(double v) { return static_cast<float>(v); }
  static __device__ double Load(float v) { return v; }
};
template <>
struct Elem<double> {
  static __device__ double Store(double v) { return v; }
  static __device__ double Load(double v) { return v; }
};
template <>
struct Elem<__half> {
  static __device__ __half Store(double v) { return __double2half(v); }
  static __device__ double Load(__half v) { return __half2float(v); }
};
template <>
struct Elem<__nv_bfloat16> {
  static __device__ __nv_bfloat16 Store(double v) {
    return __double2bfloat16(v);
  }
  static __device__ double Load(__nv_bfloat16 v) { return __bfloat162float(v); }
};
template <>
struct Elem<int8_t> {
  static __device__ int8_t Store(double v) {
    return Saturate<int8_t, -128, 127>(v);
  }
  static __device__ double Load(int8_t v) { return v; }
};
template <>
struct Elem<uint8_t> {
  static __device__ uint8_t Store(double v) {
    return Saturate<uint8_t, 0, 255>(v);
  }
  static __device__ double Load(uint8_t v) { return v; }
};
template <>
struct Elem<int32_t> {
  static __device__ int32_t Store(double v) {
    return Saturate<int32_t, -2147483648LL, 2147483647ULL>(v);
  }
  static __device__ double Load(int32_t v) { return v; }
};
template <>
struct Elem<int64_t> {
  static __device__ int64_t Store(double v) {
    return Saturate<int64_t, (-9223372036854775807LL - 1),
                    9223372036854775807ULL>(v);
  }
  static __device__ double Load(int64_t v) { return static_cast<double>(v); }
};

template <typename T>
__device__ double Round(double v) {
  return Elem<T>::Load(Elem<T>::Store(v));
}

__device__ double Pattern(bool prod, int rank, int64_t index) {
  if (prod) return 1 + ((rank + index) % 2);
  return (rank + 1) + (index % 3);
}

template <typename T>
__device__ double Reduced(const CheckSpec& s, int64_t index) {
  const bool prod = s.reduce == ReduceOp::kProd;
  auto contribution = [&](int rank) {
    const double v = Pattern(prod, rank, index);
    return s.reduce == ReduceOp::kPremulSum ? Round<T>(v * s.premul_scale) : v;
  };
  double acc = contribution(0);
  for (int r = 1; r < s.world; ++r) {
    const double v = contribution(r);
    switch (s.reduce) {
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = fmin(acc, v);
        break;
      case ReduceOp::kMax:
        acc = fmax(acc, v);
        break;
      default:
        acc += v;
        break;
    }
  }
  if (s.reduce == ReduceOp::kAvg) {
    acc = s.floating ? acc / s.world : trunc(acc / s.world);
  }
  return Round<T>(acc);
}

template <typename T>
__global__ void FillPatternKernel(T* data, int64_t n, bool prod, int rank) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    data[i] = Elem<T>::Store(Pattern(prod, rank, i));
  }
}

template <typename T>
__global__ void CountWrongKernel(const T* out, CheckSpec s,
                                 unsigned long long* wrong) {
  const bool prod = s.reduce == ReduceOp::kProd;
  unsigned long long local = 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       k < s.count; k += stride) {
    double want;
    if (s.reduced) {
      want = Reduced<T>(s, s.idx_base + k);
    } else {
      const int src = s.chunked ? static_cast<int>(k / s.chunk) : s.src;
      const int64_t idx = s.idx_base + (s.chunked ? k % s.chunk : k);
      want = Round<T>(Pattern(prod, src, idx));
    }
    const double got = Elem<T>::Load(out[k]);
    const double tol = s.tolerance * fmax(1.0, fabs(want));
    if (!(fabs(got - want) <= tol)) ++local;
  }
  if (local != 0) atomicAdd(wrong, local);
}

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t want = (n + kThreads - 1) / kThreads;
  return static_cast<int>(want < 4096 ? (want > 0 ? want : 1) : 4096);
}

template <typename F>
cudaError_t Dispatch(DType type, F&& f) {
  switch (type) {
    case DType::kFloat32:
      return f(static_cast<float*>(nullptr));
    case DType::kFloat64:
      return f(static_cast<double*>(nullptr));
    case DType::kFloat16:
      return f(static_cast<__half*>(nullptr));
    case DType::kBFloat16:
      return f(static_cast<__nv_bfloat16*>(nullptr));
    case DType::kInt8:
      return f(static_cast<int8_t*>(nullptr));
    case DType::kUInt8:
      return f(static_cast<uint8_t*>(nullptr));
    case DType::kInt32:
      return f(static_cast<int32_t*>(nullptr));
    case DType::kInt64:
      return f(static_cast<int64_t*>(nullptr));
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LaunchFillPattern(void* data, int64_t n, DType type, bool prod,
                              int rank, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  return Dispatch(type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    FillPatternKernel<T><<<Blocks(n), kThreads, 0, stream>>>(
        static_cast<T*>(data), n, prod, rank);
    return cudaGetLastError();
  });
}

cudaError_t LaunchCountWrong(const void* output, const CheckSpec& spec,
                             unsigned long long* wrong, cudaStream_t stream) {
  if (spec.count <= 0) return cudaSuccess;
  return Dispatch(spec.type, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    CountWrongKernel<T><<<Blocks(spec.count), kThreads, 0, stream>>>(
        static_cast<const T*>(output), spec, wrong);
    return cudaGetLastError();
  });
}

}  // namespace ccl::cuda
