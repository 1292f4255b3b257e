// The CPU backend's reduce arithmetic (server/comm/gloo/reduce_kernels.h):
// the narrow-float conversions held to common/element.h's for every value,
// and every kernel held to a reference computed in double and rounded once
// to the dtype: exhaustively for fp8 (every pair of values, every op), on
// random and edge pairs for float16 and bfloat16.
#include "server/comm/gloo/reduce_kernels.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/element.h"
#include "common/narrow_float.h"
#include "gtest/gtest.h"

namespace ccl {
namespace {

bool SameValue(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return got == want;  // +0 == -0: the sign of a zero is not checked
}

template <typename Format>
void ExpectDecodeAgrees(int bits_count, double (*reference)(uint32_t)) {
  for (uint32_t bits = 0; bits < static_cast<uint32_t>(1) << bits_count;
       ++bits) {
    const double want = reference(bits);
    const double got = Format::Decode(bits);
    ASSERT_TRUE(SameValue(got, want)) << "bits 0x" << std::hex << bits
                                      << ": got " << got << ", want " << want;
    if (!std::isnan(want)) {
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << std::hex << bits;
    }
  }
}

TEST(NarrowFloat, DecodeAgreesWithElementForEveryValue) {
  ExpectDecodeAgrees<Float16Format>(
      16, [](uint32_t b) { return DecodeNarrowFloat(DType::kFloat16, b); });
  ExpectDecodeAgrees<BFloat16Format>(
      16, [](uint32_t b) { return DecodeNarrowFloat(DType::kBFloat16, b); });
  ExpectDecodeAgrees<Fp8E4M3Format>(
      8, [](uint32_t b) { return DecodeNarrowFloat(DType::kFp8E4M3, b); });
  ExpectDecodeAgrees<Fp8E5M2Format>(
      8, [](uint32_t b) { return DecodeNarrowFloat(DType::kFp8E5M2, b); });
  for (uint32_t b = 0; b < 65536; ++b) {
    const float want = BFloat16Format::Decode(b);
    const float got = BFloat16BitsToFloat(static_cast<uint16_t>(b));
    ASSERT_TRUE(SameValue(got, want)) << std::hex << b;
  }
}

// Floats near every narrow value and halfway between neighbours (the ties),
// plus random bit patterns: Encode rounds as element.cc's double-based
// conversion does (both round to nearest even, once).
template <typename Format>
void ExpectEncodeAgrees(int bits_count, DType dtype) {
  std::vector<float> probes = {0.0f,
                               -0.0f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::denorm_min(),
                               std::numeric_limits<float>::min()};
  const uint32_t count = static_cast<uint32_t>(1) << bits_count;
  for (uint32_t b = 0; b < count; ++b) {
    const float v = Format::Decode(b);
    const float next = Format::Decode(b + 1 < count ? b + 1 : b);
    if (std::isnan(v)) continue;
    probes.push_back(v);
    probes.push_back(std::nextafter(v, 0.0f));
    probes.push_back(std::nextafter(v, std::numeric_limits<float>::max()));
    if (!std::isnan(next) && !std::isinf(next) && !std::isinf(v)) {
      const float mid = static_cast<float>((double{v} + next) / 2);
      probes.push_back(mid);
      probes.push_back(std::nextafter(mid, 0.0f));
      probes.push_back(std::nextafter(mid, 2 * mid));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    probes.push_back(f);
  }
  for (float f : probes) {
    const double want = RoundToDType(dtype, f);
    const double got = Format::Decode(Format::Encode(f, /*saturate=*/false));
    ASSERT_TRUE(SameValue(got, want)) << DTypeName(dtype) << " of " << f
                                      << ": got " << got << ", want " << want;
  }
}

TEST(NarrowFloat, EncodeRoundsAsElementDoes) {
  ExpectEncodeAgrees<Float16Format>(16, DType::kFloat16);
  ExpectEncodeAgrees<BFloat16Format>(16, DType::kBFloat16);
  // The shortcut the bfloat16 kernels use, on every bfloat16 value's
  // neighbourhood and on random floats.
  std::mt19937 rng(3);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = i < 65536 * 16
                        ? (static_cast<uint32_t>(i) << 12) ^ rng() % 8192
                        : rng();
    float f;
    std::memcpy(&f, &bits, sizeof f);
    const float want = BFloat16Format::Decode(BFloat16Format::Encode(f, false));
    const float got = BFloat16BitsToFloat(FloatToBFloat16Bits(f));
    ASSERT_TRUE(SameValue(got, want)) << f;
  }
  ExpectEncodeAgrees<Fp8E4M3Format>(8, DType::kFp8E4M3);
  ExpectEncodeAgrees<Fp8E5M2Format>(8, DType::kFp8E5M2);
}

TEST(NarrowFloat, SaturatingEncodeClampsToTheLargestFiniteValue) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float f : {500.0f, 1e6f, inf}) {
    EXPECT_EQ(Fp8E4M3Format::Decode(Fp8E4M3Format::Encode(f, true)), 448.0f);
    EXPECT_EQ(Fp8E4M3Format::Decode(Fp8E4M3Format::Encode(-f, true)), -448.0f);
  }
  for (float f : {61440.0f, 1e6f, inf}) {
    EXPECT_EQ(Fp8E5M2Format::Decode(Fp8E5M2Format::Encode(f, true)), 57344.0f);
  }
  EXPECT_TRUE(std::isnan(Fp8E4M3Format::Decode(
      Fp8E4M3Format::Encode(std::numeric_limits<float>::quiet_NaN(), true))));
  // Without saturation: NaN for e4m3 (no infinity), inf for e5m2.
  EXPECT_TRUE(
      std::isnan(Fp8E4M3Format::Decode(Fp8E4M3Format::Encode(500.0f, false))));
  EXPECT_EQ(Fp8E5M2Format::Decode(Fp8E5M2Format::Encode(1e6f, false)), inf);
}

