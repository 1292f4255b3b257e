// The coordinator's logic: membership and generations, the generation-scoped
// KV store, per-group sequence numbers and the NCCL unique id handout. It
// knows nothing of gRPC; the adapter (coordinator_service.h) converts.
//
// One class, one lock, in rooms: generations, registration and parked calls
// (coordinator_core.cc), heartbeats and liveness (coordinator_liveness.cc,
// policy in heartbeat_policy.h), the KV calls (coordinator_kv.cc); the
// state lives in a Roster (roster.h) and a KvSpace (kv_space.h).
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
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/membership_types.h"
#include "common/timer_queue.h"
#include "common/types.h"
#include "coordinator/heartbeat_policy.h"
#include "coordinator/kv_space.h"
#include "coordinator/roster.h"
#include "coordinator/sequence_leases.h"
#include "coordinator/types.h"

namespace ccl::coordinator {

struct CoordinatorOptions {
  int world_size = 0;
  // The heartbeat period and the silence after which a ready member becomes
  // LOST, for worlds small enough that their heartbeats stay within
  // max_heartbeat_rate; larger worlds are told a longer interval and
  // timeout (heartbeat_policy.h). WorldInfo says what applies.
  std::chrono::milliseconds heartbeat_interval{1000};
  std::chrono::milliseconds heartbeat_timeout{10000};
  // Heartbeats a second the whole world may send; <= 0: no limit.
  int64_t max_heartbeat_rate = 4096;
  // Used when a Register, KvWait or GetUniqueId asks for timeout 0.
  std::chrono::milliseconds default_wait_timeout{300000};
  size_t max_value_bytes = 1 << 20;
  // Liveness is swept on this period and on every GetWorld; zero disables
  // the periodic sweep (tests drive it with SweepLiveness and a fake clock).
  std::chrono::milliseconds sweep_period{250};
  // A formed world that loses a member (LOST, or LEFT by deregistering)
  // continues without it at a new generation, its survivors renumbered in
  // order (torchrun's elastic shrink), instead of waiting for a replacement.
  bool elastic_shrink = false;
  // Injectable so that heartbeat expiry is testable without sleeping. Wait
  // deadlines always use the real steady clock.
  std::function<std::chrono::steady_clock::time_point()> clock;
};

// A member as the world's snapshot describes it (common/membership_types.h).
using ::ccl::MemberInfo;

// The world's snapshot (common/membership_types.h).
using ::ccl::WorldInfo;

struct RegisterRequest : WorkerPlace {
  std::optional<int> requested_rank;
  // Empty means anonymous: such a worker cannot reclaim its rank later.
  std::string worker_id;
  // Zero means the server default.
  std::chrono::milliseconds timeout{0};
  // Set by a worker re-joining a world it was part of: requested_rank is
  // its previous rank, a hint that yields to the rank the coordinator
  // still knows it by.
  bool rejoin = false;
  // A worker whose communicators run in this generation (it re-registers
  // after a coordinator restart); 0 for none. See FormWorldLocked.
  int64_t resume_generation = 0;
  // Next sequence number per group on that worker.
  std::map<std::string, int64_t> resume_next_seq;
  // The newest generation the worker joined or was told to form, resumable
  // or not; a new generation starts above it. See FormWorldLocked.
  int64_t known_generation = 0;
  // The worker's secret. A worker id the coordinator does not know is bound
  // to it (at least 32 characters; empty: the coordinator issues one); one
  // it knows must bring the secret it was bound to.
  std::string secret;
  // Set by a worker whose world communicator is NCCL: the ranks per unique
  // id it plans with (common/unique_id_plan.h; 0: one id). Unless its rank
  // posts an id, the reply is held, once the world has formed, until the
  // one key the rank would read (UniqueIdReadKey of WorldPrefix) is set,
  // and carries its value: one call per rank instead of a Register and a
  // KvWait. The hold is bounded by the heartbeat interval (the rank is not
  // heartbeating yet) and by reply_by, and skipped in a generation whose
  // communicators are not built by a rendezvous (ids_expected_); past it,
  // or if the generation ends, the reply comes without the value and the
  // worker reads the key itself.
  std::optional<int> nccl_ranks_per_root;
  // When the caller stops waiting for the reply (its RPC deadline), if it
  // does: a held reply is sent well before it, with or without the ids, so
  // that a registration that succeeded is never lost to the caller's
  // deadline.
  std::optional<std::chrono::steady_clock::time_point> reply_by;
};

struct RegisterResult {
  int rank = 0;
  int64_t generation = 0;
  // Shared: every member of a forming world gets the same snapshot, and a
  // world of 4096 must not be copied 4096 times.
  std::shared_ptr<const WorldInfo> world;
  // The worker's secret: bound at its first registration (brought by the
  // worker, or issued), the same one on every later registration of that
  // worker id. It is what Heartbeat, Deregister and Register of the id
  // check; the worker id is no credential (GetWorld lists it).
  std::string secret;
  // KV values of `generation` read for the worker (nccl_ranks_per_root):
  // (key, value), the value shared by every reply that carries it.
  std::vector<std::pair<std::string, std::shared_ptr<const std::string>>> kv;
};

// One heartbeat, as the worker sends it (common/membership_types.h).
using ::ccl::HeartbeatRequest;

struct HeartbeatResult {
  int64_t generation = 0;
  WorldState world_state = WorldState::kForming;
};

// The coordinator's size, for the scale benchmark and metrics.
struct CoordinatorStats {
  int world_size = 0;
  int64_t generation = 0;
  int live_members = 0;
  int64_t parked_registrations = 0;
  KvStats kv;
};

class CoordinatorCore {
 public:
  // Allocate with NewWaitId before parking a call.
  using WaitId = coordinator::WaitId;
  template <typename T>
  using Callback = coordinator::Callback<T>;

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
  // already holds a rank gets that rank back (reconnect), if the request
  // carries its secret: PERMISSION_DENIED otherwise, so that no second
  // process takes over a worker's rank by naming its id.
  void Register(WaitId id, RegisterRequest request,
                Callback<RegisterResult> done);
  // NOT_FOUND unless `request.worker_id` holds the rank, PERMISSION_DENIED
  // unless the request carries that worker's secret.
  absl::StatusOr<HeartbeatResult> Heartbeat(const HeartbeatRequest& request);
  // Returns the current generation. Needs the worker's secret, as
  // Heartbeat does.
  absl::StatusOr<int64_t> Deregister(int rank, int64_t generation,
                                     const std::string& worker_id,
                                     const std::string& secret);
  WorldInfo GetWorld();
  CoordinatorStats Stats();

