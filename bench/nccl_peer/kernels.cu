#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "bench/nccl_peer/kernels.h"

namespace ccl::peer {
namespace {

// ncclRedOp_t's values (RedOp in core.h).
constexpr int kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4;

// Per element type: conversions through double (every pattern value is a
// small integer, exact in double and in the type), whether it holds
// negatives, the span of values an op that moves data gets (as wide as the
// type keeps exact, so that a misplaced block rarely matches by chance), and
// the relative precision for avg's tolerance.
template <typename T>
struct Num;

template <typename T, bool kIsSigned, uint64_t kValueSpan>
struct IntNum {
  static constexpr bool kFloat = false;
  static constexpr bool kSigned = kIsSigned;
  static constexpr uint64_t kSpan = kValueSpan;
  static constexpr double kEps = 0;
  // Integer ops wrap; so does this narrowing.
  __device__ static T From(double v) {
    if constexpr (kIsSigned) {
      return static_cast<T>(static_cast<long long>(v));
    } else {
      return static_cast<T>(static_cast<unsigned long long>(v));
    }
  }
  __device__ static double To(T v) { return static_cast<double>(v); }
};
template <>
struct Num<int8_t> : IntNum<int8_t, true, 256> {};
template <>
struct Num<uint8_t> : IntNum<uint8_t, false, 256> {};
template <>
struct Num<int32_t> : IntNum<int32_t, true, uint64_t{1} << 30> {};
template <>
struct Num<uint32_t> : IntNum<uint32_t, false, uint64_t{1} << 30> {};
template <>
struct Num<int64_t> : IntNum<int64_t, true, uint64_t{1} << 30> {};
template <>
struct Num<uint64_t> : IntNum<uint64_t, false, uint64_t{1} << 30> {};

template <uint64_t kValueSpan, int kMantissaBits>
struct FloatNum {
  static constexpr bool kFloat = true;
  static constexpr bool kSigned = true;
  static constexpr uint64_t kSpan = kValueSpan;
  static constexpr double kEps =
      1.0 / static_cast<double>(1ull << kMantissaBits);
};
template <>
struct Num<float> : FloatNum<uint64_t{1} << 24, 23> {
  __device__ static float From(double v) { return static_cast<float>(v); }
  __device__ static double To(float v) { return v; }
};
template <>
struct Num<double> : FloatNum<uint64_t{1} << 30, 52> {
  __device__ static double From(double v) { return v; }
  __device__ static double To(double v) { return v; }
};
template <>
struct Num<__half> : FloatNum<2048, 10> {
  __device__ static __half From(double v) { return __double2half(v); }
  __device__ static double To(__half v) { return __half2float(v); }
};
template <>
struct Num<__nv_bfloat16> : FloatNum<256, 7> {
  __device__ static __nv_bfloat16 From(double v) {
    return __double2bfloat16(v);
  }
  __device__ static double To(__nv_bfloat16 v) { return __bfloat162float(v); }
};
template <>
struct Num<__nv_fp8_e4m3> : FloatNum<16, 3> {
  __device__ static __nv_fp8_e4m3 From(double v) {
    return __nv_fp8_e4m3(static_cast<float>(v));
  }
  __device__ static double To(__nv_fp8_e4m3 v) { return static_cast<float>(v); }
};
template <>
struct Num<__nv_fp8_e5m2> : FloatNum<8, 2> {
  __device__ static __nv_fp8_e5m2 From(double v) {
    return __nv_fp8_e5m2(static_cast<float>(v));
  }
  __device__ static double To(__nv_fp8_e5m2 v) { return static_cast<float>(v); }
};

// splitmix64's finaliser over (index, rank, seed): neighbouring elements and
// ranks get unrelated values, so a block landing at the wrong offset or from
// the wrong rank shows up as wrong elements.
__device__ __forceinline__ uint64_t Mix(uint64_t index, int rank,
                                        uint32_t seed) {
  uint64_t x = index +
               0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(rank) + 1) +
               (static_cast<uint64_t>(seed) << 40);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Rank `rank`'s input element `index`. Reductions get values whose sum,
// product, minimum or maximum over a handful of ranks stays exact in every
// type: {-1, 0, 1} to add, mostly 1 with some 2 and -1 to multiply.
template <typename T>
__device__ double Value(const Pattern& p, int rank, uint64_t index) {
  const uint64_t x = Mix(index, rank, p.seed);
  constexpr bool kSigned = Num<T>::kSigned;
  switch (p.redop) {
    case kSum:
    case kAvg:
      return kSigned ? static_cast<double>(x % 3) - 1.0
                     : static_cast<double>(x % 3);
    case kProd: {
      const uint64_t r = x % 8;
      if (r == 0) return 2.0;
      if (r == 1 && kSigned) return -1.0;
      return 1.0;
    }
    case kMax:
    case kMin:
      return kSigned ? static_cast<double>(x % 8) - 4.0
                     : static_cast<double>(x % 8);
    default: {
      constexpr uint64_t kSpan = Num<T>::kSpan;
      const double v = static_cast<double>(x % kSpan);
      return kSigned ? v - static_cast<double>(kSpan / 2) : v;
    }
  }
}

template <typename T>
__device__ double Expected(const Pattern& p, const Expectation& e, uint64_t k) {
  switch (e.kind) {
    case Expectation::kFrom:
      return Value<T>(p, e.source, e.offset + k);
    case Expectation::kBlocks:
      return Value<T>(p, static_cast<int>(k / e.block), e.offset + k % e.block);
    case Expectation::kReduced:
    default: {
      double acc = Value<T>(p, 0, e.offset + k);
      for (int q = 1; q < p.nranks; ++q) {
        const double v = Value<T>(p, q, e.offset + k);
        switch (p.redop) {
          case kProd:
            acc *= v;
            break;
          case kMax:
            acc = fmax(acc, v);
            break;
          case kMin:
            acc = fmin(acc, v);
            break;
          default:
            acc += v;
            break;
        }
      }
      if (p.redop == kAvg) {
        acc /= p.nranks;
        if (!Num<T>::kFloat) acc = trunc(acc);
      }
      return acc;
    }
  }
}

template <typename T>
__global__ void FillKernel(T* buf, size_t count, size_t first, int rank,
                           Pattern p) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       k < count; k += stride) {
    buf[k] = Num<T>::From(Value<T>(p, rank, first + k));
  }
}

