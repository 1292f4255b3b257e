#include "client/ccctl/format.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace ccl::ctl {

absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  std::string s(text);
  struct Unit {
    const char* suffix;
    double ms;
  };
  // Longest suffixes first so that "ms" is not read as "s".
  static constexpr Unit kUnits[] = {
      {"ms", 1}, {"us", 1e-3}, {"s", 1e3}, {"m", 60e3}, {"h", 3600e3}};
  double scale = 1e3;
  for (const Unit& unit : kUnits) {
    if (absl::EndsWith(s, unit.suffix)) {
      s.resize(s.size() - std::string_view(unit.suffix).size());
      scale = unit.ms;
      break;
    }
  }
  double value = 0;
  if (s.empty() || !absl::SimpleAtod(s, &value) || value < 0 ||
      !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad duration '", std::string(text), "'; use e.g. 3s, 500ms, 2m"));
  }
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::ceil(value * scale)));
}

absl::StatusOr<int64_t> ParseSize(std::string_view text) {
  std::string s(text);
  int64_t scale = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K':
      case 'k':
        scale = 1LL << 10;
        break;
      case 'M':
      case 'm':
        scale = 1LL << 20;
        break;
      case 'G':
      case 'g':
        scale = 1LL << 30;
        break;
      case 'T':
      case 't':
        scale = 1LL << 40;
        break;
      default:
        break;
    }
    if (scale != 1) s.pop_back();
    if (!s.empty() && (s.back() == 'i' || s.back() == 'I')) s.pop_back();
  }
  int64_t value = 0;
  if (s.empty() || !absl::SimpleAtoi(s, &value) || value < 0 ||
      value > (INT64_MAX / scale)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad size '", std::string(text), "'; use e.g. 8, 4K, 128M, 2G"));
  }
  return value * scale;
}

absl::StatusOr<std::vector<int64_t>> ParseIntList(std::string_view text) {
  std::vector<int64_t> values;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',',
                      absl::SkipWhitespace())) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(part, &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", part, "' in '", std::string(text), "' is not an integer"));
    }
    values.push_back(value);
  }
  return values;
}

absl::StatusOr<std::vector<double>> ParseDoubleList(std::string_view text) {
  std::vector<double> values;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',',
                      absl::SkipWhitespace())) {
    double value = 0;
    if (!absl::SimpleAtod(part, &value)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", part, "' in '", std::string(text), "' is not a number"));
    }
    values.push_back(value);
  }
  return values;
}

std::string FormatValue(double value, DType dtype) {
  if (!IsFloatingPoint(dtype)) {
    return absl::StrFormat("%.0f", value);
  }
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = absl::StrFormat("%.6g", value);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  return text;
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

Table::Table(std::vector<std::string> header) {
  rows_.push_back(std::move(header));
}

void Table::AddRow(std::vector<std::string> row) {
  rows_.push_back(std::move(row));
}

std::string Table::Render() const {
  std::vector<size_t> widths;
  for (const auto& row : rows_) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows_) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size())
        line += std::string(widths[i] - row[i].size() + 3, ' ');
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace ccl::ctl