  // KV calls take the request's generation (0 = current) and return the
  // generation they acted on. Only the current generation and the one it
  // replaced have data; naming an older one is FAILED_PRECONDITION.
  absl::StatusOr<int64_t> KvSet(int64_t generation, const std::string& key,
                                std::string value);
  absl::StatusOr<std::pair<int64_t, std::string>> KvGet(int64_t generation,
                                                        const std::string& key);
  // With `with_values`, the result carries the keys' values: a wait and
  // the gets after it in one call.
  void KvWait(WaitId id, int64_t generation, std::vector<std::string> keys,
              std::chrono::milliseconds timeout, bool with_values,
              Callback<KvWaitResult> done);
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
  struct ReservedSequence {
    int64_t generation = 0;
    int64_t first = 0;
    // Recorded under the lease (sequence_leases.h), which a stream holds.
    bool leased = false;
  };
  // The same, under `lease` when a stream holds it (empty: none).
  absl::StatusOr<ReservedSequence> ReserveSequence(int64_t generation,
                                                   const std::string& group,
                                                   int64_t count,
                                                   const std::string& lease);

  // A client's lease stream began (HoldLease) or ended; see
  // sequence_leases.h. `holder` names the client for the workers' logs.
  absl::Status OpenLease(const std::string& lease, std::string holder);
  void CloseLease(const std::string& lease);
  // A worker's question about a missing seq: SequenceLeases::Await.
  void AwaitSequenceHolder(WaitId id, int64_t generation,
                           const std::string& group, int64_t seq,
                           std::chrono::milliseconds timeout,
                           Callback<SequenceHolder> done);

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
  using Member = Roster::Member;

  struct RegisterWaiter {
    int rank = 0;
    uint64_t serial = 0;
    std::string secret;
    Callback<RegisterResult> done;
    TimerQueue::TimerId timer = 0;
    std::chrono::milliseconds timeout{0};
    std::optional<int> nccl_ranks_per_root;
    std::optional<TimePoint> reply_by;
  };

