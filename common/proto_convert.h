// Conversions between the wire enums (ccl.v1) and the native ones
// (common/types.h). Adapters and clients use these; logic never sees protos.
#pragma once

#include "absl/status/statusor.h"
#include "ccl/v1/common.pb.h"
#include "ccl/v1/coordinator.pb.h"
#include "ccl/v1/worker.pb.h"
#include "common/membership_types.h"
#include "common/types.h"

namespace ccl {

absl::StatusOr<DType> FromProto(v1::DType dtype);
v1::DType ToProto(DType dtype);

absl::StatusOr<ReduceOp> FromProto(v1::ReduceOp op);
v1::ReduceOp ToProto(ReduceOp op);

absl::StatusOr<Device> FromProto(const v1::Device& device);
v1::Device ToProto(const Device& device);

absl::StatusOr<OpKind> FromProto(v1::OpKind kind);
v1::OpKind ToProto(OpKind kind);

// States: an unspecified or unknown wire value reads as kUnknown, which
// goes out as UNSPECIFIED.
MemberState FromProto(v1::MemberState state);
v1::MemberState ToProto(MemberState state);
WorldState FromProto(v1::WorldState state);
v1::WorldState ToProto(WorldState state);
WorkState FromProto(v1::WorkState state);
v1::WorkState ToProto(WorkState state);

// A member of the world: the coordinator describes it, clients read it. An
// unknown device reads as the default one.
MemberInfo FromProto(const v1::Member& member);
// In place: a world's snapshot fills thousands of them.
void ToProto(const MemberInfo& member, v1::Member* out);

// A heartbeat: the worker sends it, the coordinator reads it.
HeartbeatRequest FromProto(const v1::HeartbeatRequest& request);
v1::HeartbeatRequest ToProto(const HeartbeatRequest& request);

}  // namespace ccl
