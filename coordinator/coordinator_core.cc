#include "coordinator/coordinator_core.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/elapsed.h"
#include "common/secrets.h"
#include "common/status_macros.h"
#include "common/unique_id_plan.h"
#include "common/world_keys.h"
#include "spdlog/spdlog.h"

namespace ccl::coordinator {
namespace {

// One GPU of one host as NCCL tells them apart (RegisterRequest in the
// proto); empty when there is no GPU to claim.
std::string GpuClaim(const std::string& host, const std::string& host_id,
                     const std::string& boot_id, const std::string& bus_id) {
  if (bus_id.empty()) return std::string();
  return host_id.empty()
             ? absl::StrCat("host:", host, "/", boot_id, "|", bus_id)
             : absl::StrCat("id:", host_id, "|", bus_id);
}

// A world this large is a typo, and a roster of that size is memory.
constexpr int kMaxWorldSize = 1 << 20;
// Random bytes of a secret the coordinator issues (hex-encoded, twice as
// many characters), and the shortest secret a worker may bring.
constexpr size_t kSecretBytes = 32;
constexpr size_t kMinWorkerSecret = 32;
// Waits longer than this are cut to it: a day is longer than any
// rendezvous, and a longer duration could overflow the clock's arithmetic.
constexpr std::chrono::milliseconds kMaxWait = std::chrono::hours(24);
// Up to this size every registration is logged at info; above it, every
// sixteenth of the world, so that forming 16k ranks does not write 16k lines.
constexpr int kLoggedWorldSize = 256;

}  // namespace

absl::StatusOr<std::unique_ptr<CoordinatorCore>> CoordinatorCore::Create(
    CoordinatorOptions options) {
  if (options.world_size <= 0 || options.world_size > kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat("world size must be in [1, ",
                                                   kMaxWorldSize, "], got ",
                                                   options.world_size));
  }
  if (options.heartbeat_interval.count() <= 0 ||
      options.heartbeat_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        "heartbeat interval and timeout must be positive");
  }
  if (options.heartbeat_timeout < options.heartbeat_interval) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat timeout (", options.heartbeat_timeout.count(),
                     " ms) is shorter than the interval (",
                     options.heartbeat_interval.count(), " ms)"));
  }
  if (options.default_wait_timeout.count() <= 0) {
    return absl::InvalidArgumentError("default wait timeout must be positive");
  }
  if (options.max_value_bytes == 0) {
    return absl::InvalidArgumentError("max value bytes must be positive");
  }
  if (options.sweep_period.count() < 0) {
    return absl::InvalidArgumentError("sweep period must not be negative");
  }
  if (!options.clock)
    options.clock = [] { return std::chrono::steady_clock::now(); };
  std::unique_ptr<CoordinatorCore> core(
      new CoordinatorCore(std::move(options)));
  core->ScheduleSweep();
  return core;
}

CoordinatorCore::CoordinatorCore(CoordinatorOptions options)
    : options_(std::move(options)),
      roster_(options_.world_size),
      kv_(timers_, [this](WaitId id) { OnDeadline(id); }),
      leases_(timers_, [this](WaitId id) { OnDeadline(id); }) {}

CoordinatorCore::~CoordinatorCore() { Shutdown(); }

CoordinatorCore::TimePoint CoordinatorCore::Now() const {
  return options_.clock();
}

std::chrono::milliseconds CoordinatorCore::WaitTimeout(
    std::chrono::milliseconds requested) {
  return std::min(
      requested.count() == 0 ? options_.default_wait_timeout : requested,
      kMaxWait);
}

absl::Status CoordinatorCore::CheckSecret(const Member& member, int rank,
                                          const std::string& secret,
                                          std::string_view what) {
  if (ConstantTimeEquals(secret, member.secret)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      std::string(what), ": rank ", rank, " is held by worker '",
      member.worker_id,
      "', and this request does not carry that worker's secret (the one its ",
      "registration returned). A worker id is not a credential; a new ",
      "process registers under a new worker id"));
}

CoordinatorCore::WaitId CoordinatorCore::NewWaitId() {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_wait_id_++;
}

