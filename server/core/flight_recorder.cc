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
  OpRecord record;
  record.spec = entry.spec;
  record.dtype = entry.dtype;
  record.count = entry.count;
  if (!entry.refused.ok()) {
    record.state = WorkState::kFailed;
    record.status = entry.refused;
    if (entry.work) record.work_id = entry.work->id();
    return record;
  }
  if (!entry.work) return record;
  record.work_id = entry.work->id();
  record.timing = entry.work->timing();
  record.state = entry.work->state();
  record.status = entry.work->status();
  if (entry.plan_index >= 0 && record.state == WorkState::kFailed) {
    // A plan fails as a whole; each op has its own outcome.
    auto* plan = dynamic_cast<PlanWork*>(entry.work.get());
    if (plan != nullptr) {
      const auto results = plan->results();
      if (static_cast<size_t>(entry.plan_index) < results.size()) {
        const absl::Status& own = results[entry.plan_index].status;
        record.status = own;
        record.state = own.ok() ? WorkState::kCompleted : WorkState::kFailed;
      }
    }
  }
  return record;
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
