#include "server/rpc/convert.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/proto_convert.h"
#include "common/status_macros.h"

namespace ccl {
namespace {

FillKind FillKindFromProto(v1::FillKind kind) {
  switch (kind) {
    case v1::FILL_KIND_ONES:
      return FillKind::kOnes;
    case v1::FILL_KIND_CONSTANT:
      return FillKind::kConstant;
    case v1::FILL_KIND_RANK:
      return FillKind::kRank;
    case v1::FILL_KIND_RANK_PLUS_ONE:
      return FillKind::kRankPlusOne;
    case v1::FILL_KIND_ARANGE:
      return FillKind::kArange;
    case v1::FILL_KIND_ARANGE_PLUS_RANK:
      return FillKind::kArangePlusRank;
    case v1::FILL_KIND_RANDOM:
      return FillKind::kRandom;
    case v1::FILL_KIND_AFFINE:
      return FillKind::kAffine;
    case v1::FILL_KIND_UNINITIALIZED:
      return FillKind::kUninitialized;
    default:
      return FillKind::kZeros;
  }
}

}  // namespace

void GroupToProto(const GroupInfo& group, v1::GroupInfo* out) {
  out->set_name(group.name);
  for (int rank : group.ranks) out->add_ranks(rank);
  out->set_group_rank(group.group_rank);
  out->set_next_seq(group.next_seq);
  out->set_backend(group.backend);
  out->set_state(group.state);
}

absl::StatusOr<TensorMeta> TensorSpecFromProto(const v1::TensorSpec& spec) {
  TensorMeta meta;
  meta.name = spec.name();
  CCL_ASSIGN_OR_RETURN(meta.dtype, FromProto(spec.dtype()));
  meta.shape.assign(spec.shape().begin(), spec.shape().end());
  CCL_ASSIGN_OR_RETURN(meta.device, FromProto(spec.device()));
  return meta;
}

absl::StatusOr<Fill> FillFromProto(const v1::Fill& fill) {
  if (!v1::FillKind_IsValid(fill.kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown fill kind ", fill.kind()));
  }
  Fill out;
  out.kind = FillKindFromProto(fill.kind());
  out.value = fill.value();
  out.rank_scale = fill.rank_scale();
  out.step = fill.step();
  out.seed = fill.seed();
  return out;
}

absl::StatusOr<OpSpec> OpSpecFromProto(const v1::OpRequest& request) {
  OpSpec spec;
  spec.group = request.group().empty() ? kWorldGroup : request.group();
  if (request.seq() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq ", request.seq(), " is negative"));
  }
  spec.seq = request.seq();
  CCL_ASSIGN_OR_RETURN(spec.kind, FromProto(request.kind()));
  spec.input = request.input();
  spec.output = request.output();
  if (request.reduce_op() != v1::REDUCE_OP_UNSPECIFIED) {
    CCL_ASSIGN_OR_RETURN(spec.reduce_op, FromProto(request.reduce_op()));
  }
  spec.premul_scale = request.premul_scale();
  if (spec.reduce_op == ReduceOp::kPremulSum && request.premul_scale() == 0) {
    return absl::InvalidArgumentError(
        "premul_sum needs a non-zero premul_scale");
  }
  spec.root = request.root();
  spec.peer = request.peer();
  if (request.timeout_ms() < 0) {
    return absl::InvalidArgumentError("timeout_ms is negative");
  }
  spec.timeout = std::chrono::milliseconds(request.timeout_ms());
  spec.generation = request.generation();
  spec.agree = !request.skip_agreement();
  spec.async = request.async();
  return spec;
}

v1::TensorInfo TensorInfoToProto(const TensorMeta& meta) {
  v1::TensorInfo info;
  auto* spec = info.mutable_spec();
  spec->set_name(meta.name);
  spec->set_dtype(ToProto(meta.dtype));
  for (int64_t dim : meta.shape) spec->add_shape(dim);
  *spec->mutable_device() = ToProto(meta.device);
  info.set_numel(meta.numel);
  info.set_bytes(meta.bytes);
  return info;
}

v1::OpTiming TimingToProto(const OpTiming& timing) {
  v1::OpTiming out;
  out.set_enqueued_unix_us(timing.enqueued_unix_us);
  out.set_queue_us(timing.queue_us);
  out.set_device_us(timing.device_us);
  out.set_total_us(timing.total_us);
  return out;
}

void WorkToProto(const Work& work, v1::WorkStatus* out) {
  out->set_work_id(work.id());
  const WorkState state = work.state();
  out->set_state(ToProto(state));
  out->set_kind(ToProto(work.spec().kind));
  out->set_group(work.spec().group);
  out->set_seq(work.spec().seq);
  if (state == WorkState::kFailed) {
    const absl::Status status = work.status();
    out->set_error_code(static_cast<int32_t>(status.code()));
    out->set_error_message(std::string(status.message()));
  }
  *out->mutable_timing() = TimingToProto(work.timing());
}

absl::StatusOr<PlanSpec> PlanSpecFromProto(const v1::PlanRequest& request) {
  PlanSpec plan;
  plan.group = request.group().empty() ? kWorldGroup : request.group();
  plan.seq = request.seq();
  plan.generation = request.generation();
  plan.aggregate = request.aggregate();
  plan.ops.reserve(static_cast<size_t>(request.ops_size()));
  for (int i = 0; i < request.ops_size(); ++i) {
    auto op = OpSpecFromProto(request.ops(i));
    if (!op.ok()) {
      return absl::Status(
          op.status().code(),
          absl::StrCat("op ", i, " of the plan: ", op.status().message()));
    }
    plan.ops.push_back(*std::move(op));
  }
  return plan;
}

BenchOptions BenchOptionsFromProto(const v1::BenchRequest& request) {
  BenchOptions options;
  options.warmup = request.warmup_iters();
  options.iters = request.iters();
  options.check = request.check();
  options.graph_launches = request.graph_launches();
  return options;
}

void SummaryToProto(const TensorSummary& summary, v1::TensorSummary* out) {
  *out->mutable_info() = TensorInfoToProto(summary.meta);
  out->set_sum(summary.sum);
  out->set_min(summary.min);
  out->set_max(summary.max);
  out->set_checksum(absl::StrFormat("%016x", summary.checksum));
  for (double value : summary.head) out->add_head(value);
  out->set_nan_count(summary.nan_count);
}

void OpRecordToProto(const OpRecord& record, v1::OpRecord* out) {
  out->set_seq(record.spec.seq);
  out->set_kind(ToProto(record.spec.kind));
  out->set_dtype(ToProto(record.dtype));
  out->set_count(record.count);
  out->set_root(record.spec.root);
  out->set_peer(record.spec.peer);
  out->set_reduce_op(ToProto(record.spec.reduce_op));
  out->set_input(record.spec.input);
  out->set_output(record.spec.output);
  out->set_state(ToProto(record.state));
  *out->mutable_timing() = TimingToProto(record.timing);
  if (!record.status.ok()) {
    out->set_error_code(static_cast<int32_t>(record.status.code()));
    out->set_error_message(std::string(record.status.message()));
  }
  out->set_work_id(record.work_id);
  out->set_generation(record.spec.generation);
}

}  // namespace ccl