template <typename T>
__global__ void CheckKernel(const T* buf, size_t count, Pattern p,
                            Expectation e, double tolerance,
                            unsigned long long* wrong) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  unsigned long long mine = 0;
  for (size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       k < count; k += stride) {
    // Both sides rounded to T once, so only the op's own rounding counts.
    const double want = Num<T>::To(Num<T>::From(Expected<T>(p, e, k)));
    const double got = Num<T>::To(buf[k]);
    if (!(fabs(got - want) <= tolerance)) ++mine;  // NaN is wrong too
  }
  if (mine != 0) atomicAdd(wrong, mine);
}

constexpr int kThreads = 256;

unsigned Blocks(size_t count) {
  return static_cast<unsigned>(
      std::min<size_t>((count + kThreads - 1) / kThreads, 4096));
}

// Calls f(T{}) with the element type of ncclDataType_t `dtype`.
template <typename F>
cudaError_t WithType(int dtype, F&& f) {
  switch (dtype) {
    case 0:
      return f(int8_t{});
    case 1:
      return f(uint8_t{});
    case 2:
      return f(int32_t{});
    case 3:
      return f(uint32_t{});
    case 4:
      return f(int64_t{});
    case 5:
      return f(uint64_t{});
    case 6:
      return f(__half{});
    case 7:
      return f(float{});
    case 8:
      return f(double{});
    case 9:
      return f(__nv_bfloat16{});
    case 10:
      return f(__nv_fp8_e4m3{});
    case 11:
      return f(__nv_fp8_e5m2{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchFill(void* buf, size_t count, size_t first, int rank,
                       const Pattern& pattern, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return WithType(pattern.dtype, [&](auto tag) {
    using T = decltype(tag);
    FillKernel<T><<<Blocks(count), kThreads, 0, stream>>>(
        static_cast<T*>(buf), count, first, rank, pattern);
    return cudaGetLastError();
  });
}

cudaError_t LaunchCheck(const void* buf, size_t count, const Pattern& pattern,
                        const Expectation& expect, unsigned long long* wrong,
                        cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return WithType(pattern.dtype, [&](auto tag) {
    using T = decltype(tag);
    // Only avg divides: NCCL may scale each input by 1/n before adding
    // (floats) or divide the sum, rounding differently from this check.
    double tolerance = 0;
    if (pattern.redop == kAvg && expect.kind == Expectation::kReduced) {
      tolerance = Num<T>::kFloat ? 2.0 * pattern.nranks * Num<T>::kEps : 1.0;
    }
    CheckKernel<T><<<Blocks(count), kThreads, 0, stream>>>(
        static_cast<const T*>(buf), count, pattern, expect, tolerance, wrong);
    return cudaGetLastError();
  });
}

}  // namespace ccl::peer
