// Element-wise fills (arange, arange + rank, affine, random) as
// __host__ __device__ code, so the device kernel (fill_kernels.cu) and a host
// unit test run the very same source. Each function mirrors server/fill.cc's
// FillValue and common/element.cc's StoreElement operation for operation;
// tests/unit/tensor_store_test.cc checks the host instantiation against them
// bit for bit for every dtype.
//
// Why the device instantiation gives the same bits as the host one:
//  - double + and * go through __dadd_rn / __dmul_rn on the device, so nvcc
//    cannot contract them into an FMA (the host build has no FMA either: no
//    -march, and the host code here is plain + and *);
//  - double division, double -> float conversion, int64 -> double and
//    double -> integer (truncating) conversions are IEEE round-to-nearest /
//    toward-zero on both sides (no fast-math anywhere);
//  - ilogb, ldexp, nearbyint (ties to even), fabs and copysign are exact in
//    CUDA's math library, as in glibc;
//  - the only non-portable bits would be those of a NaN produced by the
//    arithmetic (x86 makes a negative default NaN, CUDA a positive one);
//    ElementFillIsExact (server/fill.h) keeps fills that could produce a NaN
//    on the host path.
// Header only, no CUDA or absl headers, so plain C++ can include it.
#pragma once

#include <float.h>
#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define CCL_HD __host__ __device__
#else
#define CCL_HD
#endif

#include "common/dtype.h"