// ---------------------------------------------------------------------------
// Generations

void CoordinatorCore::StartGenerationLocked(int64_t next, Deferred& deferred) {
  const int64_t previous = generation_;
  generation_ = next;
  ids_expected_ = true;
  reform_requested_at_.reset();
  began_after_ = std::move(sealed_reason_);
  sealed_reason_.clear();
  const absl::Status over = absl::AbortedError(
      absl::StrCat("generation ", previous, " is over (current is ", next,
                   "); re-register"));
  kv_.Advance(next, over, deferred);
  leases_.Keep(next, previous, over, deferred);
  // Every member's address, for the ranks' failure diagnosis: set here from
  // the registrations rather than by each rank, which would be one more
  // call per rank per generation.
  for (int rank = 0; rank < WorldSize(); ++rank) {
    if (const Member* member = roster_.Find(rank); member != nullptr) {
      kv_.Set(next, PeerAddressKey(rank), member->address, deferred);
    }
  }
}

void CoordinatorCore::ShrinkLocked(Deferred& deferred) {
  if (!options_.elastic_shrink || generation_ == 0) return;
  // A replacement on its way in completes the world instead.
  if (roster_.live() != roster_.ready()) return;
  if (roster_.all_ready() || roster_.ready() == 0) return;
  const int before = WorldSize();
  const std::vector<int> dropped = roster_.KeepReady();
  const int64_t from = generation_;
  StartGenerationLocked(generation_ + 1, deferred);
  last_shrink_ = {generation_, from, dropped};
  ids_expected_ = false;
  spdlog::warn(
      "generation {}: the world shrank from {} to {} ranks without rank(s) {} "
      "(--elastic shrink); survivors keep their order and are renumbered",
      generation_, before, WorldSize(), absl::StrJoin(dropped, ", "));
}

WorldState CoordinatorCore::StateLocked() const {
  if (roster_.all_ready()) return WorldState::kComplete;
  // Once a world has formed, anything short of it is a loss, not progress.
  return generation_ == 0 ? WorldState::kForming : WorldState::kDegraded;
}

WorldInfo CoordinatorCore::SnapshotLocked() const {
  WorldInfo world;
  world.generation = generation_;
  world.world_size = WorldSize();
  world.state = StateLocked();
  const HeartbeatTiming timing = Timing();
  world.heartbeat_interval_ms = timing.interval.count();
  world.heartbeat_timeout_ms = timing.timeout.count();
  if (last_shrink_.generation == generation_ && generation_ > 0) {
    world.shrunk_from_generation = last_shrink_.from;
    world.excluded_ranks = last_shrink_.excluded;
  }
  world.reforming_reason = sealed_reason_;
  world.began_after = began_after_;
  const TimePoint now = Now();
  for (int rank = 0; rank < WorldSize(); ++rank) {
    const Member* member = roster_.Find(rank);
    if (member == nullptr) continue;
    MemberInfo& m = world.members.emplace_back();
    m.rank = rank;
    m.address = member->address;
    m.host = member->host;
    m.host_id = member->host_id;
    m.device_bus_id = member->device_bus_id;
    m.device = member->device;
    m.state = member->state();
    m.last_seen_age_ms =
        std::max<int64_t>(0, ToMillis(now - member->last_seen));
    m.worker_id = member->worker_id;
    m.tensor_count = member->tensor_count;
    m.tensor_bytes = member->tensor_bytes;
  }
  return world;
}

std::shared_ptr<const WorldInfo> CoordinatorCore::SharedSnapshotLocked() {
  if (snapshot_ == nullptr || snapshot_version_ != roster_.version() ||
      snapshot_generation_ != generation_) {
    snapshot_ = std::make_shared<const WorldInfo>(SnapshotLocked());
    snapshot_version_ = roster_.version();
    snapshot_generation_ = generation_;
  }
  return snapshot_;
}

