#include "common/element.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace ccl {
namespace {

// A binary floating-point format with `exp_bits` exponent bits and
// `man_bits` mantissa bits. `ieee` formats reserve the top exponent for
// inf/NaN; the others (fp8 e4m3fn) use it for normals and keep only the
// all-ones pattern for NaN, with no infinity.
struct SmallFloat {
  int exp_bits;
  int man_bits;
  bool ieee;

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  uint32_t exp_all_ones() const { return (1u << exp_bits) - 1; }

  double MaxFinite() const {
    const int max_exp = ieee ? static_cast<int>(exp_all_ones()) - 1 - bias()
                             : static_cast<int>(exp_all_ones()) - bias();
    // e4m3fn: the all-ones mantissa at the top exponent is NaN.
    const double max_man = ieee ? 2.0 - std::ldexp(1.0, -man_bits)
                                : 2.0 - std::ldexp(2.0, -man_bits);
    return std::ldexp(max_man, max_exp);
  }

  uint32_t NanBits() const {
    return ieee ? (exp_all_ones() << man_bits) | (1u << (man_bits - 1))
                : (exp_all_ones() << man_bits) | ((1u << man_bits) - 1);
  }

  uint32_t Encode(double value) const {
    const uint32_t sign_bit = 1u << (exp_bits + man_bits);
    if (std::isnan(value)) return NanBits();
    const uint32_t sign = std::signbit(value) ? sign_bit : 0;
    double magnitude = std::fabs(value);
    if (magnitude == 0) return sign;
    const int min_normal_exp = 1 - bias();
    int exponent = std::ilogb(magnitude);
    if (exponent < min_normal_exp) exponent = min_normal_exp;
    // Round to the spacing of representable values at this exponent.
    const double quantum = std::ldexp(1.0, exponent - man_bits);
    double rounded = std::nearbyint(magnitude / quantum) * quantum;
    if (std::isinf(magnitude) || rounded > MaxFinite()) {
      return ieee ? sign | (exp_all_ones() << man_bits) : sign | NanBits();
    }
    if (rounded == 0) return sign;
    int rounded_exp = std::ilogb(rounded);
    if (rounded_exp < min_normal_exp) {
      // Subnormal: exponent field 0, mantissa counts quanta.
      const uint32_t mantissa =
          static_cast<uint32_t>(std::ldexp(rounded, man_bits - min_normal_exp));
      return sign | mantissa;
    }
    const double fraction = std::ldexp(rounded, -rounded_exp) - 1.0;
    const uint32_t mantissa =
        static_cast<uint32_t>(std::ldexp(fraction, man_bits));
    const uint32_t exp_field = static_cast<uint32_t>(rounded_exp + bias());
    return sign | (exp_field << man_bits) | mantissa;
  }

  double Decode(uint32_t bits) const {
    const bool negative = (bits >> (exp_bits + man_bits)) & 1;
    const uint32_t exp_field = (bits >> man_bits) & exp_all_ones();
    const uint32_t mantissa = bits & ((1u << man_bits) - 1);
    double magnitude;
    if (ieee && exp_field == exp_all_ones()) {
      magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN()
                           : std::numeric_limits<double>::infinity();
    } else if (!ieee && exp_field == exp_all_ones() &&
               mantissa == (1u << man_bits) - 1) {
      magnitude = std::numeric_limits<double>::quiet_NaN();
    } else if (exp_field == 0) {
      magnitude =
          std::ldexp(static_cast<double>(mantissa), 1 - bias() - man_bits);
    } else {
      magnitude =
          std::ldexp(1.0 + std::ldexp(static_cast<double>(mantissa), -man_bits),
                     static_cast<int>(exp_field) - bias());
    }
    return negative ? -magnitude : magnitude;
  }
};

constexpr SmallFloat kHalf{5, 10, true};
constexpr SmallFloat kBFloat16{8, 7, true};
constexpr SmallFloat kE4M3{4, 3, false};
constexpr SmallFloat kE5M2{5, 2, true};

const SmallFloat* NarrowFormat(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return &kHalf;
    case DType::kBFloat16:
      return &kBFloat16;
    case DType::kFp8E4M3:
      return &kE4M3;
    case DType::kFp8E5M2:
      return &kE5M2;
    default:
      return nullptr;
  }
}

