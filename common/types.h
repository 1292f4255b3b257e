// Native vocabulary of the service (dtypes, reduce ops, devices, op kinds).
// Logic code uses these; the gRPC adapters convert from and to the protos.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

// A rank's membership as the coordinator records it, the world's state,
// and an op's state: one vocabulary for the coordinator, the worker and the
// client (each used to carry its own copy). kUnknown is what a reader makes
// of a value it does not know (a newer peer's); no service sets it.
enum class MemberState { kUnknown, kJoining, kReady, kLost, kLeft };
enum class WorldState { kUnknown, kForming, kComplete, kDegraded };
enum class WorkState { kUnknown, kQueued, kRunning, kCompleted, kFailed };

// "joining", "complete", "running", ...; "unknown" for kUnknown.
std::string_view MemberStateName(MemberState state);
std::string_view WorldStateName(WorldState state);
std::string_view WorkStateName(WorkState state);

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

// How a tensor is filled when it is allocated or written (the same fills on
// every backend and in the client's requests).
enum class FillKind {
  kZeros,
  kOnes,
  kConstant,        // value
  kRank,            // rank
  kRankPlusOne,     // rank + 1
  kArange,          // i
  kArangePlusRank,  // rank + i
  kRandom,          // uniform [0, 1), from (seed, rank)
  kAffine,          // value + rank * rank_scale + i * step
  kUninitialized,   // fastest for large benchmark buffers
};

struct Fill {
  FillKind kind = FillKind::kZeros;
  double value = 0;
  double rank_scale = 0;
  double step = 0;
  uint64_t seed = 0;
};

// What a tensor is: its name, type, shape and where it lives.
struct TensorMeta {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  Device device;
  int64_t numel = 0;
  int64_t bytes = 0;
};

size_t DTypeSize(DType dtype);
bool IsFloatingPoint(DType dtype);
// The types premul_sum takes: the floating-point ones, fp8 included (NCCL
// scales those too); its scale is a floating-point multiply, which an
// integer tensor would truncate.
bool TakesPremulScale(DType dtype);
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
