// Parsing of human inputs (durations, sizes, lists) and formatting of values
// and tables for ccctl. Plain C++, unit-tested.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/types.h"

namespace ccl::ctl {

// "3s", "500ms", "2m", "1.5s", "250us"; a bare number is seconds.
absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);
// "8", "4K", "128M", "2G" (binary multiples, as nccl-tests).
absl::StatusOr<int64_t> ParseSize(std::string_view text);
// "2,3" -> {2, 3}
absl::StatusOr<std::vector<int64_t>> ParseIntList(std::string_view text);
absl::StatusOr<std::vector<double>> ParseDoubleList(std::string_view text);

// torch-like: floats always show a decimal point ("10.0"), integers don't.
std::string FormatValue(double value, DType dtype);
// 1536 -> "1.5 KiB"
std::string FormatBytes(int64_t bytes);

// A text table with left-aligned columns, as kubectl prints them.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void AddRow(std::vector<std::string> row);
  std::string Render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace ccl::ctl