std::string CoordinatorCore::DescribeMissingLocked() const {
  constexpr size_t kShown = 16;
  std::string out =
      absl::StrCat(roster_.live(), " of ", WorldSize(), " ranks registered");
  const std::vector<int> shown = roster_.Missing(kShown);
  if (!shown.empty()) {
    absl::StrAppend(&out, "; missing ranks ", absl::StrJoin(shown, ", "));
    if (WorldSize() - roster_.live() > static_cast<int>(kShown)) {
      absl::StrAppend(&out, ", ...");
    }
  }
  return out;
}

void CoordinatorCore::FormWorldLocked(Deferred& deferred) {
  // A coordinator that restarted (generation 0) while its workers kept
  // running: if every rank resumes the same generation, adopt it, with the
  // groups' sequence counters where the workers stopped, so running
  // communicators are not disturbed. Anything else is a new generation above
  // every one seen, so no worker mistakes it for the one it runs: above
  // those the workers merely knew of too (chaos seed 1894393862: the
  // coordinator died while the world re-formed into generation 13, no
  // worker had a communicator left to resume, and the new one started again
  // at 1, where requests stamped 13 took seqs of the new numbering).
  int64_t resumed = 0;
  bool resume = generation_ == 0;
  int64_t highest = generation_;
  for (int rank = 0; rank < WorldSize(); ++rank) {
    const int64_t g = roster_.Find(rank)->resume_generation;
    highest = std::max({highest, g, roster_.Find(rank)->known_generation});
    if (g <= 0 || (resumed != 0 && g != resumed)) resume = false;
    resumed = g;
  }
  resume = resume && resumed > 0;
  StartGenerationLocked(resume ? resumed : highest + 1, deferred);
  if (resume) {
    ids_expected_ = false;
    for (int rank = 0; rank < WorldSize(); ++rank) {
      for (const auto& [group, next] : roster_.Find(rank)->resume_next_seq) {
        kv_.SeedSequence(generation_, group, next);
      }
    }
    spdlog::info("every rank resumed generation {}: adopted it", generation_);
  }
  const TimePoint now = Now();
  // Everyone was just heard from (they are waiting in Register, or have
  // been heartbeating); a member that waited long must not expire at once.
  for (int rank = 0; rank < WorldSize(); ++rank) {
    roster_.SetState(rank, MemberState::kReady);
    Member& member = *roster_.Find(rank);
    member.last_seen = now;
    member.resume_generation = 0;
    member.resume_next_seq.clear();
    member.known_generation = 0;
    member.register_waits.clear();
  }
  std::shared_ptr<const WorldInfo> world = SharedSnapshotLocked();
  spdlog::info("world formed: generation {}, {} ranks", generation_,
               WorldSize());
  deferred.reserve(deferred.size() + register_waiters_.size());
  for (auto& [id, waiter] : register_waiters_) {
    timers_.Cancel(waiter.timer);
    RegisterResult result{waiter.rank, generation_, world,
                          std::move(waiter.secret)};
    AnswerRegisterLocked(id, std::move(result), waiter.nccl_ranks_per_root,
                         /*resumes=*/false, waiter.timeout, waiter.reply_by,
                         std::move(waiter.done), deferred);
  }
  register_waiters_.clear();
}

void CoordinatorCore::AnswerRegisterLocked(
    WaitId id, RegisterResult result, std::optional<int> nccl_ranks_per_root,
    bool resumes, std::chrono::milliseconds timeout,
    std::optional<TimePoint> reply_by, Callback<RegisterResult> done,
    Deferred& deferred) {
  if (nccl_ranks_per_root.has_value() && ids_expected_ && !resumes) {
    const nccl::UniqueIdPlan plan =
        nccl::PlanUniqueIds(result.rank, WorldSize(), *nccl_ranks_per_root);
    // The rank's first heartbeat comes only after this reply: holding it
    // longer than an interval could make a live rank look silent. Nor past
    // half the time its caller still waits (the other half is for the reply
    // to arrive): a reply after the caller's deadline would lose a
    // registration that succeeded.
    std::chrono::milliseconds hold = std::min(timeout, Timing().interval);
    if (reply_by.has_value()) {
      hold = std::min(hold,
                      std::chrono::duration_cast<std::chrono::milliseconds>(
                          (*reply_by - std::chrono::steady_clock::now()) / 2));
    }
    if (!plan.posts && hold.count() > 0) {
      std::string key =
          nccl::UniqueIdReadKey(nccl::WorldPrefix(result.generation), plan);
      const int64_t generation = result.generation;
      // Whatever ends the wait (a timeout, the generation's end, the
      // caller leaving), the registration itself stands: the worker then
      // reads the key as a worker that did not ask would.
      kv_.Wait(
          id, generation, {key}, /*with_values=*/true, hold,
          [done = std::move(done), result = std::move(result),
           key](absl::StatusOr<KvWaitResult> r) mutable {
            if (r.ok() && r->values.size() == 1) {
              result.kv.emplace_back(std::move(key),
                                     std::move(r->values.front()));
            }
            done(std::move(result));
          },
          deferred);
      return;
    }
  }
  deferred.push_back(
      [done = std::move(done), result = std::move(result)]() mutable {
        done(std::move(result));
      });
}

