#include "server/core/flight_recorder.h"

#include "server/core/plan_work.h"

namespace ccl {

void FlightRecorder::Record(FlightEntry entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::deque<FlightEntry>& entries = entries_[entry.spec.group];
  entries.push_back(std::move(entry));
  if (entries.size() > per_group_) entries.pop_front();
}

OpRecord FlightRecorder::ToRecord(const FlightEntry& entry) {
  return ToRecord(entry, entry.work.get());
}

void FlightRecorder::RecordPlan(const std::shared_ptr<PlanWork>& plan,
                                const absl::Status& refused) {
  const std::vector<OpSpec>& specs = plan->op_specs();
  const std::vector<BoundOp>& ops = plan->bound_ops();
  const size_t first =
      specs.size() > per_group_ ? specs.size() - per_group_ : 0;
  for (size_t i = first; i < specs.size(); ++i) {
    FlightEntry entry{specs[i], ops[i].dtype, ops[i].count, plan};
    entry.plan_index = static_cast<int>(i);
    entry.refused = refused;
    Record(std::move(entry));
  }
}

OpRecord FlightRecorder::ToRecord(const FlightEntry& entry, Work* work) {
  OpRecord record;
  record.spec = entry.spec;
  record.dtype = entry.dtype;
  record.count = entry.count;
  if (!entry.refused.ok()) {
    record.state = WorkState::kFailed;
    record.status = entry.refused;
    if (work != nullptr) record.work_id = work->id();
    return record;
  }
  if (work != nullptr) FillFromWork(*work, entry.plan_index, record);
  return record;
}

OpRecord FlightRecorder::ToRecord(PlanWork& plan, size_t index) {
  OpRecord record;
  record.spec = plan.op_specs()[index];
  record.dtype = plan.bound_ops()[index].dtype;
  record.count = plan.bound_ops()[index].count;
  FillFromWork(plan, static_cast<int>(index), record);
  return record;
}

void FlightRecorder::FillFromWork(Work& work, int plan_index,
                                  OpRecord& record) {
  record.work_id = work.id();
  record.timing = work.timing();
  record.state = work.state();
  record.status = work.status();
  if (plan_index >= 0 && record.state == WorkState::kFailed) {
    // A plan fails as a whole; each op has its own outcome.
    auto* plan = dynamic_cast<PlanWork*>(&work);
    if (plan != nullptr) {
      if (auto own = plan->result(static_cast<size_t>(plan_index))) {
        record.status = own->status;
        record.state =
            own->status.ok() ? WorkState::kCompleted : WorkState::kFailed;
      }
    }
  }
}

std::vector<OpRecord> FlightRecorder::Last(const std::string& group,
                                           int limit) const {
  std::vector<OpRecord> records;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(group);
  if (it == entries_.end()) return records;
  const std::deque<FlightEntry>& entries = it->second;
  const size_t first = limit > 0 && entries.size() > static_cast<size_t>(limit)
                           ? entries.size() - static_cast<size_t>(limit)
                           : 0;
  for (size_t i = first; i < entries.size(); ++i) {
    records.push_back(ToRecord(entries[i]));
  }
  return records;
}

}  // namespace ccl