double Reference(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      if (std::isnan(a)) return b;
      if (std::isnan(b)) return a;
      return std::min(a, b);
    case ReduceOp::kMax:
      if (std::isnan(a)) return b;
      if (std::isnan(b)) return a;
      return std::max(a, b);
    default:
      return a + b;
  }
}

bool Saturates(DType dtype) {
  return dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2;
}

// One rounding of the exact (double) result to the dtype, then, for fp8,
// what overflowed becomes the largest finite value of its sign.
double RoundOnce(DType dtype, double exact) {
  const double rounded = RoundToDType(dtype, exact);
  if (!Saturates(dtype) || std::isnan(exact)) return rounded;
  if (std::isnan(rounded) || std::isinf(rounded)) {
    const double max = dtype == DType::kFp8E4M3 ? 448.0 : 57344.0;
    return std::signbit(exact) ? -max : max;
  }
  return rounded;
}

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                             ReduceOp::kMax};

// Runs the kernel over pairs (a[i], b[i]) and checks each result.
void ExpectKernelMatches(DType dtype, ReduceOp op,
                         const std::vector<uint32_t>& a_bits,
                         const std::vector<uint32_t>& b_bits) {
  const size_t n = a_bits.size();
  const size_t esize = DTypeSize(dtype);
  std::vector<std::byte> a(n * esize), b(n * esize), out(n * esize);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(a.data() + i * esize, &a_bits[i], esize);  // little endian
    std::memcpy(b.data() + i * esize, &b_bits[i], esize);
  }
  ReduceKernel kernel = ReduceKernelFor(dtype, op);
  ASSERT_NE(kernel, nullptr) << DTypeName(dtype);
  kernel(out.data(), a.data(), b.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const double x = LoadElement(dtype, a.data(), i);
    const double y = LoadElement(dtype, b.data(), i);
    const double want = RoundOnce(dtype, Reference(op, x, y));
    const double got = LoadElement(dtype, out.data(), i);
    ASSERT_TRUE(SameValue(got, want))
        << DTypeName(dtype) << " " << ReduceOpName(op) << "(" << x << ", " << y
        << "): got " << got << ", want " << want;
  }
  // In place on either operand (Gloo reduces into its own input): the
  // same answer.
  std::vector<std::byte> b_copy = b;
  kernel(b_copy.data(), a.data(), b_copy.data(), n);
  ASSERT_EQ(std::memcmp(b_copy.data(), out.data(), out.size()), 0)
      << DTypeName(dtype) << " " << ReduceOpName(op) << " in place on b";
  kernel(a.data(), a.data(), b.data(), n);
  ASSERT_EQ(std::memcmp(a.data(), out.data(), out.size()), 0)
      << DTypeName(dtype) << " " << ReduceOpName(op) << " in place on a";
}