// ---------------------------------------------------------------------------
// Membership

namespace {

// What a registration must say to be considered at all.
absl::Status ValidateRegister(const RegisterRequest& request) {
  if (request.address.empty()) {
    return (absl::InvalidArgumentError(
        "register: address is empty; pass the worker's host:port"));
  }
  if (request.requested_rank.has_value() && *request.requested_rank < 0) {
    return (absl::InvalidArgumentError(absl::StrCat(
        "register: requested rank ", *request.requested_rank, " is negative")));
  }
  if (request.resume_generation < 0) {
    return (absl::InvalidArgumentError(
        absl::StrCat("register: resume generation ", request.resume_generation,
                     " is negative")));
  }
  if (request.known_generation < 0) {
    return (absl::InvalidArgumentError(
        absl::StrCat("register: known generation ", request.known_generation,
                     " is negative")));
  }
  for (const auto& [group, next] : request.resume_next_seq) {
    if (next < 0) {
      return (absl::InvalidArgumentError(absl::StrCat(
          "register: next seq ", next, " of group '", group, "' is negative")));
    }
  }
  if (request.nccl_ranks_per_root.has_value() &&
      *request.nccl_ranks_per_root < 0) {
    return (absl::InvalidArgumentError(absl::StrCat(
        "register: NCCL ranks per root ", *request.nccl_ranks_per_root,
        " is negative (0 means one unique id)")));
  }
  if (request.timeout.count() < 0) {
    return (absl::InvalidArgumentError(absl::StrCat(
        "register: timeout ", request.timeout.count(), " ms is negative")));
  }
  if (!request.secret.empty() && request.secret.size() < kMinWorkerSecret) {
    return (absl::InvalidArgumentError(absl::StrCat(
        "register: a worker secret needs at least ", kMinWorkerSecret,
        " characters, got ", request.secret.size(),
        "; send none to have the coordinator issue one")));
  }
  return absl::OkStatus();
}

}  // namespace

void CoordinatorCore::Register(WaitId id, RegisterRequest request,
                               Callback<RegisterResult> done) {
  auto fail = [&done](absl::Status status) { done(std::move(status)); };
  if (absl::Status invalid = ValidateRegister(request); !invalid.ok()) {
    return fail(std::move(invalid));
  }
  const std::chrono::milliseconds timeout = WaitTimeout(request.timeout);
  // The secret of a worker id's first registration: the one the worker
  // brought (so that it can reconnect before that first registration was
  // answered), or a new one. Made outside the lock (a system call).
  absl::StatusOr<std::string> fresh_secret = request.secret;
  if (request.secret.empty()) fresh_secret = RandomSecretHex(kSecretBytes);
  if (!fresh_secret.ok()) {
    return fail(absl::UnavailableError(
        absl::StrCat("register: cannot make the worker's secret: ",
                     fresh_secret.status().message())));
  }

  Deferred deferred;
  absl::Status error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::optional<int> known = roster_.RankOf(request.worker_id);
    absl::StatusOr<int> rank = RankForLocked(request, known, deferred);
    const std::string claim = GpuClaim(request.host, request.host_id,
                                       request.boot_id, request.device_bus_id);
    if (rank.ok() && *rank < 0) {
      ParkFullLocked(id, request, std::move(done), timeout);
    } else if (rank.ok() && !claim.empty()) {
      error = CheckGpuClaimLocked(claim, *rank, request);
    } else if (!rank.ok()) {
      error = rank.status();
    }
    if (error.ok() && rank.ok() && *rank >= 0) {
      Member& member =
          RecordMemberLocked(*rank, known.has_value(), request,
                             *std::move(fresh_secret), claim, deferred);
      if (member.state() == MemberState::kReady) {
        ReconnectLocked(id, *rank, member, request, timeout, std::move(done),
                        deferred);
      } else {
        JoinLocked(id, *rank, member, request, timeout, std::move(done),
                   deferred);
      }
    }
  }
  if (!error.ok()) return fail(std::move(error));
  for (auto& f : deferred) f();
}

