#include "client/ccctl/values.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/ccctl/format.h"
#include "common/element.h"

namespace ccl::ctl {
namespace {

// Debian's abseil has its own string_view: names as std::string for StrCat.
std::string Name(DType dtype) { return std::string(DTypeName(dtype)); }

struct IntRange {
  int64_t min;
  int64_t max;
};

std::optional<IntRange> IntegerRange(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
      return IntRange{INT8_MIN, INT8_MAX};
    case DType::kUInt8:
      return IntRange{0, UINT8_MAX};
    case DType::kInt32:
      return IntRange{INT32_MIN, INT32_MAX};
    case DType::kInt64:
      return IntRange{INT64_MIN, INT64_MAX};
    default:
      return std::nullopt;
  }
}

// The largest finite value of each float type.
double MaxFinite(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return std::numeric_limits<float>::max();
    case DType::kFloat16:
      return 65504.0;
    case DType::kBFloat16:
      return 3.3895313892515355e38;
    case DType::kFp8E4M3:
      return 448.0;
    case DType::kFp8E5M2:
      return 57344.0;
    default:
      return std::numeric_limits<double>::max();
  }
}

absl::StatusOr<int64_t> ParseInteger(absl::string_view token, DType dtype,
                                     const IntRange& range) {
  int64_t value = 0;
  if (!absl::SimpleAtoi(token, &value)) {
    // "3.0" or "1e3" are integers too, when a double holds them exactly.
    double as_double = 0;
    constexpr double kExact = 9007199254740992.0;  // 2^53
    if (!absl::SimpleAtod(token, &as_double) || !std::isfinite(as_double) ||
        std::trunc(as_double) != as_double || std::fabs(as_double) > kExact) {
      bool integer_text = !token.empty();
      for (size_t i = 0; i < token.size(); ++i) {
        const char c = token[i];
        if (!absl::ascii_isdigit(c) && !(i == 0 && (c == '-' || c == '+'))) {
          integer_text = false;
        }
      }
      if (integer_text) {
        return absl::InvalidArgumentError(
            absl::StrCat("value ", token, " does not fit ", Name(dtype), " (",
                         range.min, "..", range.max, ")"));
      }
      return absl::InvalidArgumentError(absl::StrCat(
          Name(dtype), " takes integers; '", token, "' is not one"));
    }
    value = static_cast<int64_t>(as_double);
  }
  if (value < range.min || value > range.max) {
    return absl::InvalidArgumentError(
        absl::StrCat("value ", token, " does not fit ", Name(dtype), " (",
                     range.min, "..", range.max, ")"));
  }
  return value;
}

template <typename T>
void Put(std::string& bytes, size_t index, T value) {
  std::memcpy(bytes.data() + index * sizeof(T), &value, sizeof(T));
}

template <typename T>
T Get(std::string_view bytes, size_t index) {
  T value;
  std::memcpy(&value, bytes.data() + index * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

absl::StatusOr<std::string> EncodeValues(DType dtype, std::string_view text) {
  std::vector<absl::string_view> tokens = absl::StrSplit(
      absl::string_view(text.data(), text.size()), ',', absl::SkipWhitespace());
  if (tokens.empty()) {
    return absl::InvalidArgumentError("no values given (e.g. --values 1,2,3)");
  }
  const size_t element = DTypeSize(dtype);
  std::string bytes(tokens.size() * element, '\0');
  const std::optional<IntRange> range = IntegerRange(dtype);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const absl::string_view token = absl::StripAsciiWhitespace(tokens[i]);
    if (range) {
      auto value = ParseInteger(token, dtype, *range);
      if (!value.ok()) return value.status();
      switch (dtype) {
        case DType::kInt8:
          Put(bytes, i, static_cast<int8_t>(*value));
          break;
        case DType::kUInt8:
          Put(bytes, i, static_cast<uint8_t>(*value));
          break;
        case DType::kInt32:
          Put(bytes, i, static_cast<int32_t>(*value));
          break;
        default:
          Put(bytes, i, *value);
          break;
      }
      continue;
    }
    double value = 0;
    if (!absl::SimpleAtod(token, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", token, "' is not a number (", Name(dtype), ")"));
    }
    if (std::isfinite(value) && std::fabs(value) > MaxFinite(dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("value ", token, " does not fit ", Name(dtype),
                       " (largest finite ", MaxFinite(dtype), ")"));
    }
    StoreElement(dtype, bytes.data(), i, value);
  }
  return bytes;
}

absl::StatusOr<std::string> EncodeNumbers(DType dtype,
                                          const std::vector<Number>& values) {
  if (values.empty()) return std::string();
  const bool integers = IntegerRange(dtype).has_value();
  std::string text;
  for (const Number& value : values) {
    if (!text.empty()) text += ',';
    // A whole double within 2^53 is that integer exactly (rank / 2 at an
    // even rank); any other double is not an integer the dtype can take.
    const Number exact =
        value.is_integer() ? value : Number::FromDouble(value.AsDouble());
    if (integers && !exact.is_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(
          Name(dtype), " takes integers; ", value.ToString(),
          " was computed in floating point (a '/', a fraction, or an "
          "intermediate result past int64): use '//' and integer literals"));
    }
    text += exact.ToString();
  }
  return EncodeValues(dtype, text);
}

std::vector<std::string> DecodeValues(DType dtype, std::string_view bytes) {
  const size_t count = bytes.size() / DTypeSize(dtype);
  std::vector<std::string> out;
  out.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DType::kInt8:
        out.push_back(absl::StrCat(Get<int8_t>(bytes, i)));
        break;
      case DType::kUInt8:
        out.push_back(absl::StrCat(Get<uint8_t>(bytes, i)));
        break;
      case DType::kInt32:
        out.push_back(absl::StrCat(Get<int32_t>(bytes, i)));
        break;
      case DType::kInt64:
        out.push_back(absl::StrCat(Get<int64_t>(bytes, i)));
        break;
      default:
        out.push_back(FormatValue(LoadElement(dtype, bytes.data(), i), dtype));
        break;
    }
  }
  return out;
}

bool DoubleHoldsEveryValue(DType dtype) { return dtype != DType::kInt64; }

}  // namespace ccl::ctl