  // A registration that found every rank held by a live member: a
  // replacement started at once after its predecessor was killed (what a
  // container restart does) comes before the silence makes that member
  // lost. It waits, within its register timeout, and is registered anew as
  // soon as a rank frees (AdmitParkedLocked).
  struct ParkedRegistration {
    WaitId id = 0;
    RegisterRequest request;
    Callback<RegisterResult> done;
    TimerQueue::TimerId timer = 0;
    TimePoint since;                              // Now()
    std::chrono::steady_clock::time_point until;  // as the timers run
  };

  explicit CoordinatorCore(CoordinatorOptions options);

  TimePoint Now() const;
  int WorldSize() const { return roster_.size(); }
  HeartbeatTiming Timing() const;
  std::chrono::milliseconds WaitTimeout(std::chrono::milliseconds requested);

  // Starts generation `next`: the KV store fails the parked calls of the
  // ones before it with ABORTED and drops old data.
  void StartGenerationLocked(int64_t next, Deferred& deferred);
  void ShrinkLocked(Deferred& deferred);
  // The last shrink: the generation it started, the one it came from, the
  // ranks of that one it left out.
  struct ShrinkRecord {
    int64_t generation = 0;
    int64_t from = 0;
    std::vector<int> excluded;
  };
  ShrinkRecord last_shrink_;
  // Whether the current generation's world communicators are built by a
  // rendezvous, so that its NCCL ids will be posted: not for a generation
  // adopted because every rank resumed it (they carry on), nor for one made
  // by a shrink (the survivors shrink theirs). Registrations are held for
  // the ids only when they will come.
  bool ids_expected_ = true;
  absl::StatusOr<HeartbeatResult> HeartbeatLocked(
      const HeartbeatRequest& request, Deferred& deferred);
  // Starts the re-form a rank asked for once every member has been heard
  // from since it asked (see reform_requested_at_).
  void MaybeReformLocked(Deferred& deferred);
  // Sets the ProgressKey of each group whose progress `request` changed.
  void PublishProgressLocked(Roster::Member& member,
                             const HeartbeatRequest& request,
                             Deferred& deferred);
  WorldState StateLocked() const;
  WorldInfo SnapshotLocked() const;
  // The snapshot Register replies share: rebuilt only when the roster or
  // the generation changed since the last one, so that a whole world
  // re-registering into a new generation does not copy the world per rank.
  // Its heartbeat ages are those of when it was taken.
  std::shared_ptr<const WorldInfo> SharedSnapshotLocked();
  std::string DescribeMissingLocked() const;
  // The rank a registration takes: its worker id's (a reconnect, its
  // secret checked), the one it asks for, or the lowest free one; -1 when
  // none is free (the call parks).
  absl::StatusOr<int> RankForLocked(const RegisterRequest& request,
                                    const std::optional<int>& known,
                                    Deferred& deferred);
  // The registration's rank taken (a new worker id) or kept (a known one),
  // and where the worker is now recorded.
  Member& RecordMemberLocked(int rank, bool known, RegisterRequest& request,
                             std::string fresh_secret, const std::string& claim,
                             Deferred& deferred);
  // A reconnect into a formed world (every member does it when the world
  // moves to a new generation): answered at once, nothing to wait for.
  void ReconnectLocked(WaitId id, int rank, Member& member,
                       const RegisterRequest& request,
                       std::chrono::milliseconds timeout,
                       Callback<RegisterResult> done, Deferred& deferred);
  // A new, lost or departed member joins anew: it waits for the world to
  // form, which it completes if it is the last.
  void JoinLocked(WaitId id, int rank, Member& member,
                  const RegisterRequest& request,
                  std::chrono::milliseconds timeout,
                  Callback<RegisterResult> done, Deferred& deferred);
  // FAILED_PRECONDITION when a live member other than `rank` holds
  // `claim` (GpuClaim), naming both workers and the way out.
  absl::Status CheckGpuClaimLocked(const std::string& claim, int rank,
                                   const RegisterRequest& request) const;
  void SweepLocked(Deferred& deferred);
  void FormWorldLocked(Deferred& deferred);
  // Answers a registration of the current generation: at once, or, for a
  // rank that asked for the NCCL ids and posts none, once they are set (or
  // the hold ends), parked in the KV space under `id`.
  // `resumes`: the worker runs this generation's communicators already.
  void AnswerRegisterLocked(WaitId id, RegisterResult result,
                            std::optional<int> nccl_ranks_per_root,
                            bool resumes, std::chrono::milliseconds timeout,
                            std::optional<TimePoint> reply_by,
                            Callback<RegisterResult> done, Deferred& deferred);
  // Ends one parked Register (deadline or cancel): withdraws the rank when
  // it was that registration's last parked call, so that a retry (or
  // another worker) can take it.
  void WithdrawLocked(WaitId id, RegisterWaiter& waiter, std::string_view why);
  void FailRegisterWaitersLocked(Member& member, const absl::Status& status,
                                 Deferred& deferred);
  absl::Status ValidateValue(const std::string& value) const;
  // For a call that may park (KvWait, GetUniqueId): runs `park` under the
  // lock with the generation `generation` resolves to, then the callbacks
  // it deferred. Without running it: the resolution's error, or
  // UNAVAILABLE while shutting down.
  absl::Status Park(int64_t generation,
                    const std::function<void(int64_t, Deferred&)>& park);
  // OK when `secret` is the one `member` was issued; PERMISSION_DENIED
  // naming `what` (the call) otherwise.
  static absl::Status CheckSecret(const Member& member, int rank,
                                  const std::string& secret,
                                  std::string_view what);
  void OnDeadline(WaitId id);
  // How a parked wait ends before it is answered.
  enum class WaitEnd { kDeadline, kCancelled };
  // OnDeadline's and Cancel's one path: the wait `id` answers, whatever
  // kind it is (a registration waiting for its world, one parked for a
  // rank, a KV wait, a lease), DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED
  // saying what it waited for, or CANCELLED.
  void EndWait(WaitId id, WaitEnd end);
  // Parks `request` until a rank frees or its timeout passes (RESOURCE_
  // EXHAUSTED then, naming the members it waited on).
  void ParkFullLocked(WaitId id, RegisterRequest request,
                      Callback<RegisterResult> done,
                      std::chrono::milliseconds timeout);
  // Hands freed ranks to parked registrations, oldest first: each
  // registers again (deferred, outside the lock) with what is left of its
  // timeout.
  void AdmitParkedLocked(Deferred& deferred);
  std::list<ParkedRegistration>::iterator FindParked(WaitId id);
  // The members a registration that found the world full waits on: the
  // quietest first, with how long each has been silent.
  std::string DescribeHoldersLocked() const;
  void ScheduleSweep();

