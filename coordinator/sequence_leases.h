// Who holds the sequence numbers the coordinator handed out, and whether
// they are still there.
//
// A client that reserves sequence numbers holds a lease open on a stream
// (HoldLease) for as long as its process lives; numbers reserved under the
// lease are recorded as its ranges. A worker whose group waits for a
// missing number asks who holds it (AwaitSequenceHolder): the answer comes
// at once if the lease has ended (the client was killed mid-loop, say) or
// when it ends, so the worker skips the dead client's numbers then, not
// after its gap timeout; the gap timeout stays for numbers no lease holds.
//
// Ranges belong to a generation and live as long as the coordinator keeps
// that generation's data (KvSpace: the current one and the one it
// replaced), at most kMaxRangesPerGroup per group (the oldest go first:
// long run, as a later client's op could only have waited on a recent one).
//
// Not thread-safe: CoordinatorCore owns one and calls it under its lock;
// callbacks are appended to `deferred`, run once the lock is released.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/timer_queue.h"
#include "coordinator/types.h"

namespace ccl::coordinator {

struct SequenceHolder {
  int64_t generation = 0;
  // The lease that held the seq has ended: [begin, end) carries no op that
  // the asking worker has not received yet.
  bool released = false;
  int64_t begin = 0;
  int64_t end = 0;
  // For a person: who held the range and what became of them, or why this
  // cannot be told (released false).
  std::string reason;
};

class SequenceLeases {
 public:
  static constexpr size_t kMaxLeaseBytes = 64;
  static constexpr size_t kMaxOpenLeases = 65536;
  static constexpr size_t kMaxRangesPerGroup = 65536;

  // `on_deadline` runs on `timers`' thread when a parked call's deadline
  // passes; the owner takes its lock and calls Expire.
  SequenceLeases(TimerQueue& timers, std::function<void(WaitId)> on_deadline);
  SequenceLeases(const SequenceLeases&) = delete;
  SequenceLeases& operator=(const SequenceLeases&) = delete;

  // The lease's stream began; `holder` names the client (its address).
  // ALREADY_EXISTS if a stream holds it now, RESOURCE_EXHAUSTED past
  // kMaxOpenLeases.
  absl::Status Open(const std::string& lease, std::string holder);
  // The stream ended: every worker waiting on one of its ranges is told.
  void Close(const std::string& lease, Deferred& deferred);
  // Records [first, first + count) of `group` in `generation` under
  // `lease`; false (nothing recorded) unless a stream holds the lease now.
  bool Record(int64_t generation, const std::string& group, int64_t first,
              int64_t count, const std::string& lease);
  // Who holds `seq`: see SequenceHolder. Answers at once unless the seq's
  // lease is held open; then parks until it ends or `timeout` passes.
  void Await(WaitId id, int64_t generation, const std::string& group,
             int64_t seq, std::chrono::milliseconds timeout,
             Callback<SequenceHolder> done, Deferred& deferred);
  // Drops the ranges of every generation but `current` and `previous`
  // (KvSpace's lifetime) and fails the calls parked on them with `why`.
  void Keep(int64_t current, int64_t previous, const absl::Status& why,
            Deferred& deferred);

  // End the parked call `id` and return the closure that finishes it, or
  // an empty one when `id` is not parked here.
  std::function<void()> Expire(WaitId id);
  std::function<void()> Cancel(WaitId id, const absl::Status& why);
  void FailAll(const absl::Status& why, Deferred& deferred);

 private:
  struct Lease {
    std::string holder;
    bool open = true;
    // Calls parked on one of the lease's ranges.
    std::unordered_set<WaitId> waiters;
  };
  struct Range {
    int64_t end = 0;
    std::shared_ptr<Lease> lease;
  };
  struct Waiter {
    int64_t generation = 0;
    std::string group;
    int64_t seq = 0;
    int64_t begin = 0;
    int64_t end = 0;
    std::shared_ptr<Lease> lease;
    Callback<SequenceHolder> done;
    TimerQueue::TimerId timer = 0;
    std::chrono::milliseconds timeout{0};
  };
  // Ranges by (generation, group), by their first seq.
  using Ranges = std::map<int64_t, Range>;

  SequenceHolder ReleasedBy(int64_t generation, int64_t begin, int64_t end,
                            const Lease& lease) const;

  TimerQueue& timers_;
  const std::function<void(WaitId)> on_deadline_;
  // Leases a stream holds now; an ended one lives on in its ranges.
  std::unordered_map<std::string, std::shared_ptr<Lease>> open_;
  std::map<std::pair<int64_t, std::string>, Ranges> ranges_;
  std::unordered_map<WaitId, Waiter> waiters_;
};

}  // namespace ccl::coordinator