namespace ccl {

enum class ElementFillKind : int { kArange, kArangePlusRank, kAffine, kRandom };

struct ElementFillParams {
  ElementFillKind kind = ElementFillKind::kArange;
  double value = 0;            // affine
  double rank = 0;             // arange + rank, affine
  double rank_scale = 0;       // affine
  double step = 0;             // affine
  uint64_t random_stream = 0;  // random: SplitMix64(seed ^ SplitMix64(rank))
};

namespace fill_math {

CCL_HD inline double Add(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

CCL_HD inline double Mul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

CCL_HD inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// common/element.cc's SmallFloat::Encode, same steps.
CCL_HD inline uint32_t EncodeSmallFloat(double value, int exp_bits,
                                        int man_bits, bool ieee) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t exp_all_ones = (1u << exp_bits) - 1;
  const uint32_t nan_bits =
      ieee ? (exp_all_ones << man_bits) | (1u << (man_bits - 1))
           : (exp_all_ones << man_bits) | ((1u << man_bits) - 1);
  const int max_exp = ieee ? static_cast<int>(exp_all_ones) - 1 - bias
                           : static_cast<int>(exp_all_ones) - bias;
  const double max_man = ieee ? Add(2.0, -ldexp(1.0, -man_bits))
                              : Add(2.0, -ldexp(2.0, -man_bits));
  const double max_finite = ldexp(max_man, max_exp);

  const uint32_t sign_bit = 1u << (exp_bits + man_bits);
  if (value != value) return nan_bits;
  const uint32_t sign = copysign(1.0, value) < 0 ? sign_bit : 0;
  const double magnitude = fabs(value);
  if (magnitude == 0) return sign;
  const int min_normal_exp = 1 - bias;
  int exponent = ilogb(magnitude);
  if (exponent < min_normal_exp) exponent = min_normal_exp;
  const double quantum = ldexp(1.0, exponent - man_bits);
  const double rounded = Mul(nearbyint(magnitude / quantum), quantum);
  if (magnitude > DBL_MAX || rounded > max_finite) {
    return ieee ? sign | (exp_all_ones << man_bits) : sign | nan_bits;
  }
  if (rounded == 0) return sign;
  const int rounded_exp = ilogb(rounded);
  if (rounded_exp < min_normal_exp) {
    return sign |
           static_cast<uint32_t>(ldexp(rounded, man_bits - min_normal_exp));
  }
  const double fraction = Add(ldexp(rounded, -rounded_exp), -1.0);
  const uint32_t mantissa = static_cast<uint32_t>(ldexp(fraction, man_bits));
  const uint32_t exp_field = static_cast<uint32_t>(rounded_exp + bias);
  return sign | (exp_field << man_bits) | mantissa;
}

// common/element.cc's SaturatingCast: NaN -> 0, saturate, else truncate.
template <typename T>
CCL_HD inline T SaturatingCast(double value, T lo, T hi) {
  if (value != value) return 0;
  if (value <= static_cast<double>(lo)) return lo;
  if (value >= static_cast<double>(hi)) return hi;
  return static_cast<T>(value);
}

}  // namespace fill_math

// FillValue (server/fill.cc) for the element-wise kinds.
CCL_HD inline double ElementFillValue(const ElementFillParams& p,
                                      int64_t index) {
  using fill_math::Add;
  using fill_math::Mul;
  const double i = static_cast<double>(index);
  switch (p.kind) {
    case ElementFillKind::kArange:
      return i;
    case ElementFillKind::kArangePlusRank:
      return Add(i, p.rank);
    case ElementFillKind::kAffine:
      return Add(Add(p.value, Mul(p.rank, p.rank_scale)), Mul(i, p.step));
    case ElementFillKind::kRandom: {
      const uint64_t bits =
          fill_math::SplitMix64(p.random_stream + static_cast<uint64_t>(index));
      return Mul(static_cast<double>(bits >> 11), 0x1.0p-53);
    }
  }
  return 0;
}

// StoreElement (common/element.cc) of `value` at element `index`.
template <DType D>
CCL_HD inline void StoreFillElement(void* data, int64_t index, double value) {
  using fill_math::EncodeSmallFloat;
  using fill_math::SaturatingCast;
  if constexpr (D == DType::kFloat32) {
    static_cast<float*>(data)[index] = static_cast<float>(value);
  } else if constexpr (D == DType::kFloat64) {
    static_cast<double*>(data)[index] = value;
  } else if constexpr (D == DType::kFloat16) {
    static_cast<uint16_t*>(data)[index] =
        static_cast<uint16_t>(EncodeSmallFloat(value, 5, 10, true));
  } else if constexpr (D == DType::kBFloat16) {
    static_cast<uint16_t*>(data)[index] =
        static_cast<uint16_t>(EncodeSmallFloat(value, 8, 7, true));
  } else if constexpr (D == DType::kInt8) {
    static_cast<int8_t*>(data)[index] =
        SaturatingCast<int8_t>(value, INT8_MIN, INT8_MAX);
  } else if constexpr (D == DType::kUInt8) {
    static_cast<uint8_t*>(data)[index] =
        SaturatingCast<uint8_t>(value, 0, UINT8_MAX);
  } else if constexpr (D == DType::kInt32) {
    static_cast<int32_t*>(data)[index] =
        SaturatingCast<int32_t>(value, INT32_MIN, INT32_MAX);
  } else if constexpr (D == DType::kInt64) {
    static_cast<int64_t*>(data)[index] =
        SaturatingCast<int64_t>(value, INT64_MIN, INT64_MAX);
  } else if constexpr (D == DType::kFp8E4M3) {
    static_cast<uint8_t*>(data)[index] =
        static_cast<uint8_t>(EncodeSmallFloat(value, 4, 3, false));
  } else {
    static_cast<uint8_t*>(data)[index] =
        static_cast<uint8_t>(EncodeSmallFloat(value, 5, 2, true));
  }
}

// Host dispatch of StoreFillElement, for tests and the host fallback.
inline void StoreFillElement(DType dtype, void* data, int64_t index,
                             double value) {
  switch (dtype) {
    case DType::kFloat32:
      return StoreFillElement<DType::kFloat32>(data, index, value);
    case DType::kFloat64:
      return StoreFillElement<DType::kFloat64>(data, index, value);
    case DType::kFloat16:
      return StoreFillElement<DType::kFloat16>(data, index, value);
    case DType::kBFloat16:
      return StoreFillElement<DType::kBFloat16>(data, index, value);
    case DType::kInt8:
      return StoreFillElement<DType::kInt8>(data, index, value);
    case DType::kUInt8:
      return StoreFillElement<DType::kUInt8>(data, index, value);
    case DType::kInt32:
      return StoreFillElement<DType::kInt32>(data, index, value);
    case DType::kInt64:
      return StoreFillElement<DType::kInt64>(data, index, value);
    case DType::kFp8E4M3:
      return StoreFillElement<DType::kFp8E4M3>(data, index, value);
    case DType::kFp8E5M2:
      return StoreFillElement<DType::kFp8E5M2>(data, index, value);
  }
}

}  // namespace ccl
