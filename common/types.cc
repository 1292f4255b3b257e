#include "common/types.h"

#include <array>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ccl {
namespace {

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  size_t size;
  bool floating;
};

constexpr std::array<DTypeEntry, 10> kDTypes = {{
    {DType::kFloat32, "float32", 4, true},
    {DType::kFloat64, "float64", 8, true},
    {DType::kFloat16, "float16", 2, true},
    {DType::kBFloat16, "bfloat16", 2, true},
    {DType::kInt8, "int8", 1, false},
    {DType::kUInt8, "uint8", 1, false},
    {DType::kInt32, "int32", 4, false},
    {DType::kInt64, "int64", 8, false},
    {DType::kFp8E4M3, "fp8_e4m3", 1, true},
    {DType::kFp8E5M2, "fp8_e5m2", 1, true},
}};

const DTypeEntry& Entry(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  return kDTypes[0];  // unreachable: every enumerator has an entry
}

constexpr std::array<std::pair<std::string_view, DType>, 12> kDTypeAliases = {{
    {"float", DType::kFloat32},
    {"fp32", DType::kFloat32},
    {"double", DType::kFloat64},
    {"fp64", DType::kFloat64},
    {"half", DType::kFloat16},
    {"fp16", DType::kFloat16},
    {"bf16", DType::kBFloat16},
    {"char", DType::kInt8},
    {"int", DType::kInt32},
    {"long", DType::kInt64},
    {"e4m3", DType::kFp8E4M3},
    {"e5m2", DType::kFp8E5M2},
}};

constexpr std::array<std::pair<std::string_view, ReduceOp>, 6> kReduceOps = {{
    {"sum", ReduceOp::kSum},
    {"prod", ReduceOp::kProd},
    {"min", ReduceOp::kMin},
    {"max", ReduceOp::kMax},
    {"avg", ReduceOp::kAvg},
    {"premul_sum", ReduceOp::kPremulSum},
}};

}  // namespace

size_t DTypeSize(DType dtype) { return Entry(dtype).size; }
bool IsFloatingPoint(DType dtype) { return Entry(dtype).floating; }
bool TakesPremulScale(DType dtype) { return IsFloatingPoint(dtype); }
std::string_view DTypeName(DType dtype) { return Entry(dtype).name; }

std::string_view MemberStateName(MemberState state) {
  switch (state) {
    case MemberState::kJoining:
      return "joining";
    case MemberState::kReady:
      return "ready";
    case MemberState::kLost:
      return "lost";
    case MemberState::kLeft:
      return "left";
    case MemberState::kUnknown:
      break;
  }
  return "unknown";
}

std::string_view WorldStateName(WorldState state) {
  switch (state) {
    case WorldState::kForming:
      return "forming";
    case WorldState::kComplete:
      return "complete";
    case WorldState::kDegraded:
      return "degraded";
    case WorldState::kUnknown:
      break;
  }
  return "unknown";
}

std::string_view WorkStateName(WorkState state) {
  switch (state) {
    case WorkState::kQueued:
      return "queued";
    case WorkState::kRunning:
      return "running";
    case WorkState::kCompleted:
      return "completed";
    case WorkState::kFailed:
      return "failed";
    case WorkState::kUnknown:
      break;
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  for (const auto& entry : kDTypes) {
    if (entry.name == lower) return entry.dtype;
  }
  for (const auto& [alias, dtype] : kDTypeAliases) {
    if (alias == lower) return dtype;
  }
  std::vector<std::string> names;
  for (const auto& entry : kDTypes) names.emplace_back(entry.name);
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", std::string(name), "'; expected one of ",
                   absl::StrJoin(names, ", ")));
}

std::string_view ReduceOpName(ReduceOp op) {
  for (const auto& [name, value] : kReduceOps) {
    if (value == op) return name;
  }
  return "?";
}

absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "product") lower = "prod";
  if (lower == "mean") lower = "avg";
  for (const auto& [op_name, value] : kReduceOps) {
    if (op_name == lower) return value;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduce op '", std::string(name),
                   "'; expected one of sum, prod, min, max, avg, premul_sum"));
}

std::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "all_reduce";
    case OpKind::kBroadcast:
      return "broadcast";
    case OpKind::kReduce:
      return "reduce";
    case OpKind::kAllGather:
      return "all_gather";
    case OpKind::kReduceScatter:
      return "reduce_scatter";
    case OpKind::kGather:
      return "gather";
    case OpKind::kScatter:
      return "scatter";
    case OpKind::kAllToAll:
      return "all_to_all";
    case OpKind::kBarrier:
      return "barrier";
    case OpKind::kSend:
      return "send";
    case OpKind::kRecv:
      return "recv";
    case OpKind::kNop:
      return "nop";
  }
  return "?";
}

bool IsReduction(OpKind kind) {
  return kind == OpKind::kAllReduce || kind == OpKind::kReduce ||
         kind == OpKind::kReduceScatter;
}

bool HasRoot(OpKind kind) {
  return kind == OpKind::kBroadcast || kind == OpKind::kReduce ||
         kind == OpKind::kGather || kind == OpKind::kScatter;
}

std::string DeviceName(const Device& device) {
  if (device.kind == DeviceKind::kCpu) return "cpu";
  return absl::StrCat("cuda:", device.index);
}

absl::StatusOr<Device> ParseDevice(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "cpu") return Device{DeviceKind::kCpu, 0};
  if (lower == "cuda" || lower == "gpu") return Device{DeviceKind::kCuda, 0};
  for (std::string_view prefix : {"cuda:", "gpu:"}) {
    if (std::string_view(lower).substr(0, prefix.size()) == prefix) {
      int index = 0;
      if (absl::SimpleAtoi(lower.substr(prefix.size()), &index) && index >= 0) {
        return Device{DeviceKind::kCuda, index};
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown device '", std::string(name),
                   "'; expected cpu, cuda or cuda:N"));
}

}  // namespace ccl