absl::StatusOr<int> CoordinatorCore::RankForLocked(
    const RegisterRequest& request, const std::optional<int>& known,
    Deferred& deferred) {
  if (shutting_down_) {
    return absl::UnavailableError("coordinator is shutting down");
  }
  if (known.has_value()) {
    const int rank = *known;
    CCL_RETURN_IF_ERROR(CheckSecret(
        *roster_.Find(rank), rank, request.secret,
        absl::StrCat("register of worker '", request.worker_id, "'")));
    // A re-joining worker names its previous rank only as a hint for a
    // coordinator that forgot it; one that remembers it (perhaps under a
    // new rank, after a shrink) has the last word.
    if (request.requested_rank.has_value() && !request.rejoin &&
        *request.requested_rank != rank) {
      return absl::FailedPreconditionError(absl::StrCat(
          "register: worker '", request.worker_id, "' already holds rank ",
          rank, "; it cannot also take rank ", *request.requested_rank,
          " (deregister first)"));
    }
    return rank;
  }
  if (request.requested_rank.has_value()) {
    const int rank = *request.requested_rank;
    if (rank >= WorldSize()) {
      return absl::InvalidArgumentError(
          absl::StrCat("register: requested rank ", rank,
                       " is out of range for world size ", WorldSize()));
    }
    if (const Member* holder = roster_.Find(rank);
        holder != nullptr && holder->live()) {
      return absl::AlreadyExistsError(
          absl::StrCat("register: rank ", rank, " is already held by worker '",
                       holder->worker_id, "' at ", holder->address));
    }
    return rank;
  }
  if (std::optional<int> free = roster_.LowestFree(); free) return *free;
  // A member silent past its heartbeat timeout is declared lost now, not at
  // the next sweep, and its rank taken at once.
  SweepLocked(deferred);
  if (std::optional<int> freed = roster_.LowestFree(); freed) return *freed;
  return -1;
}

CoordinatorCore::Member& CoordinatorCore::RecordMemberLocked(
    int rank, bool known, RegisterRequest& request, std::string fresh_secret,
    const std::string& claim, Deferred& deferred) {
  Member* member = roster_.Find(rank);
  // Known worker ids hold their slot: that is a reconnect.
  if (!known) {
    member = &roster_.Take(rank, request.worker_id, next_serial_++);
    member->secret = std::move(fresh_secret);
  }
  if (member->address != request.address || member->host != request.host ||
      member->device != request.device) {
    roster_.Touch();
    // A member of the running generation that came back elsewhere.
    if (generation_ > 0 && member->state() == MemberState::kReady &&
        member->address != request.address) {
      kv_.Set(generation_, PeerAddressKey(rank), request.address, deferred);
    }
  }
  member->place() = request.place();
  if (!claim.empty()) gpu_claims_[claim] = rank;
  member->last_seen = Now();
  member->resume_generation = request.resume_generation;
  member->known_generation = request.known_generation;
  member->resume_next_seq = std::move(request.resume_next_seq);
  return *member;
}

