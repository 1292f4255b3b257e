#include "common/proto_convert.h"

#include "absl/strings/str_cat.h"

namespace ccl {
namespace {

// Wire enums are the native ones shifted by one (0 is UNSPECIFIED on the
// wire), which keeps both lists in the same order.
template <typename Native>
absl::StatusOr<Native> Shifted(int wire, int max_native, const char* what) {
  if (wire <= 0 || wire > max_native + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is unspecified or unknown (", wire, ")"));
  }
  return static_cast<Native>(wire - 1);
}

}  // namespace

absl::StatusOr<DType> FromProto(v1::DType dtype) {
  return Shifted<DType>(dtype, static_cast<int>(DType::kFp8E5M2), "dtype");
}
v1::DType ToProto(DType dtype) {
  return static_cast<v1::DType>(static_cast<int>(dtype) + 1);
}

absl::StatusOr<ReduceOp> FromProto(v1::ReduceOp op) {
  return Shifted<ReduceOp>(op, static_cast<int>(ReduceOp::kPremulSum),
                           "reduce op");
}
v1::ReduceOp ToProto(ReduceOp op) {
  return static_cast<v1::ReduceOp>(static_cast<int>(op) + 1);
}

absl::StatusOr<Device> FromProto(const v1::Device& device) {
  if (device.index() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device index ", device.index(), " is negative"));
  }
  switch (device.kind()) {
    case v1::DEVICE_KIND_UNSPECIFIED:
    case v1::DEVICE_KIND_CPU:
      return Device{DeviceKind::kCpu, 0};
    case v1::DEVICE_KIND_CUDA:
      return Device{DeviceKind::kCuda, device.index()};
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown device kind ", device.kind()));
  }
}
v1::Device ToProto(const Device& device) {
  v1::Device out;
  out.set_kind(device.kind == DeviceKind::kCpu ? v1::DEVICE_KIND_CPU
                                               : v1::DEVICE_KIND_CUDA);
  out.set_index(device.index);
  return out;
}

absl::StatusOr<OpKind> FromProto(v1::OpKind kind) {
  return Shifted<OpKind>(kind, static_cast<int>(OpKind::kNop), "op kind");
}
v1::OpKind ToProto(OpKind kind) {
  return static_cast<v1::OpKind>(static_cast<int>(kind) + 1);
}

MemberState FromProto(v1::MemberState state) {
  switch (state) {
    case v1::MEMBER_STATE_JOINING:
      return MemberState::kJoining;
    case v1::MEMBER_STATE_READY:
      return MemberState::kReady;
    case v1::MEMBER_STATE_LOST:
      return MemberState::kLost;
    case v1::MEMBER_STATE_LEFT:
      return MemberState::kLeft;
    default:
      return MemberState::kUnknown;
  }
}

v1::MemberState ToProto(MemberState state) {
  switch (state) {
    case MemberState::kJoining:
      return v1::MEMBER_STATE_JOINING;
    case MemberState::kReady:
      return v1::MEMBER_STATE_READY;
    case MemberState::kLost:
      return v1::MEMBER_STATE_LOST;
    case MemberState::kLeft:
      return v1::MEMBER_STATE_LEFT;
    case MemberState::kUnknown:
      break;
  }
  return v1::MEMBER_STATE_UNSPECIFIED;
}

WorldState FromProto(v1::WorldState state) {
  switch (state) {
    case v1::WORLD_STATE_FORMING:
      return WorldState::kForming;
    case v1::WORLD_STATE_COMPLETE:
      return WorldState::kComplete;
    case v1::WORLD_STATE_DEGRADED:
      return WorldState::kDegraded;
    default:
      return WorldState::kUnknown;
  }
}

v1::WorldState ToProto(WorldState state) {
  switch (state) {
    case WorldState::kForming:
      return v1::WORLD_STATE_FORMING;
    case WorldState::kComplete:
      return v1::WORLD_STATE_COMPLETE;
    case WorldState::kDegraded:
      return v1::WORLD_STATE_DEGRADED;
    case WorldState::kUnknown:
      break;
  }
  return v1::WORLD_STATE_UNSPECIFIED;
}

WorkState FromProto(v1::WorkState state) {
  switch (state) {
    case v1::WORK_STATE_QUEUED:
      return WorkState::kQueued;
    case v1::WORK_STATE_RUNNING:
      return WorkState::kRunning;
    case v1::WORK_STATE_COMPLETED:
      return WorkState::kCompleted;
    case v1::WORK_STATE_FAILED:
      return WorkState::kFailed;
    default:
      return WorkState::kUnknown;
  }
}

v1::WorkState ToProto(WorkState state) {
  switch (state) {
    case WorkState::kQueued:
      return v1::WORK_STATE_QUEUED;
    case WorkState::kRunning:
      return v1::WORK_STATE_RUNNING;
    case WorkState::kCompleted:
      return v1::WORK_STATE_COMPLETED;
    case WorkState::kFailed:
      return v1::WORK_STATE_FAILED;
    case WorkState::kUnknown:
      break;
  }
  return v1::WORK_STATE_UNSPECIFIED;
}

MemberInfo FromProto(const v1::Member& member) {
  MemberInfo out;
  out.rank = member.rank();
  out.address = member.address();
  out.host = member.host();
  out.host_id = member.host_id();
  out.device_bus_id = member.device_bus_id();
  absl::StatusOr<Device> device = FromProto(member.device());
  if (device.ok()) out.device = *device;
  out.state = FromProto(member.state());
  out.last_seen_age_ms = member.last_seen_age_ms();
  out.worker_id = member.worker_id();
  out.tensor_count = member.tensor_count();
  out.tensor_bytes = member.tensor_bytes();
  return out;
}

void ToProto(const MemberInfo& member, v1::Member* out) {
  out->set_rank(member.rank);
  out->set_address(member.address);
  out->set_host(member.host);
  out->set_host_id(member.host_id);
  out->set_device_bus_id(member.device_bus_id);
  *out->mutable_device() = ToProto(member.device);
  out->set_state(ToProto(member.state));
  out->set_last_seen_age_ms(member.last_seen_age_ms);
  out->set_worker_id(member.worker_id);
  out->set_tensor_count(member.tensor_count);
  out->set_tensor_bytes(member.tensor_bytes);
}

HeartbeatRequest FromProto(const v1::HeartbeatRequest& request) {
  HeartbeatRequest native;
  native.rank = request.rank();
  native.generation = request.generation();
  native.worker_id = request.worker_id();
  native.tensor_count = request.tensor_count();
  native.tensor_bytes = request.tensor_bytes();
  native.reform_reason = request.reform_reason();
  native.seal_reason = request.seal_reason();
  native.secret = request.worker_secret();
  native.finished_below.insert(request.finished_below().begin(),
                               request.finished_below().end());
  return native;
}

v1::HeartbeatRequest ToProto(const HeartbeatRequest& request) {
  v1::HeartbeatRequest wire;
  wire.set_rank(request.rank);
  wire.set_generation(request.generation);
  wire.set_worker_id(request.worker_id);
  wire.set_tensor_count(request.tensor_count);
  wire.set_tensor_bytes(request.tensor_bytes);
  wire.set_reform_reason(request.reform_reason);
  wire.set_seal_reason(request.seal_reason);
  wire.set_worker_secret(request.secret);
  wire.mutable_finished_below()->insert(request.finished_below.begin(),
                                        request.finished_below.end());
  return wire;
}

}  // namespace ccl
