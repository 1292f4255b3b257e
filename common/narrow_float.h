// The narrow float formats (float16, bfloat16, fp8 e4m3 and e5m2) to and
// from float, with integer and float operations only, so that loops over
// arrays of them vectorise. The reduce kernels of the CPU backend use these;
// common/element.h keeps the double-based conversions for fills and checks
// (the unit tests hold the two to each other, for every narrow value).
#pragma once

#include <cstdint>
#include <cstring>

namespace ccl {

// A binary format of 1 sign, kExp exponent and kMan mantissa bits. kIeee
// formats keep the top exponent for inf and NaN; the others (fp8 e4m3fn)
// use it for normal numbers, with only the all-ones pattern left for NaN
// and no infinity.
template <int kExp, int kMan, bool kIeee>
struct NarrowFloat {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr int kShift = 23 - kMan;
  static constexpr uint32_t kMagnitudeMask = (1u << (kExp + kMan)) - 1;
  static constexpr uint32_t kExpField = ((1u << kExp) - 1) << kMan;
  static constexpr uint32_t kInfBits = kExpField;  // kIeee only
  static constexpr uint32_t kNanBits =
      kIeee ? kExpField | (1u << (kMan - 1)) : kExpField | ((1u << kMan) - 1);
  static constexpr uint32_t kMaxFiniteBits =
      kIeee ? kExpField - (1u << kMan) + ((1u << kMan) - 1) : kNanBits - 1;
  // The largest unbiased exponent of a finite value.
  static constexpr int kMaxExp =
      (kIeee ? (1 << kExp) - 2 : (1 << kExp) - 1) - kBias;

  static float FromBits(uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
  }
  static uint32_t ToBits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  }

  // Exact: every narrow value is a float. Every case is computed and one
  // selected (no branch), so that loops over arrays vectorise.
  static float Decode(uint32_t bits) {
    const uint32_t magnitude = bits & kMagnitudeMask;
    const uint32_t sign = (bits >> (kExp + kMan)) << 31;
    const uint32_t exp_field = magnitude & kExpField;
    const uint32_t mantissa = magnitude & ((1u << kMan) - 1);
    // Zero or subnormal: magnitude * 2^(1 - bias - man), exact in float.
    // The power is below float's normal range for bfloat16 (2^-133), so
    // it is applied as two normal factors.
    constexpr int kPower = 1 - kBias - kMan;
    constexpr uint32_t kScale1 = uint32_t(127 + kPower / 2) << 23;
    constexpr uint32_t kScale2 = uint32_t(127 + kPower - kPower / 2) << 23;
    const uint32_t subnormal =
        ToBits(static_cast<float>(static_cast<int32_t>(magnitude)) *
               FromBits(kScale1) * FromBits(kScale2));
    const uint32_t normal =
        (magnitude << kShift) + (uint32_t(127 - kBias) << 23);
    // Inf, or a NaN made quiet (kIeee); the one NaN pattern (e4m3).
    const uint32_t special = kIeee ? 0x7f800000u | (mantissa << kShift) |
                                         (mantissa != 0 ? 0x00400000u : 0u)
                                   : 0x7fc00000u;
    const bool is_special =
        kIeee ? exp_field == kExpField : magnitude == kNanBits;
    const uint32_t out =
        exp_field == 0 ? subnormal : (is_special ? special : normal);
    return FromBits(out | sign);
  }

  // Rounds to nearest, ties to even. A value past the largest finite one
  // becomes inf (kIeee) or NaN (e4m3), or the largest finite value of its
  // sign when `saturate` (CUDA's __NV_SATFINITE, which NCCL's fp8
  // reductions use; infinities saturate too). NaN stays NaN. Branch-free,
  // as Decode.
  static uint32_t Encode(float f, bool saturate) {
    const uint32_t bits = ToBits(f);
    const uint32_t sign = bits & 0x80000000u;
    const uint32_t u = bits ^ sign;
    constexpr uint32_t kTooBig = uint32_t(127 + kMaxExp + 1) << 23;
    constexpr uint32_t kMinNormal = uint32_t(127 + 1 - kBias) << 23;
    const uint32_t overflow =
        saturate ? kMaxFiniteBits : (kIeee ? kInfBits : kNanBits);
    // Below the smallest normal: adding 2^k whose float spacing is the
    // narrow subnormal spacing makes the float unit round, ties to even;
    // the difference of the bits is then the narrow mantissa.
    constexpr uint32_t kMagicBits = uint32_t(127 - kBias + kShift + 1) << 23;
    const uint32_t subnormal =
        ToBits(FromBits(u) + FromBits(kMagicBits)) - kMagicBits;
    // Normal: rebias, then round the dropped bits to nearest even (a carry
    // into the exponent is the right next value). Wraps for small u, whose
    // result is not the one selected.
    const uint32_t odd = (u >> kShift) & 1u;
    const uint32_t normal = (u - (uint32_t(127 - kBias) << 23) +
                             ((1u << (kShift - 1)) - 1) + odd) >>
                            kShift;
    const uint32_t finite = u < kMinNormal
                                ? subnormal
                                : (normal > kMaxFiniteBits ? overflow : normal);
    const uint32_t out =
        u > 0x7f800000u ? kNanBits : (u >= kTooBig ? overflow : finite);
    return out | (sign >> (31 - kExp - kMan));
  }
};

using Float16Format = NarrowFloat<5, 10, true>;
using BFloat16Format = NarrowFloat<8, 7, true>;
using Fp8E4M3Format = NarrowFloat<4, 3, false>;
using Fp8E5M2Format = NarrowFloat<5, 2, true>;

// bfloat16 is the top half of a float: decoding is a shift (and Decode
// above agrees, but this one the compiler always vectorises).
inline float BFloat16BitsToFloat(uint16_t bits) {
  return BFloat16Format::FromBits(uint32_t{bits} << 16);
}
// And encoding rounds the low half away, to nearest even; past the largest
// finite value the carry reaches inf. The same values as
// BFloat16Format::Encode(f, false) in a third of its instructions (a NaN
// keeps its payload, made quiet).
inline uint16_t FloatToBFloat16Bits(float f) {
  const uint32_t u = BFloat16Format::ToBits(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan
                                                               : rounded);
}

}  // namespace ccl