void CoordinatorCore::ReconnectLocked(WaitId id, int rank, Member& member,
                                      const RegisterRequest& request,
                                      std::chrono::milliseconds timeout,
                                      Callback<RegisterResult> done,
                                      Deferred& deferred) {
  const auto level = WorldSize() <= kLoggedWorldSize ? spdlog::level::info
                                                     : spdlog::level::debug;
  spdlog::log(level, "rank {} reconnected (worker '{}', {})", rank,
              request.worker_id, request.address);
  RegisterResult result{rank, generation_, SharedSnapshotLocked(),
                        member.secret};
  AnswerRegisterLocked(id, std::move(result), request.nccl_ranks_per_root,
                       /*resumes=*/request.resume_generation == generation_,
                       timeout, request.reply_by, std::move(done), deferred);
}

void CoordinatorCore::JoinLocked(WaitId id, int rank, Member& member,
                                 const RegisterRequest& request,
                                 std::chrono::milliseconds timeout,
                                 Callback<RegisterResult> done,
                                 Deferred& deferred) {
  roster_.SetState(rank, MemberState::kJoining);
  const int live = roster_.live();
  const bool milestone = WorldSize() <= kLoggedWorldSize ||
                         live % std::max(1, WorldSize() / 16) == 0;
  const auto level = milestone ? spdlog::level::info : spdlog::level::debug;
  if (spdlog::should_log(level)) {
    spdlog::log(level, "rank {} registered (worker '{}', {}, {}); {}", rank,
                request.worker_id, request.address, DeviceName(request.device),
                DescribeMissingLocked());
  }
  RegisterWaiter& waiter = register_waiters_[id];
  waiter.rank = rank;
  waiter.serial = member.serial;
  waiter.secret = member.secret;
  waiter.done = std::move(done);
  waiter.timeout = timeout;
  waiter.nccl_ranks_per_root = request.nccl_ranks_per_root;
  waiter.reply_by = request.reply_by;
  member.register_waits.push_back(id);
  if (roster_.complete()) {
    FormWorldLocked(deferred);
  } else {
    waiter.timer =
        timers_.ScheduleAfter(timeout, [this, id] { OnDeadline(id); });
  }
}

absl::Status CoordinatorCore::CheckGpuClaimLocked(
    const std::string& claim, int rank, const RegisterRequest& request) const {
  auto it = gpu_claims_.find(claim);
  if (it == gpu_claims_.end() || it->second == rank) return absl::OkStatus();
  const Member* holder = roster_.Find(it->second);
  if (holder == nullptr || !holder->live() ||
      GpuClaim(holder->host, holder->host_id, holder->boot_id,
               holder->device_bus_id) != claim) {
    return absl::OkStatus();
  }
  const std::string host =
      request.host_id.empty()
          ? absl::StrCat("host '", request.host, "' (no host id set)")
          : absl::StrCat("host id '", request.host_id, "'");
  return absl::FailedPreconditionError(absl::StrCat(
      "register: worker '", request.worker_id, "' at ", request.address,
      " claims GPU ", request.device_bus_id, " (", DeviceName(request.device),
      ") of ", host, ", which rank ", it->second, " (worker '",
      holder->worker_id, "' at ", holder->address,
      ") already holds: NCCL refuses two ranks of one host on one GPU "
      "(\"Duplicate GPU detected\"). Give each worker on this GPU a host "
      "id of its own (ccworker --host-id ID, env CCL_HOST_ID; ccctl cluster "
      "up --hosts N does it for a local cluster), or put this one on "
      "another GPU"));
}

void CoordinatorCore::FailRegisterWaitersLocked(Member& member,
                                                const absl::Status& status,
                                                Deferred& deferred) {
  for (WaitId id : member.register_waits) {
    auto it = register_waiters_.find(id);
    if (it == register_waiters_.end()) continue;
    timers_.Cancel(it->second.timer);
    deferred.push_back(
        [done = std::move(it->second.done), status] { done(status); });
    register_waiters_.erase(it);
  }
  member.register_waits.clear();
}

