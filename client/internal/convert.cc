#include "client/internal/convert.h"

#include <utility>

#include "common/proto_convert.h"

namespace ccl::client::internal {
namespace {

// The workers answer with kinds, dtypes and devices they know; an unset one
// (a record of a refused op, say) reads as absent, never as an error.
template <typename Native, typename Wire>
std::optional<Native> Optional(Wire wire) {
  auto native = ::ccl::FromProto(wire);
  if (!native.ok()) return std::nullopt;
  return *native;
}

Device DeviceOf(const v1::Device& device) {
  auto native = ::ccl::FromProto(device);
  return native.ok() ? *native : Device{};
}

v1::FillKind ToWire(FillKind kind) {
  switch (kind) {
    case FillKind::kZeros:
      return v1::FILL_KIND_ZEROS;
    case FillKind::kOnes:
      return v1::FILL_KIND_ONES;
    case FillKind::kConstant:
      return v1::FILL_KIND_CONSTANT;
    case FillKind::kRank:
      return v1::FILL_KIND_RANK;
    case FillKind::kRankPlusOne:
      return v1::FILL_KIND_RANK_PLUS_ONE;
    case FillKind::kArange:
      return v1::FILL_KIND_ARANGE;
    case FillKind::kArangePlusRank:
      return v1::FILL_KIND_ARANGE_PLUS_RANK;
    case FillKind::kRandom:
      return v1::FILL_KIND_RANDOM;
    case FillKind::kAffine:
      return v1::FILL_KIND_AFFINE;
    case FillKind::kUninitialized:
      return v1::FILL_KIND_UNINITIALIZED;
  }
  return v1::FILL_KIND_ZEROS;
}

}  // namespace

absl::Status StatusFromCode(int32_t code, const std::string& message) {
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

World ToNative(const v1::World& world) {
  World out;
  out.generation = world.generation();
  out.world_size = world.world_size();
  out.state = ::ccl::FromProto(world.state());
  out.heartbeat_interval_ms = world.heartbeat_interval_ms();
  out.heartbeat_timeout_ms = world.heartbeat_timeout_ms();
  out.shrunk_from_generation = world.shrunk_from_generation();
  out.excluded_ranks.assign(world.excluded_ranks().begin(),
                            world.excluded_ranks().end());
  out.reforming_reason = world.reforming_reason();
  out.began_after = world.began_after();
  out.members.reserve(static_cast<size_t>(world.members_size()));
  for (const v1::Member& member : world.members()) {
    out.members.push_back(::ccl::FromProto(member));
  }
  return out;
}

GroupInfo ToNative(const v1::GroupInfo& group) {
  GroupInfo out;
  out.name = group.name();
  out.ranks.assign(group.ranks().begin(), group.ranks().end());
  out.group_rank = group.group_rank();
  out.next_seq = group.next_seq();
  out.backend = group.backend();
  out.state = group.state();
  return out;
}

WorkerInfo ToNative(const v1::WorkerInfo& info) {
  WorkerInfo out;
  out.rank = info.rank();
  out.world_size = info.world_size();
  out.generation = info.generation();
  out.device = DeviceOf(info.device());
  out.address = info.address();
  out.backend = info.backend();
  out.worker_id = info.worker_id();
  out.tensor_count = info.tensor_count();
  out.tensor_bytes = info.tensor_bytes();
  out.tensor_quota_bytes = info.tensor_quota_bytes();
  for (const auto& group : info.groups()) {
    out.groups.push_back(ToNative(group));
  }
  out.version = info.version();
  out.state = info.state();
  return out;
}

TensorInfo ToNative(const v1::TensorInfo& info) {
  TensorInfo out;
  out.name = info.spec().name();
  out.dtype = Optional<DType>(info.spec().dtype()).value_or(DType::kFloat32);
  out.shape.assign(info.spec().shape().begin(), info.spec().shape().end());
  out.device = DeviceOf(info.spec().device());
  out.numel = info.numel();
  out.bytes = info.bytes();
  return out;
}

TensorList ToNative(const v1::ListTensorsResponse& list) {
  TensorList out;
  for (const auto& tensor : list.tensors()) {
    out.tensors.push_back(ToNative(tensor));
  }
  out.bytes_in_use = list.bytes_in_use();
  out.quota_bytes = list.quota_bytes();
  return out;
}

TensorSummary ToNative(const v1::TensorSummary& summary) {
  TensorSummary out;
  out.info = ToNative(summary.info());
  out.sum = summary.sum();
  out.min = summary.min();
  out.max = summary.max();
  out.checksum = summary.checksum();
  out.head.assign(summary.head().begin(), summary.head().end());
  out.nan_count = summary.nan_count();
  return out;
}

OpTiming ToNative(const v1::OpTiming& timing) {
  OpTiming out;
  out.enqueued_unix_us = timing.enqueued_unix_us();
  out.queue_us = timing.queue_us();
  out.device_us = timing.device_us();
  out.total_us = timing.total_us();
  return out;
}

OpResult ToNative(const v1::OpResponse& response) {
  OpResult out;
  out.generation = response.generation();
  out.group = response.group();
  out.seq = response.seq();
  out.work_id = response.work_id();
  out.worker_id = response.worker_id();
  out.state = ::ccl::FromProto(response.state());
  out.timing = ToNative(response.timing());
  return out;
}

WorkStatus ToNative(const v1::WorkStatus& status) {
  WorkStatus out;
  out.work_id = status.work_id();
  out.state = ::ccl::FromProto(status.state());
  out.kind = Optional<OpKind>(status.kind());
  out.group = status.group();
  out.seq = status.seq();
  out.error = StatusFromCode(status.error_code(), status.error_message());
  out.timing = ToNative(status.timing());
  return out;
}

BenchResult ToNative(const v1::BenchResponse& response) {
  BenchResult out;
  out.time_us = response.time_us();
  out.avg_us = response.avg_us();
  out.min_us = response.min_us();
  out.max_us = response.max_us();
  out.wrong = response.wrong();
  out.timing = ToNative(response.timing());
  return out;
}

OpRecord ToNative(const v1::OpRecord& record) {
  OpRecord out;
  out.generation = record.generation();
  out.seq = record.seq();
  out.kind = Optional<OpKind>(record.kind());
  out.dtype = Optional<DType>(record.dtype());
  out.count = record.count();
  out.root = record.root();
  out.peer = record.peer();
  out.reduce = Optional<ReduceOp>(record.reduce_op());
  out.input = record.input();
  out.output = record.output();
  out.state = ::ccl::FromProto(record.state());
  out.timing = ToNative(record.timing());
  out.error = StatusFromCode(record.error_code(), record.error_message());
  out.work_id = record.work_id();
  return out;
}

OpLog ToNative(const v1::OpLog& log) {
  OpLog out;
  out.rank = log.rank();
  out.group = log.group();
  out.next_seq = log.next_seq();
  for (const auto& record : log.records()) {
    out.records.push_back(ToNative(record));
  }
  out.now_unix_us = log.now_unix_us();
  return out;
}

PlanResult ToNative(const v1::PlanResponse& response) {
  PlanResult out;
  out.generation = response.generation();
  out.group = response.group();
  out.first_seq = response.seq();
  for (const auto& status : response.results()) {
    out.steps.push_back(ToNative(status));
  }
  return out;
}

v1::Fill ToWire(const Fill& fill) {
  v1::Fill out;
  out.set_kind(ToWire(fill.kind));
  out.set_value(fill.value);
  out.set_rank_scale(fill.rank_scale);
  out.set_step(fill.step);
  out.set_seed(fill.seed);
  return out;
}

v1::TensorSpec ToWire(const TensorSpec& spec, const Device& device) {
  v1::TensorSpec out;
  out.set_name(spec.name);
  out.set_dtype(::ccl::ToProto(spec.dtype));
  for (int64_t dim : spec.shape) out.add_shape(dim);
  *out.mutable_device() = ::ccl::ToProto(spec.device.value_or(device));
  return out;
}

v1::OpRequest ToWire(const Op& op) {
  v1::OpRequest out;
  out.set_kind(::ccl::ToProto(op.kind));
  out.set_input(op.input);
  out.set_output(op.output);
  out.set_reduce_op(::ccl::ToProto(op.reduce));
  out.set_premul_scale(op.premul_scale);
  out.set_root(op.root);
  out.set_peer(op.peer);
  out.set_timeout_ms(op.timeout.count());
  out.set_async(op.async);
  out.set_skip_agreement(op.skip_agreement);
  return out;
}

}  // namespace ccl::client::internal