TEST(ReduceKernels, Fp8EveryPairOfValuesEveryOp) {
  std::vector<uint32_t> a, b;
  for (uint32_t x = 0; x < 256; ++x) {
    for (uint32_t y = 0; y < 256; ++y) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  for (DType dtype : {DType::kFp8E4M3, DType::kFp8E5M2}) {
    for (ReduceOp op : kOps) ExpectKernelMatches(dtype, op, a, b);
  }
}

TEST(ReduceKernels, SixteenBitFloatsOnRandomAndEdgePairs) {
  std::mt19937 rng(11);
  std::vector<uint32_t> a, b;
  const uint32_t edges[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x3f80,
                            0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x7fc0,
                            0x7bff, 0x7c00, 0x03ff, 0x0400, 0x3c00};
  for (uint32_t x : edges) {
    for (uint32_t y : edges) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  for (int i = 0; i < 300000; ++i) {
    a.push_back(rng() & 0xffff);
    // Neighbouring magnitudes half of the time, where sums round.
    b.push_back(i % 2 ? rng() & 0xffff : (a.back() + (rng() % 2048)) & 0xffff);
  }
  for (DType dtype : {DType::kBFloat16, DType::kFloat16}) {
    for (ReduceOp op : kOps) ExpectKernelMatches(dtype, op, a, b);
  }
}

TEST(ReduceKernels, IntegersWrapAndFloatMinMaxIgnoreNaN) {
  int32_t a[] = {std::numeric_limits<int32_t>::max(), -5};
  int32_t b[] = {1, 3};
  int32_t out[2];
  ReduceKernelFor(DType::kInt32, ReduceOp::kSum)(out, a, b, 2);
  EXPECT_EQ(out[0], std::numeric_limits<int32_t>::min());
  EXPECT_EQ(out[1], -2);
  uint8_t u[] = {200}, v[] = {100}, w[1];
  ReduceKernelFor(DType::kUInt8, ReduceOp::kSum)(w, u, v, 1);
  EXPECT_EQ(w[0], 44);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float f[] = {nan, 2.0f, nan}, g[] = {1.0f, nan, nan}, h[3];
  ReduceKernelFor(DType::kFloat32, ReduceOp::kMin)(h, f, g, 3);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], 2.0f);
  EXPECT_TRUE(std::isnan(h[2]));
  ReduceKernelFor(DType::kFloat32, ReduceOp::kMax)(h, f, g, 3);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], 2.0f);
}

TEST(ReduceKernels, ScaleRoundsTheScaleToTheDTypeThenEachProductOnce) {
  for (DType dtype : {DType::kBFloat16, DType::kFloat16, DType::kFp8E4M3,
                      DType::kFp8E5M2, DType::kFloat32, DType::kFloat64}) {
    const size_t esize = DTypeSize(dtype);
    std::vector<std::byte> in(64 * esize), out(64 * esize);
    for (size_t i = 0; i < 64; ++i) {
      StoreElement(dtype, in.data(), i, (static_cast<double>(i) - 20) * 0.37);
    }
    const double scale = 0.3;
    ScaleElements(dtype, out.data(), in.data(), 64, scale);
    const double rounded_scale =
        dtype == DType::kFloat64
            ? scale
            : RoundToDType(dtype, static_cast<float>(scale));
    for (size_t i = 0; i < 64; ++i) {
      const double x = LoadElement(dtype, in.data(), i);
      const double want = RoundOnce(dtype, x * rounded_scale);
      EXPECT_TRUE(SameValue(LoadElement(dtype, out.data(), i), want))
          << DTypeName(dtype) << " " << x << " * " << scale;
    }
  }
}

TEST(ReduceKernels, DivideRoundsOnceAndIntegersTruncate) {
  for (DType dtype : {DType::kBFloat16, DType::kFp8E4M3, DType::kFloat32}) {
    const size_t esize = DTypeSize(dtype);
    std::vector<std::byte> data(32 * esize);
    std::vector<double> before(32);
    for (size_t i = 0; i < 32; ++i) {
      StoreElement(dtype, data.data(), i, static_cast<double>(i) * 1.7 - 9);
      before[i] = LoadElement(dtype, data.data(), i);
    }
    DivideElements(dtype, data.data(), 32, 3);
    for (size_t i = 0; i < 32; ++i) {
      EXPECT_TRUE(SameValue(LoadElement(dtype, data.data(), i),
                            RoundOnce(dtype, before[i] / 3)))
          << DTypeName(dtype) << " " << before[i] << " / 3";
    }
  }
  int8_t small[] = {-7, 7, 127};
  DivideElements(DType::kInt8, small, 3, 2);
  EXPECT_EQ(small[0], -3);
  EXPECT_EQ(small[1], 3);
  EXPECT_EQ(small[2], 63);
  int8_t big[] = {100};
  DivideElements(DType::kInt8, big, 1, 200);  // a world of 200 ranks
  EXPECT_EQ(big[0], 0);
}

TEST(ReduceKernels, EveryDTypeIsReducible) {
  for (DType dtype :
       {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
        DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
        DType::kFp8E4M3, DType::kFp8E5M2}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin,
                        ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
      EXPECT_NE(ReduceKernelFor(dtype, op), nullptr)
          << DTypeName(dtype) << " " << ReduceOpName(op);
    }
  }
}

}  // namespace
}  // namespace ccl
