// The coordinator's logic: membership and generations, the generation-scoped
// KV store, per-group sequence numbers and the NCCL unique id handout. It
// knows nothing of gRPC; the adapter (coordinator_service.h) converts.
//
// Threading contract: every method may be called from any thread. Calls that
// may have to wait (Register, KvWait, GetUniqueId) never block: they take a
// `done` callback that runs exactly once, either inline before the call
// returns or later on another thread (a Set/Register that satisfies the wait,
// or the deadline timer). `done` is never invoked with the core's lock held,
// so it may call back into the core or finish an RPC.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/timer_queue.h"
#include "common/types.h"

namespace ccl::coordinator {

enum class MemberState { kJoining, kReady, kLost, kLeft };
enum class WorldState { kForming, kComplete, kDegraded };

std::string_view MemberStateName(MemberState state);
std::string_view WorldStateName(WorldState state);

struct CoordinatorOptions {
  int world_size = 0;
  std::chrono::milliseconds heartbeat_interval{1000};
  // A ready member not heard from for this long becomes LOST.
  std::chrono::milliseconds heartbeat_timeout{10000};
  // Used when a Register, KvWait or GetUniqueId asks for timeout 0.
  std::chrono::milliseconds default_wait_timeout{300000};
  size_t max_value_bytes = 1 << 20;
  // Liveness is swept on this period and on every GetWorld; zero disables
  // the periodic sweep (tests drive it with SweepLiveness and a fake clock).
  std::chrono::milliseconds sweep_period{250};
  // Injectable so that heartbeat expiry is testable without sleeping. Wait
  // deadlines always use the real steady clock.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

struct MemberInfo {
  int rank = 0;
  std::string address;
  std::string host;
  Device device;
  MemberState state = MemberState::kJoining;
  int64_t last_seen_age_ms = 0;
  std::string worker_id;
  int64_t tensor_count = 0;
  int64_t tensor_bytes = 0;
};

struct WorldInfo {
  int64_t generation = 0;
  int world_size = 0;
  WorldState state = WorldState::kForming;
  // Sorted by rank; ranks nobody holds are absent.
  std::vector<MemberInfo> members;
  int64_t heartbeat_interval_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
};

struct RegisterRequest {
  std::string address;
  std::string host;
  Device device;
  std::optional<int> requested_rank;
  // Empty means anonymous: such a worker cannot reclaim its rank later.
  std::string worker_id;
  // Zero means the server default.
  std::chrono::milliseconds timeout{0};
  // A worker whose communicators run in this generation (it re-registers
  // after a coordinator restart); 0 for none. See FormWorldLocked.
  int64_t resume_generation = 0;
  // Next sequence number per group on that worker.
  std::map<std::string, int64_t> resume_next_seq;
};

struct RegisterResult {
  int rank = 0;
  int64_t generation = 0;
  // Shared: every member of a forming world gets the same snapshot, and a
  // world of 4096 must not be copied 4096 times.
  std::shared_ptr<const WorldInfo> world;
};

struct HeartbeatRequest {
  int rank = 0;
  int64_t generation = 0;
  std::string worker_id;
  int64_t tensor_count = 0;
  int64_t tensor_bytes = 0;
  // Non-empty: the worker's world communicator is broken; asks for a new
  // generation (granted when every member is ready).
  std::string reform_reason;
};

struct HeartbeatResult {
  int64_t generation = 0;
  WorldState world_state = WorldState::kForming;
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

class CoordinatorCore {
 public:
  // Identifies a parked call so that its caller can cancel it (the client
  // went away). Allocate with NewWaitId before parking.
  using WaitId = uint64_t;
  template <typename T>
  using Callback = std::function<void(absl::StatusOr<T>)>;

  static absl::StatusOr<std::unique_ptr<CoordinatorCore>> Create(
      CoordinatorOptions options);
  // Parked calls still pending finish with UNAVAILABLE.
  ~CoordinatorCore();
  CoordinatorCore(const CoordinatorCore&) = delete;
  CoordinatorCore& operator=(const CoordinatorCore&) = delete;

  const CoordinatorOptions& options() const { return options_; }

  WaitId NewWaitId();

  // Replies once every rank is registered; on timeout the registration is
  // withdrawn so that a retry can take the rank again. A worker_id that
  // already holds a rank gets that rank back (reconnect).
  void Register(WaitId id, RegisterRequest request,
                Callback<RegisterResult> done);
  absl::StatusOr<HeartbeatResult> Heartbeat(const HeartbeatRequest& request);
  // Returns the current generation.
  absl::StatusOr<int64_t> Deregister(int rank, int64_t generation,
                                     const std::string& worker_id);
  WorldInfo GetWorld();

