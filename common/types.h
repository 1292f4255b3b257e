// Native vocabulary of the service (dtypes, reduce ops, devices, op kinds).
// Logic code uses these; the gRPC adapters convert from and to the protos.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/dtype.h"

namespace ccl {

enum class DeviceKind { kCpu, kCuda };

enum class OpKind {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kGather,
  kScatter,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv,
  kNop,
};

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

size_t DTypeSize(DType dtype);
bool IsFloatingPoint(DType dtype);
// torch-style names: "float32", "bfloat16", "fp8_e4m3", ...
std::string_view DTypeName(DType dtype);
// Accepts the torch names and common aliases (fp32, half, bf16, int, ...).
absl::StatusOr<DType> ParseDType(std::string_view name);

std::string_view ReduceOpName(ReduceOp op);
absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name);

std::string_view OpKindName(OpKind kind);
// Ops whose result combines values from several ranks with a ReduceOp.
bool IsReduction(OpKind kind);
// Ops with a root rank (broadcast, reduce, gather, scatter).
bool HasRoot(OpKind kind);

std::string DeviceName(const Device& device);
// "cpu", "cuda", "cuda:1".
absl::StatusOr<Device> ParseDevice(std::string_view name);

}  // namespace ccl