  const CoordinatorOptions options_;

  std::mutex mutex_;
  bool shutting_down_ = false;
  WaitId next_wait_id_ = 1;
  uint64_t next_serial_ = 1;
  int64_t generation_ = 0;
  Roster roster_;
  // Which rank last registered with each GPU claim (GpuClaim in the .cc):
  // a registration's check is one lookup, not a pass over the world. An
  // entry can be stale (its member left or moved); the check reads the
  // member it names.
  std::unordered_map<std::string, int> gpu_claims_;
  std::shared_ptr<const WorldInfo> snapshot_;
  uint64_t snapshot_version_ = 0;
  int64_t snapshot_generation_ = -1;
  std::unordered_map<WaitId, RegisterWaiter> register_waiters_;
  // Oldest first.
  std::list<ParkedRegistration> parked_registrations_;
  // A rank of a complete world reported its communicator broken. The new
  // generation starts once every member has heartbeated since then: a rank
  // whose peer was just killed reports at once, before the dead peer's
  // silence makes it LOST, and a generation granted then would count the
  // dead rank in, fail its rendezvous, and need a second generation when a
  // replacement comes. Waiting costs live members at most one heartbeat
  // interval; a member that stays silent is declared lost instead, and the
  // world re-forms once, when it or a replacement registers.
  std::optional<TimePoint> reform_requested_at_;
  std::string reform_reason_;
  int reform_rank_ = -1;
  // Set when a rank of the current generation reported a broken
  // communicator (a seal or a re-form request); cleared by the next
  // generation. While set, ReserveSequence refuses the generation: an op
  // sent now would meet the broken communicator on some ranks and run, or
  // hang, on the others.
  std::string sealed_reason_;
  // sealed_reason_ of the generation before this one.
  std::string began_after_;
  // Records the first report of a broken communicator in this generation.
  void SealLocked(int rank, const std::string& reason);
  KvSpace kv_;
  SequenceLeases leases_;

  // Last, so that it is destroyed first: its thread runs callbacks that use
  // everything above.
  TimerQueue timers_;
};

}  // namespace ccl::coordinator
