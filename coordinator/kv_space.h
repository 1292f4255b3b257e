// The coordinator's generation-scoped data: the KV store (the Gloo
// rendezvous and the NCCL id keys ride on it), the per-group sequence
// counters and the unique-id handout, with the calls parked on them.
//
// Cost contract, which is what lets a world of many thousand ranks
// rendezvous in linear time: a call costs O(its own keys) (log factors
// aside), whatever the world size and however many calls are parked; a
// value is stored once and shared by every waiter it is handed to.
//
// Lifetime: a generation's data lives until the generation after the next
// one starts. The one just replaced is kept so that calls in flight when it
// ended (a rank's failure diagnosis) still find their keys; everything older
// is dropped, and calls that name it fail with FAILED_PRECONDITION.
//
// Not thread-safe: CoordinatorCore owns one and calls it under its lock.
// Callbacks never run here; they are appended to `deferred`, which the core
// runs once it has released the lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/timer_queue.h"
#include "coordinator/types.h"

namespace ccl::coordinator {

struct KvWaitResult {
  int64_t generation = 0;
  // The values of the keys in the order they were asked for, when asked
  // for. Shared: a value every rank waits for is not copied per rank here.
  std::vector<std::shared_ptr<const std::string>> values;
};

struct CompareSetResult {
  int64_t generation = 0;
  bool swapped = false;
  // The value now stored; empty when the key is absent.
  std::string value;
};

struct UniqueIdResult {
  int64_t generation = 0;
  std::string unique_id;
};

// What the store holds, for metrics and the scale benchmark.
struct KvStats {
  int generations = 0;  // with any data
  int64_t keys = 0;     // KV keys, sequence counters and unique ids
  int64_t bytes = 0;    // of keys and values
  int64_t parked = 0;   // KV and unique-id waits
};

// A group's name as its sequence counter is kept: "" is the world.
std::string SequenceGroupName(const std::string& group);

class KvSpace {
 public:
  // `on_deadline` runs on `timers`' thread when a parked call's deadline
  // passes; the owner takes its lock and calls Expire.
  KvSpace(TimerQueue& timers, std::function<void(WaitId)> on_deadline);
  KvSpace(const KvSpace&) = delete;
  KvSpace& operator=(const KvSpace&) = delete;

  int64_t current() const { return current_; }
  // A request's generation (0: the current one) as the one to act on:
  // INVALID_ARGUMENT for one that has not started, FAILED_PRECONDITION for
  // one whose data was dropped.
  absl::StatusOr<int64_t> Resolve(int64_t generation) const;

  // Makes `generation` the current one: fails the parked calls of every
  // earlier generation with `why` and drops the data of all but the one it
  // replaces.
  void Advance(int64_t generation, const absl::Status& why, Deferred& deferred);
  // Fails the parked calls of `generation` (a rendezvous that can no longer
  // complete: a member of it was lost) but keeps its data.
  void AbortWaits(int64_t generation, const absl::Status& why,
                  Deferred& deferred);

  // The calls below take a generation that Resolve returned.
  void Set(int64_t generation, const std::string& key, std::string value,
           Deferred& deferred);
  absl::StatusOr<std::string> Get(int64_t generation,
                                  const std::string& key) const;
  // Finishes at once when every key is present (or the generation is over),
  // else parks until the last one is set or `timeout` passes.
  void Wait(WaitId id, int64_t generation, std::vector<std::string> keys,
            bool with_values, std::chrono::milliseconds timeout,
            Callback<KvWaitResult> done, Deferred& deferred);
  // The new value.
  absl::StatusOr<int64_t> Add(int64_t generation, const std::string& key,
                              int64_t delta, Deferred& deferred);
  CompareSetResult CompareSet(int64_t generation, const std::string& key,
                              const std::string& expected, std::string desired,
                              Deferred& deferred);
  // Whether the key existed.
  bool Delete(int64_t generation, const std::string& key);

  // First of [first, first + count) of `group` ("" is the world).
  int64_t Reserve(int64_t generation, const std::string& group, int64_t count);
  // Raises the group's next sequence number to at least `next`.
  void SeedSequence(int64_t generation, const std::string& group, int64_t next);

  absl::Status PostUniqueId(int64_t generation, const std::string& group,
                            std::string unique_id, Deferred& deferred);
  void GetUniqueId(WaitId id, int64_t generation, const std::string& group,
                   std::chrono::milliseconds timeout,
                   Callback<UniqueIdResult> done, Deferred& deferred);

  // End the parked call `id` (its deadline passed; its caller went away)
  // and return the closure that finishes it, or an empty one when `id` is
  // not parked here.
  std::function<void()> Expire(WaitId id);
  std::function<void()> Cancel(WaitId id, const absl::Status& why);
  // Fails every parked call (the coordinator is going down).
  void FailAll(const absl::Status& why, Deferred& deferred);

  KvStats Stats() const;

 private:
  using Value = std::shared_ptr<const std::string>;
  struct Generation {
    std::unordered_map<std::string, Value> kv;
    // Parked KV waits by each key they still miss, unique-id waits by group,
    // and every parked call of the generation.
    std::unordered_map<std::string, std::unordered_set<WaitId>> kv_waits;
    std::unordered_map<std::string, std::unordered_set<WaitId>> id_waits;
    std::unordered_set<WaitId> parked;
    std::unordered_map<std::string, int64_t> sequences;
    std::unordered_map<std::string, std::string> unique_ids;
    int64_t bytes = 0;
  };
  struct KvWaiter {
    int64_t generation = 0;
    std::set<std::string> missing;  // sorted, for the timeout's message
    std::vector<std::string> keys;  // as asked
    bool with_values = false;
    Callback<KvWaitResult> done;
    TimerQueue::TimerId timer = 0;
    std::chrono::milliseconds timeout{0};
  };
  struct IdWaiter {
    int64_t generation = 0;
    std::string group;
    Callback<UniqueIdResult> done;
    TimerQueue::TimerId timer = 0;
  };

  Generation& At(int64_t generation) { return generations_[generation]; }
  const Generation* Find(int64_t generation) const;
  void Put(int64_t generation, const std::string& key, Value value,
           Deferred& deferred);
  KvWaitResult ResultOf(const KvWaiter& waiter) const;
  // Unhooks a parked call from its generation's indexes.
  void Unhook(WaitId id, const KvWaiter& waiter);
  void Unhook(WaitId id, const IdWaiter& waiter);
  TimerQueue::TimerId Arm(WaitId id, std::chrono::milliseconds timeout);

  TimerQueue& timers_;
  const std::function<void(WaitId)> on_deadline_;
  int64_t current_ = 0;
  // The generation `current_` replaced; its data is kept.
  int64_t previous_ = 0;
  std::map<int64_t, Generation> generations_;
  std::unordered_map<WaitId, KvWaiter> kv_waiters_;
  std::unordered_map<WaitId, IdWaiter> id_waiters_;
};

}  // namespace ccl::coordinator