  // KV calls take the request's generation (0 = current) and return the
  // generation they acted on.
  absl::StatusOr<int64_t> KvSet(int64_t generation, const std::string& key,
                                std::string value);
  absl::StatusOr<std::pair<int64_t, std::string>> KvGet(int64_t generation,
                                                        const std::string& key);
  void KvWait(WaitId id, int64_t generation, std::vector<std::string> keys,
              std::chrono::milliseconds timeout, Callback<int64_t> done);
  // Returns (generation, new value).
  absl::StatusOr<std::pair<int64_t, int64_t>> KvAdd(int64_t generation,
                                                    const std::string& key,
                                                    int64_t delta);
  absl::StatusOr<CompareSetResult> KvCompareSet(int64_t generation,
                                                const std::string& key,
                                                const std::string& expected,
                                                std::string desired);
  // Returns (generation, whether the key existed).
  absl::StatusOr<std::pair<int64_t, bool>> KvDelete(int64_t generation,
                                                    const std::string& key);

  // Returns (generation, first) of the reserved [first, first + count).
  absl::StatusOr<std::pair<int64_t, int64_t>> ReserveSequence(
      int64_t generation, const std::string& group, int64_t count);

  absl::StatusOr<int64_t> PostUniqueId(int64_t generation,
                                       const std::string& group,
                                       std::string unique_id);
  void GetUniqueId(WaitId id, int64_t generation, const std::string& group,
                   std::chrono::milliseconds timeout,
                   Callback<UniqueIdResult> done);

  // Finishes the parked call with CANCELLED (withdrawing a pending
  // registration). A no-op if it already finished.
  void Cancel(WaitId id);
  // Marks members LOST whose heartbeats are overdue.
  void SweepLiveness();
  // Fails every parked call with UNAVAILABLE and refuses new ones; for a
  // server that is going down and must not wait on them.
  void Shutdown();

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  // Closures collected under the lock and run after it is released.
  using Deferred = std::vector<std::function<void()>>;

  struct Member {
    uint64_t serial = 0;  // Tells registrations of one rank apart.
    std::string address;
    std::string host;
    Device device;
    MemberState state = MemberState::kJoining;
    TimePoint last_seen;
    std::string worker_id;
    int64_t tensor_count = 0;
    int64_t tensor_bytes = 0;
    int64_t resume_generation = 0;
    std::map<std::string, int64_t> resume_next_seq;
  };
  struct RegisterWaiter {
    int rank = 0;
    uint64_t serial = 0;
    Callback<RegisterResult> done;
    TimerQueue::TimerId timer = 0;
    std::chrono::milliseconds timeout{0};
  };
  using Scope = std::pair<int64_t, std::string>;  // (generation, key/group)
  struct KvWaiter {
    int64_t generation = 0;
    std::set<std::string> missing;
    Callback<int64_t> done;
    TimerQueue::TimerId timer = 0;
    std::chrono::milliseconds timeout{0};
  };
  struct UniqueIdWaiter {
    Scope scope;
    Callback<UniqueIdResult> done;
    TimerQueue::TimerId timer = 0;
  };

  explicit CoordinatorCore(CoordinatorOptions options);

  TimePoint Now() const;
  std::chrono::milliseconds WaitTimeout(std::chrono::milliseconds requested);
  absl::StatusOr<int64_t> ResolveGeneration(int64_t generation) const;

  bool IsLive(const std::optional<Member>& slot) const;
  bool IsComplete() const;
  WorldState StateLocked() const;
  WorldInfo SnapshotLocked() const;
  std::string DescribeMissingLocked() const;
  void SweepLocked(Deferred& deferred);
  void FormWorldLocked(Deferred& deferred);
  void ClearSlotLocked(int rank);
  void FailRegisterWaitersLocked(int rank, uint64_t serial,
                                 const absl::Status& status,
                                 Deferred& deferred);
  absl::Status ValidateValue(const std::string& value) const;
  void NotifyKeyLocked(int64_t generation, const std::string& key,
                       Deferred& deferred);
  // Unhooks a KV waiter that ends without its keys (deadline, cancel).
  void DropKvWaiterLocked(WaitId id, const KvWaiter& waiter);
  void OnDeadline(WaitId id);
  void ScheduleSweep();

  const CoordinatorOptions options_;

  std::mutex mutex_;
  bool shutting_down_ = false;
  WaitId next_wait_id_ = 1;
  uint64_t next_serial_ = 1;
  int64_t generation_ = 0;
  std::vector<std::optional<Member>> slots_;
  std::unordered_map<std::string, int> rank_of_worker_;
  std::unordered_map<WaitId, RegisterWaiter> register_waiters_;

  std::map<Scope, std::string> kv_;
  std::unordered_map<WaitId, KvWaiter> kv_waiters_;
  std::map<Scope, std::vector<WaitId>> kv_waiters_by_key_;

  std::map<Scope, int64_t> sequences_;
  std::map<Scope, std::string> unique_ids_;
  std::unordered_map<WaitId, UniqueIdWaiter> unique_id_waiters_;

  // Last, so that it is destroyed first: its thread runs callbacks that use
  // everything above.
  TimerQueue timers_;
};

}  // namespace ccl::coordinator