absl::StatusOr<int64_t> CoordinatorCore::Deregister(
    int rank, int64_t generation, const std::string& worker_id,
    const std::string& secret) {
  Deferred deferred;
  int64_t current;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    current = generation_;
    Member* member = roster_.Find(rank);
    if (member == nullptr || member->state() == MemberState::kLeft ||
        member->worker_id != worker_id) {
      return absl::NotFoundError(absl::StrCat("deregister: rank ", rank,
                                              " is not held by worker '",
                                              worker_id, "'"));
    }
    if (absl::Status s = CheckSecret(*member, rank, secret, "deregister");
        !s.ok()) {
      return s;
    }
    if (generation > generation_) {
      return absl::InvalidArgumentError(
          absl::StrCat("deregister: unknown generation ", generation,
                       " (current is ", generation_, ")"));
    }
    if (member->state() == MemberState::kJoining) {
      // Never part of a formed world: just withdraw.
      FailRegisterWaitersLocked(
          *member,
          absl::AbortedError(absl::StrCat("rank ", rank, " deregistered")),
          deferred);
      roster_.Clear(rank);
    } else {
      roster_.SetState(rank, MemberState::kLeft);
      ShrinkLocked(deferred);
    }
    spdlog::info("rank {} left (worker '{}')", rank, worker_id);
    AdmitParkedLocked(deferred);
  }
  for (auto& f : deferred) f();
  return current;
}

// ---------------------------------------------------------------------------
// Registrations that found the world full

void CoordinatorCore::ParkFullLocked(WaitId id, RegisterRequest request,
                                     Callback<RegisterResult> done,
                                     std::chrono::milliseconds timeout) {
  const HeartbeatTiming timing = Timing();
  spdlog::warn(
      "register: world of size {} is full; worker '{}' at {} waits up to {} "
      "ms for a rank to free (a member silent for {} ms is declared lost): {}",
      WorldSize(), request.worker_id, request.address, timeout.count(),
      timing.timeout.count(), DescribeHoldersLocked());
  ParkedRegistration& parked = parked_registrations_.emplace_back();
  parked.id = id;
  parked.request = std::move(request);
  parked.done = std::move(done);
  parked.since = Now();
  parked.until = std::chrono::steady_clock::now() + timeout;
  parked.timer = timers_.ScheduleAfter(timeout, [this, id] { OnDeadline(id); });
}

void CoordinatorCore::AdmitParkedLocked(Deferred& deferred) {
  int free = WorldSize() - roster_.live();
  while (free > 0 && !parked_registrations_.empty()) {
    ParkedRegistration parked = std::move(parked_registrations_.front());
    parked_registrations_.pop_front();
    timers_.Cancel(parked.timer);
    --free;
    spdlog::info("worker '{}' at {} takes a freed rank after waiting {} ms",
                 parked.request.worker_id, parked.request.address,
                 ToMillis(Now() - parked.since));
    // What is left of its timeout, for the world to form around it.
    parked.request.timeout =
        std::max(std::chrono::milliseconds(1),
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     parked.until - std::chrono::steady_clock::now()));
    deferred.push_back([this, id = parked.id,
                        request = std::move(parked.request),
                        done = std::move(parked.done)]() mutable {
      Register(id, std::move(request), std::move(done));
    });
  }
}

std::list<CoordinatorCore::ParkedRegistration>::iterator
CoordinatorCore::FindParked(WaitId id) {
  return std::find_if(
      parked_registrations_.begin(), parked_registrations_.end(),
      [id](const ParkedRegistration& parked) { return parked.id == id; });
}

std::string CoordinatorCore::DescribeHoldersLocked() const {
  constexpr size_t kShown = 4;
  std::vector<std::pair<int, const Member*>> holders;
  for (int rank = 0; rank < WorldSize(); ++rank) {
    const Member* member = roster_.Find(rank);
    if (member != nullptr && member->live()) holders.emplace_back(rank, member);
  }
  // The quietest first: the likeliest to be the one that died.
  std::sort(holders.begin(), holders.end(), [](const auto& a, const auto& b) {
    return a.second->last_seen < b.second->last_seen;
  });
  const TimePoint now = Now();
  std::vector<std::string> named;
  for (size_t i = 0; i < holders.size() && i < kShown; ++i) {
    const auto& [rank, member] = holders[i];
    named.push_back(absl::StrCat("rank ", rank, " (worker '", member->worker_id,
                                 "' at ", member->address, ") last heard ",
                                 ToMillis(now - member->last_seen), " ms ago"));
  }
  if (holders.size() > kShown) named.push_back("...");
  return absl::StrCat("held by ", absl::StrJoin(named, ", "));
}

