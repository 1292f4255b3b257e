// The flight recorder: each group's last ops on this rank as they were
// submitted, with their live state, or why they were refused, so that a
// person can line ranks up and see where they diverged (`ccctl debug ops`),
// as PyTorch's NCCL flight recorder does.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/core/types.h"
#include "server/core/work.h"

namespace ccl {

class PlanWork;

struct FlightEntry {
  OpSpec spec;
  DType dtype = DType::kFloat32;
  int64_t count = 0;
  // The accepted work (its state and timing are read live); null when
  // refused.
  std::shared_ptr<Work> work;
  // Op `plan_index` of a plan's work; -1 for a lone op.
  int plan_index = -1;
  absl::Status refused;
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t per_group) : per_group_(per_group) {}

  void Record(FlightEntry entry);
  // The entries of `plan`'s ops (`refused`: why it was not queued), only as
  // many of its last ops as a group keeps: a longer plan's earlier entries
  // would be dropped as they were recorded.
  void RecordPlan(const std::shared_ptr<PlanWork>& plan,
                  const absl::Status& refused);
  // The last `limit` entries of `group` (0: all kept), oldest first.
  std::vector<OpRecord> Last(const std::string& group, int limit) const;

  static OpRecord ToRecord(const FlightEntry& entry);
  // The same, for an entry whose work is `work` (entry.work may be unset:
  // a completion callback holds the work only by pointer).
  static OpRecord ToRecord(const FlightEntry& entry, Work* work);
  // Op `index` of `plan` as ToRecord would give its entry, without one.
  static OpRecord ToRecord(PlanWork& plan, size_t index);

 private:
  // The work's part of a record: id, state, status and timing (op
  // `plan_index`'s own outcome in a failed plan).
  static void FillFromWork(Work& work, int plan_index, OpRecord& record);

  const size_t per_group_;
  mutable std::mutex mutex_;
  std::map<std::string, std::deque<FlightEntry>> entries_;
};

}  // namespace ccl