template <typename T>
T SaturatingCast(double value) {
  if (std::isnan(value)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hi = static_cast<double>(std::numeric_limits<T>::max());
  if (value <= lo) return std::numeric_limits<T>::min();
  if (value >= hi) return std::numeric_limits<T>::max();
  return static_cast<T>(value);
}

template <typename T>
T LoadAs(const void* data, size_t index) {
  T value;
  std::memcpy(&value, static_cast<const char*>(data) + index * sizeof(T),
              sizeof(T));
  return value;
}

template <typename T>
void StoreAs(void* data, size_t index, T value) {
  std::memcpy(static_cast<char*>(data) + index * sizeof(T), &value, sizeof(T));
}

}  // namespace

uint32_t EncodeNarrowFloat(DType dtype, double value) {
  const SmallFloat* format = NarrowFormat(dtype);
  return format == nullptr ? 0 : format->Encode(value);
}

double DecodeNarrowFloat(DType dtype, uint32_t bits) {
  const SmallFloat* format = NarrowFormat(dtype);
  return format == nullptr ? 0 : format->Decode(bits);
}

double LoadElement(DType dtype, const void* data, size_t index) {
  switch (dtype) {
    case DType::kFloat32:
      return LoadAs<float>(data, index);
    case DType::kFloat64:
      return LoadAs<double>(data, index);
    case DType::kFloat16:
      return kHalf.Decode(LoadAs<uint16_t>(data, index));
    case DType::kBFloat16:
      return kBFloat16.Decode(LoadAs<uint16_t>(data, index));
    case DType::kInt8:
      return LoadAs<int8_t>(data, index);
    case DType::kUInt8:
      return LoadAs<uint8_t>(data, index);
    case DType::kInt32:
      return LoadAs<int32_t>(data, index);
    case DType::kInt64:
      return static_cast<double>(LoadAs<int64_t>(data, index));
    case DType::kFp8E4M3:
      return kE4M3.Decode(LoadAs<uint8_t>(data, index));
    case DType::kFp8E5M2:
      return kE5M2.Decode(LoadAs<uint8_t>(data, index));
  }
  return 0;
}

void StoreElement(DType dtype, void* data, size_t index, double value) {
  switch (dtype) {
    case DType::kFloat32:
      return StoreAs<float>(data, index, static_cast<float>(value));
    case DType::kFloat64:
      return StoreAs<double>(data, index, value);
    case DType::kFloat16:
      return StoreAs<uint16_t>(data, index,
                               static_cast<uint16_t>(kHalf.Encode(value)));
    case DType::kBFloat16:
      return StoreAs<uint16_t>(data, index,
                               static_cast<uint16_t>(kBFloat16.Encode(value)));
    case DType::kInt8:
      return StoreAs<int8_t>(data, index, SaturatingCast<int8_t>(value));
    case DType::kUInt8:
      return StoreAs<uint8_t>(data, index, SaturatingCast<uint8_t>(value));
    case DType::kInt32:
      return StoreAs<int32_t>(data, index, SaturatingCast<int32_t>(value));
    case DType::kInt64:
      return StoreAs<int64_t>(data, index, SaturatingCast<int64_t>(value));
    case DType::kFp8E4M3:
      return StoreAs<uint8_t>(data, index,
                              static_cast<uint8_t>(kE4M3.Encode(value)));
    case DType::kFp8E5M2:
      return StoreAs<uint8_t>(data, index,
                              static_cast<uint8_t>(kE5M2.Encode(value)));
  }
}

double RoundToDType(DType dtype, double value) {
  alignas(8) unsigned char buf[8] = {};
  StoreElement(dtype, buf, 0, value);
  return LoadElement(dtype, buf, 0);
}

}  // namespace ccl
