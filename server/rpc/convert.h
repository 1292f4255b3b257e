// Conversions between the ccl.v1 messages of the Worker API and the worker
// core's native types: the only place both are known.
#pragma once

#include "absl/status/statusor.h"
#include "ccl/v1/worker.pb.h"
#include "server/core/worker_core.h"

namespace ccl {

absl::StatusOr<OpSpec> OpSpecFromProto(const v1::OpRequest& request);
absl::StatusOr<PlanSpec> PlanSpecFromProto(const v1::PlanRequest& request);
absl::StatusOr<TensorMeta> TensorSpecFromProto(const v1::TensorSpec& spec);
absl::StatusOr<Fill> FillFromProto(const v1::Fill& fill);
BenchOptions BenchOptionsFromProto(const v1::BenchRequest& request);

v1::TensorInfo TensorInfoToProto(const TensorMeta& meta);
v1::OpTiming TimingToProto(const OpTiming& timing);
void WorkToProto(const Work& work, v1::WorkStatus* out);
void GroupToProto(const GroupInfo& group, v1::GroupInfo* out);
void SummaryToProto(const TensorSummary& summary, v1::TensorSummary* out);
void OpRecordToProto(const OpRecord& record, v1::OpRecord* out);

}  // namespace ccl