// ---------------------------------------------------------------------------
// Ending parked calls

void CoordinatorCore::WithdrawLocked(WaitId id, RegisterWaiter& waiter,
                                     std::string_view why) {
  timers_.Cancel(waiter.timer);
  Member* member = roster_.Find(waiter.rank);
  if (member == nullptr || member->serial != waiter.serial) return;
  std::erase(member->register_waits, id);
  if (member->state() == MemberState::kJoining &&
      member->register_waits.empty()) {
    spdlog::info("rank {} (worker '{}') withdrawn: {}", waiter.rank,
                 member->worker_id, why);
    roster_.Clear(waiter.rank);
  }
}

void CoordinatorCore::OnDeadline(WaitId id) { EndWait(id, WaitEnd::kDeadline); }

void CoordinatorCore::Cancel(WaitId id) { EndWait(id, WaitEnd::kCancelled); }

void CoordinatorCore::EndWait(WaitId id, WaitEnd end) {
  const bool deadline = end == WaitEnd::kDeadline;
  const absl::Status cancelled = absl::CancelledError("the caller went away");
  std::function<void()> finish;
  Deferred admitted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = register_waiters_.find(id); it != register_waiters_.end()) {
      RegisterWaiter waiter = std::move(it->second);
      register_waiters_.erase(it);
      // Described before the withdrawal takes the rank back.
      const absl::Status why =
          deadline
              ? absl::DeadlineExceededError(absl::StrCat(
                    "register: world incomplete after ", waiter.timeout.count(),
                    " ms: ", DescribeMissingLocked(), "; rank ", waiter.rank,
                    " released"))
              : cancelled;
      WithdrawLocked(
          id, waiter,
          deadline ? std::string(why.message()) : "registration cancelled");
      AdmitParkedLocked(admitted);
      finish = [done = std::move(waiter.done), why] { done(why); };
    } else if (auto parked = FindParked(id);
               parked != parked_registrations_.end()) {
      absl::Status why = cancelled;
      if (deadline) {
        why = absl::ResourceExhaustedError(absl::StrCat(
            "register: world of size ", WorldSize(), " is full, and no member ",
            "was declared gone while worker '", parked->request.worker_id,
            "' waited ", ToMillis(Now() - parked->since), " ms for a rank (",
            DescribeHoldersLocked(),
            "); stop a member first, or start the world larger"));
      } else {
        timers_.Cancel(parked->timer);
      }
      finish = [done = std::move(parked->done), why] { done(why); };
      parked_registrations_.erase(parked);
    } else if (deadline) {
      finish = kv_.Expire(id);
      if (!finish) finish = leases_.Expire(id);
    } else {
      finish = kv_.Cancel(id, cancelled);
      if (!finish) finish = leases_.Cancel(id, cancelled);
    }
  }
  if (finish) finish();
  for (auto& f : admitted) f();
}

void CoordinatorCore::Shutdown() {
  Deferred deferred;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutting_down_ = true;
    const absl::Status status =
        absl::UnavailableError("coordinator is shutting down");
    for (auto& [id, waiter] : register_waiters_) {
      timers_.Cancel(waiter.timer);
      deferred.push_back(
          [done = std::move(waiter.done), status] { done(status); });
    }
    register_waiters_.clear();
    for (ParkedRegistration& parked : parked_registrations_) {
      timers_.Cancel(parked.timer);
      deferred.push_back(
          [done = std::move(parked.done), status] { done(status); });
    }
    parked_registrations_.clear();
    for (int rank = 0; rank < WorldSize(); ++rank) {
      if (Member* member = roster_.Find(rank)) member->register_waits.clear();
    }
    kv_.FailAll(status, deferred);
    leases_.FailAll(status, deferred);
  }
  for (auto& f : deferred) f();
}

}  // namespace ccl::coordinator
