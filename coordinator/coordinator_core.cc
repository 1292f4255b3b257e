#include "coordinator/coordinator_core.h"

#include <algorithm>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace ccl::coordinator {
namespace {

// A world this large is a typo, and a slot vector of that size is memory.
constexpr int kMaxWorldSize = 1 << 20;
constexpr int64_t kMaxSequenceCount = 1000000;
constexpr size_t kMaxUniqueIdBytes = 4096;

std::string GroupName(const std::string& group) {
  return group.empty() ? std::string("world") : group;
}

int64_t ToMillis(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace

std::string_view MemberStateName(MemberState state) {
  switch (state) {
    case MemberState::kJoining:
      return "JOINING";
    case MemberState::kReady:
      return "READY";
    case MemberState::kLost:
      return "LOST";
    case MemberState::kLeft:
      return "LEFT";
  }
  return "UNKNOWN";
}

std::string_view WorldStateName(WorldState state) {
  switch (state) {
    case WorldState::kForming:
      return "FORMING";
    case WorldState::kComplete:
      return "COMPLETE";
    case WorldState::kDegraded:
      return "DEGRADED";
  }
  return "UNKNOWN";
}

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
    : options_(std::move(options)), slots_(options_.world_size) {}

CoordinatorCore::~CoordinatorCore() { Shutdown(); }

CoordinatorCore::TimePoint CoordinatorCore::Now() const {
  return options_.clock();
}

std::chrono::milliseconds CoordinatorCore::WaitTimeout(
    std::chrono::milliseconds requested) {
  return requested.count() == 0 ? options_.default_wait_timeout : requested;
}

CoordinatorCore::WaitId CoordinatorCore::NewWaitId() {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_wait_id_++;
}

void CoordinatorCore::ScheduleSweep() {
  if (options_.sweep_period.count() == 0) return;
  timers_.ScheduleAfter(options_.sweep_period, [this] {
    SweepLiveness();
    bool stop;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop = shutting_down_;
    }
    if (!stop) ScheduleSweep();
  });
}

// ---------------------------------------------------------------------------
// Membership

bool CoordinatorCore::IsLive(const std::optional<Member>& slot) const {
  return slot.has_value() && (slot->state == MemberState::kJoining ||
                              slot->state == MemberState::kReady);
}

bool CoordinatorCore::IsComplete() const {
  return std::all_of(slots_.begin(), slots_.end(),
                     [this](const auto& slot) { return IsLive(slot); });
}

WorldState CoordinatorCore::StateLocked() const {
  bool all_ready = std::all_of(slots_.begin(), slots_.end(), [](auto& s) {
    return s.has_value() && s->state == MemberState::kReady;
  });
  if (all_ready) return WorldState::kComplete;
  // Once a world has formed, anything short of it is a loss, not progress.
  return generation_ == 0 ? WorldState::kForming : WorldState::kDegraded;
}

WorldInfo CoordinatorCore::SnapshotLocked() const {
  WorldInfo world;
  world.generation = generation_;
  world.world_size = options_.world_size;
  world.state = StateLocked();
  world.heartbeat_interval_ms = options_.heartbeat_interval.count();
  world.heartbeat_timeout_ms = options_.heartbeat_timeout.count();
  TimePoint now = Now();
  for (int rank = 0; rank < options_.world_size; ++rank) {
    const auto& slot = slots_[rank];
    if (!slot.has_value()) continue;
    MemberInfo& m = world.members.emplace_back();
    m.rank = rank;
    m.address = slot->address;
    m.host = slot->host;
    m.device = slot->device;
    m.state = slot->state;
    m.last_seen_age_ms = std::max<int64_t>(0, ToMillis(now - slot->last_seen));
    m.worker_id = slot->worker_id;
    m.tensor_count = slot->tensor_count;
    m.tensor_bytes = slot->tensor_bytes;
  }
  return world;
}

std::string CoordinatorCore::DescribeMissingLocked() const {
  std::vector<int> missing;
  for (int rank = 0; rank < options_.world_size; ++rank) {
    if (!IsLive(slots_[rank])) missing.push_back(rank);
  }
  std::string out = absl::StrCat(options_.world_size - missing.size(), " of ",
                                 options_.world_size, " ranks registered");
  if (!missing.empty()) {
    constexpr size_t kShown = 16;
    std::vector<int> shown(missing.begin(),
                           missing.begin() + std::min(kShown, missing.size()));
    absl::StrAppend(&out, "; missing ranks ", absl::StrJoin(shown, ", "));
    if (missing.size() > kShown) absl::StrAppend(&out, ", ...");
  }
  return out;
}

void CoordinatorCore::ClearSlotLocked(int rank) {
  auto& slot = slots_[rank];
  if (!slot.has_value()) return;
  auto it = rank_of_worker_.find(slot->worker_id);
  if (it != rank_of_worker_.end() && it->second == rank) {
    rank_of_worker_.erase(it);
  }
  slot.reset();
}

void CoordinatorCore::FailRegisterWaitersLocked(int rank, uint64_t serial,
                                                const absl::Status& status,
                                                Deferred& deferred) {
  for (auto it = register_waiters_.begin(); it != register_waiters_.end();) {
    if (it->second.rank == rank && it->second.serial == serial) {
      timers_.Cancel(it->second.timer);
      deferred.push_back(
          [done = std::move(it->second.done), status] { done(status); });
      it = register_waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void CoordinatorCore::FormWorldLocked(Deferred& deferred) {
  // A coordinator that restarted (generation 0) while its workers kept
  // running: if every rank resumes the same generation, adopt it, with the
  // groups' sequence counters where the workers stopped, so running
  // communicators are not disturbed. Anything else is a new generation above
  // every one seen, so no worker mistakes it for the one it runs.
  int64_t resumed = 0;
  bool resume = generation_ == 0;
  int64_t highest = generation_;
  for (const auto& slot : slots_) {
    const int64_t g = slot->resume_generation;
    highest = std::max(highest, g);
    if (g <= 0 || (resumed != 0 && g != resumed)) resume = false;
    resumed = g;
  }
  if (resume && resumed > 0) {
    generation_ = resumed;
    for (const auto& slot : slots_) {
      for (const auto& [group, next] : slot->resume_next_seq) {
        int64_t& counter = sequences_[Scope(generation_, GroupName(group))];
        counter = std::max(counter, next);
      }
    }
    spdlog::info("every rank resumed generation {}: adopted it", generation_);
  } else {
    generation_ = highest + 1;
  }
  TimePoint now = Now();
  // Everyone was just heard from (they are waiting in Register, or have
  // been heartbeating); a member that waited long must not expire at once.
  for (auto& slot : slots_) {
    slot->state = MemberState::kReady;
    slot->last_seen = now;
    slot->resume_generation = 0;
    slot->resume_next_seq.clear();
  }
  auto world = std::make_shared<const WorldInfo>(SnapshotLocked());
  spdlog::info("world formed: generation {}, {} ranks", generation_,
               options_.world_size);
  for (auto& [id, waiter] : register_waiters_) {
    timers_.Cancel(waiter.timer);
    RegisterResult result{waiter.rank, generation_, world};
    deferred.push_back(
        [done = std::move(waiter.done), result = std::move(result)]() mutable {
          done(std::move(result));
        });
  }
  register_waiters_.clear();
}

void CoordinatorCore::Register(WaitId id, RegisterRequest request,
                               Callback<RegisterResult> done) {
  auto fail = [&done](absl::Status status) { done(std::move(status)); };
  if (request.address.empty()) {
    return fail(absl::InvalidArgumentError(
        "register: address is empty; pass the worker's host:port"));
  }
  if (request.requested_rank.has_value()) {
    int r = *request.requested_rank;
    if (r < 0) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("register: requested rank ", r, " is negative")));
    }
    if (r >= options_.world_size) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "register: requested rank ", r, " is out of range for world size ",
          options_.world_size)));
    }
  }
  if (request.resume_generation < 0) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("register: resume generation ", request.resume_generation,
                     " is negative")));
  }
  for (const auto& [group, next] : request.resume_next_seq) {
    if (next < 0) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "register: next seq ", next, " of group '", group, "' is negative")));
    }
  }
  if (request.timeout.count() < 0) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "register: timeout ", request.timeout.count(), " ms is negative")));
  }
  std::chrono::milliseconds timeout = WaitTimeout(request.timeout);

  Deferred deferred;
  absl::Status error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutting_down_) {
      error = absl::UnavailableError("coordinator is shutting down");
    } else {
      int rank = -1;
      auto known = request.worker_id.empty()
                       ? rank_of_worker_.end()
                       : rank_of_worker_.find(request.worker_id);
      if (known != rank_of_worker_.end()) {
        rank = known->second;
        if (request.requested_rank.has_value() &&
            *request.requested_rank != rank) {
          error = absl::FailedPreconditionError(absl::StrCat(
              "register: worker '", request.worker_id, "' already holds rank ",
              rank, "; it cannot also take rank ", *request.requested_rank,
              " (deregister first)"));
        }
      } else if (request.requested_rank.has_value()) {
        rank = *request.requested_rank;
        if (IsLive(slots_[rank])) {
          error = absl::AlreadyExistsError(absl::StrCat(
              "register: rank ", rank, " is already held by worker '",
              slots_[rank]->worker_id, "' at ", slots_[rank]->address));
        }
      } else {
        for (int r = 0; r < options_.world_size; ++r) {
          if (!IsLive(slots_[r])) {
            rank = r;
            break;
          }
        }
        if (rank < 0) {
          error = absl::ResourceExhaustedError(absl::StrCat(
              "register: world of size ", options_.world_size, " is full"));
        }
      }

      if (error.ok()) {
        auto& slot = slots_[rank];
        bool reconnect = slot.has_value() && !request.worker_id.empty() &&
                         slot->worker_id == request.worker_id;
        if (!reconnect) {
          ClearSlotLocked(rank);
          slot.emplace();
          slot->serial = next_serial_++;
          slot->worker_id = request.worker_id;
          if (!request.worker_id.empty()) {
            rank_of_worker_[request.worker_id] = rank;
          }
        }
        slot->address = request.address;
        slot->host = request.host;
        slot->device = request.device;
        slot->last_seen = Now();
        slot->resume_generation = request.resume_generation;
        slot->resume_next_seq = std::move(request.resume_next_seq);
        if (slot->state == MemberState::kReady) {
          // A reconnect into a formed world: nothing to wait for.
          spdlog::info("rank {} reconnected (worker '{}', {})", rank,
                       request.worker_id, request.address);
          RegisterResult result{
              rank, generation_,
              std::make_shared<const WorldInfo>(SnapshotLocked())};
          deferred.push_back([&done, result = std::move(result)]() mutable {
            done(std::move(result));
          });
        } else {
          // A lost or departed member coming back joins anew.
          slot->state = MemberState::kJoining;
          spdlog::info("rank {} registered (worker '{}', {}, {}); {}", rank,
                       request.worker_id, request.address,
                       DeviceName(request.device), DescribeMissingLocked());
          RegisterWaiter& waiter = register_waiters_[id];
          waiter.rank = rank;
          waiter.serial = slot->serial;
          waiter.done = std::move(done);
          waiter.timeout = timeout;
          if (IsComplete()) {
            FormWorldLocked(deferred);
          } else {
            waiter.timer =
                timers_.ScheduleAfter(timeout, [this, id] { OnDeadline(id); });
          }
        }
      }
    }
  }
  if (!error.ok()) return fail(std::move(error));
  for (auto& f : deferred) f();
}

absl::StatusOr<HeartbeatResult> CoordinatorCore::Heartbeat(
    const HeartbeatRequest& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (request.rank < 0 || request.rank >= options_.world_size ||
      !slots_[request.rank].has_value() ||
      slots_[request.rank]->worker_id != request.worker_id) {
    return absl::NotFoundError(absl::StrCat(
        "heartbeat: rank ", request.rank, " is not held by worker '",
        request.worker_id, "'; register first"));
  }
  Member& member = *slots_[request.rank];
  if (member.state == MemberState::kLost ||
      member.state == MemberState::kLeft) {
    return absl::FailedPreconditionError(
        absl::StrCat("heartbeat: rank ", request.rank, " is ",
                     std::string(MemberStateName(member.state)),
                     " in generation ", generation_, "; re-register"));
  }
  // Even a stale heartbeat proves the process is alive.
  member.last_seen = Now();
  member.tensor_count = request.tensor_count;
  member.tensor_bytes = request.tensor_bytes;
  if (request.generation != generation_) {
    return absl::FailedPreconditionError(
        absl::StrCat("generation ", request.generation, " is over; current is ",
                     generation_, "; re-register"));
  }
  if (!request.reform_reason.empty()) {
    // Only a whole world re-forms at once; a degraded one re-forms when the
    // missing rank comes back (Register does that).
    if (StateLocked() == WorldState::kComplete) {
      ++generation_;
      spdlog::warn(
          "generation {}: rank {} asked to re-form the world ({}); every rank "
          "re-registers into it",
          generation_, request.rank, request.reform_reason);
    }
  }
  return HeartbeatResult{generation_, StateLocked()};
}

absl::StatusOr<int64_t> CoordinatorCore::Deregister(
    int rank, int64_t generation, const std::string& worker_id) {
  Deferred deferred;
  int64_t current;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    current = generation_;
    if (rank < 0 || rank >= options_.world_size || !slots_[rank].has_value() ||
        slots_[rank]->state == MemberState::kLeft ||
        slots_[rank]->worker_id != worker_id) {
      return absl::NotFoundError(absl::StrCat("deregister: rank ", rank,
                                              " is not held by worker '",
                                              worker_id, "'"));
    }
    if (generation > generation_) {
      return absl::InvalidArgumentError(
          absl::StrCat("deregister: unknown generation ", generation,
                       " (current is ", generation_, ")"));
    }
    Member& member = *slots_[rank];
    if (member.state == MemberState::kJoining) {
      // Never part of a formed world: just withdraw.
      FailRegisterWaitersLocked(
          rank, member.serial,
          absl::AbortedError(absl::StrCat("rank ", rank, " deregistered")),
          deferred);
      ClearSlotLocked(rank);
    } else {
      member.state = MemberState::kLeft;
    }
    spdlog::info("rank {} left (worker '{}')", rank, worker_id);
  }
  for (auto& f : deferred) f();
  return current;
}

void CoordinatorCore::SweepLocked(Deferred& deferred) {
  TimePoint now = Now();
  for (int rank = 0; rank < options_.world_size; ++rank) {
    auto& slot = slots_[rank];
    if (!slot.has_value() || slot->state != MemberState::kReady) continue;
    auto silent = now - slot->last_seen;
    if (silent > options_.heartbeat_timeout) {
      slot->state = MemberState::kLost;
      spdlog::warn(
          "rank {} (worker '{}', {}) lost: no heartbeat for {} ms; generation "
          "{} degraded",
          rank, slot->worker_id, slot->address, ToMillis(silent), generation_);
    }
  }
}

void CoordinatorCore::SweepLiveness() {
  Deferred deferred;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    SweepLocked(deferred);
  }
  for (auto& f : deferred) f();
}

WorldInfo CoordinatorCore::GetWorld() {
  Deferred deferred;
  WorldInfo world;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    SweepLocked(deferred);
    world = SnapshotLocked();
  }
  for (auto& f : deferred) f();
  return world;
}

// ---------------------------------------------------------------------------
// KV store

absl::StatusOr<int64_t> CoordinatorCore::ResolveGeneration(
    int64_t generation) const {
  if (generation < 0 || generation > generation_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown generation ", generation, " (current is ", generation_, ")"));
  }
  return generation == 0 ? generation_ : generation;
}

absl::Status CoordinatorCore::ValidateValue(const std::string& value) const {
  if (value.size() > options_.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of ", value.size(), " bytes exceeds the limit of ",
                     options_.max_value_bytes, " bytes (--max-value-bytes)"));
  }
  return absl::OkStatus();
}

void CoordinatorCore::NotifyKeyLocked(int64_t generation,
                                      const std::string& key,
                                      Deferred& deferred) {
  auto it = kv_waiters_by_key_.find(Scope(generation, key));
  if (it == kv_waiters_by_key_.end()) return;
  for (WaitId id : it->second) {
    auto w = kv_waiters_.find(id);
    if (w == kv_waiters_.end()) continue;  // Finished some other way.
    w->second.missing.erase(key);
    if (!w->second.missing.empty()) continue;
    timers_.Cancel(w->second.timer);
    deferred.push_back(
        [done = std::move(w->second.done), generation] { done(generation); });
    kv_waiters_.erase(w);
  }
  kv_waiters_by_key_.erase(it);
}

void CoordinatorCore::DropKvWaiterLocked(WaitId id, const KvWaiter& waiter) {
  for (const auto& key : waiter.missing) {
    auto it = kv_waiters_by_key_.find(Scope(waiter.generation, key));
    if (it == kv_waiters_by_key_.end()) continue;
    std::erase(it->second, id);
    if (it->second.empty()) kv_waiters_by_key_.erase(it);
  }
}

absl::StatusOr<int64_t> CoordinatorCore::KvSet(int64_t generation,
                                               const std::string& key,
                                               std::string value) {
  if (key.empty()) return absl::InvalidArgumentError("kv set: key is empty");
  if (auto s = ValidateValue(value); !s.ok()) return s;
  Deferred deferred;
  int64_t gen;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto resolved = ResolveGeneration(generation);
    if (!resolved.ok()) return resolved.status();
    gen = *resolved;
    kv_[Scope(gen, key)] = std::move(value);
    NotifyKeyLocked(gen, key, deferred);
  }
  for (auto& f : deferred) f();
  return gen;
}

absl::StatusOr<std::pair<int64_t, std::string>> CoordinatorCore::KvGet(
    int64_t generation, const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("kv get: key is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  auto gen = ResolveGeneration(generation);
  if (!gen.ok()) return gen.status();
  auto it = kv_.find(Scope(*gen, key));
  if (it == kv_.end()) {
    return absl::NotFoundError(
        absl::StrCat("kv get: key '", key, "' not found in generation ", *gen));
  }
  return std::make_pair(*gen, it->second);
}

void CoordinatorCore::KvWait(WaitId id, int64_t generation,
                             std::vector<std::string> keys,
                             std::chrono::milliseconds timeout,
                             Callback<int64_t> done) {
  for (const auto& key : keys) {
    if (key.empty()) {
      return done(absl::InvalidArgumentError("kv wait: a key is empty"));
    }
  }
  if (timeout.count() < 0) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("kv wait: timeout ", timeout.count(), " ms is negative")));
  }
  timeout = WaitTimeout(timeout);
  absl::StatusOr<int64_t> immediate;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    immediate = ResolveGeneration(generation);
    if (immediate.ok() && shutting_down_) {
      immediate = absl::UnavailableError("coordinator is shutting down");
    }
    if (immediate.ok()) {
      int64_t gen = *immediate;
      std::set<std::string> missing;
      for (auto& key : keys) {
        if (!kv_.contains(Scope(gen, key))) missing.insert(std::move(key));
      }
      if (!missing.empty()) {
        for (const auto& key : missing) {
          kv_waiters_by_key_[Scope(gen, key)].push_back(id);
        }
        KvWaiter& waiter = kv_waiters_[id];
        waiter.generation = gen;
        waiter.missing = std::move(missing);
        waiter.done = std::move(done);
        waiter.timeout = timeout;
        waiter.timer =
            timers_.ScheduleAfter(timeout, [this, id] { OnDeadline(id); });
        return;
      }
    }
  }
  done(std::move(immediate));
}

absl::StatusOr<std::pair<int64_t, int64_t>> CoordinatorCore::KvAdd(
    int64_t generation, const std::string& key, int64_t delta) {
  if (key.empty()) return absl::InvalidArgumentError("kv add: key is empty");
  Deferred deferred;
  int64_t gen;
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto resolved = ResolveGeneration(generation);
    if (!resolved.ok()) return resolved.status();
    gen = *resolved;
    auto it = kv_.find(Scope(gen, key));
    if (it != kv_.end() && !absl::SimpleAtoi(it->second, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv add: key '", key, "' holds a value that is not an ",
                       "integer (", it->second.size(), " bytes)"));
    }
    if ((delta > 0 && value > std::numeric_limits<int64_t>::max() - delta) ||
        (delta < 0 && value < std::numeric_limits<int64_t>::min() - delta)) {
      return absl::OutOfRangeError(absl::StrCat("kv add: ", value, " + ", delta,
                                                " overflows a 64-bit integer"));
    }
    value += delta;
    kv_[Scope(gen, key)] = absl::StrCat(value);
    NotifyKeyLocked(gen, key, deferred);
  }
  for (auto& f : deferred) f();
  return std::make_pair(gen, value);
}

absl::StatusOr<CompareSetResult> CoordinatorCore::KvCompareSet(
    int64_t generation, const std::string& key, const std::string& expected,
    std::string desired) {
  if (key.empty()) {
    return absl::InvalidArgumentError("kv compare-set: key is empty");
  }
  if (auto s = ValidateValue(desired); !s.ok()) return s;
  Deferred deferred;
  CompareSetResult result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto resolved = ResolveGeneration(generation);
    if (!resolved.ok()) return resolved.status();
    result.generation = *resolved;
    Scope scope(*resolved, key);
    auto it = kv_.find(scope);
    bool matches = expected.empty() ? it == kv_.end()
                                    : it != kv_.end() && it->second == expected;
    if (matches) {
      result.swapped = true;
      result.value = desired;
      kv_[scope] = std::move(desired);
      NotifyKeyLocked(scope.first, key, deferred);
    } else if (it != kv_.end()) {
      result.value = it->second;
    }
  }
  for (auto& f : deferred) f();
  return result;
}

absl::StatusOr<std::pair<int64_t, bool>> CoordinatorCore::KvDelete(
    int64_t generation, const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("kv delete: key is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  auto gen = ResolveGeneration(generation);
  if (!gen.ok()) return gen.status();
  bool deleted = kv_.erase(Scope(*gen, key)) > 0;
  return std::make_pair(*gen, deleted);
}

// ---------------------------------------------------------------------------
// Sequence numbers and unique ids

absl::StatusOr<std::pair<int64_t, int64_t>> CoordinatorCore::ReserveSequence(
    int64_t generation, const std::string& group, int64_t count) {
  if (count <= 0 || count > kMaxSequenceCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserve sequence: count must be in [1, ",
                     kMaxSequenceCount, "], got ", count));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto gen = ResolveGeneration(generation);
  if (!gen.ok()) return gen.status();
  int64_t& next = sequences_[Scope(*gen, GroupName(group))];
  int64_t first = next;
  next += count;
  return std::make_pair(*gen, first);
}

absl::StatusOr<int64_t> CoordinatorCore::PostUniqueId(int64_t generation,
                                                      const std::string& group,
                                                      std::string unique_id) {
  if (unique_id.empty() || unique_id.size() > kMaxUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("post unique id: the id must be 1 to ", kMaxUniqueIdBytes,
                     " bytes, got ", unique_id.size()));
  }
  Deferred deferred;
  int64_t gen;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto resolved = ResolveGeneration(generation);
    if (!resolved.ok()) return resolved.status();
    gen = *resolved;
    Scope scope(gen, GroupName(group));
    auto [it, inserted] = unique_ids_.emplace(scope, unique_id);
    if (!inserted) {
      if (it->second == unique_id) return gen;  // A retried post.
      return absl::AlreadyExistsError(
          absl::StrCat("post unique id: group '", scope.second,
                       "' of generation ", gen, " already has a different id"));
    }
    for (auto w = unique_id_waiters_.begin(); w != unique_id_waiters_.end();) {
      if (w->second.scope != scope) {
        ++w;
        continue;
      }
      timers_.Cancel(w->second.timer);
      deferred.push_back([done = std::move(w->second.done), gen, unique_id] {
        done(UniqueIdResult{gen, unique_id});
      });
      w = unique_id_waiters_.erase(w);
    }
  }
  for (auto& f : deferred) f();
  return gen;
}

void CoordinatorCore::GetUniqueId(WaitId id, int64_t generation,
                                  const std::string& group,
                                  std::chrono::milliseconds timeout,
                                  Callback<UniqueIdResult> done) {
  if (timeout.count() < 0) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "get unique id: timeout ", timeout.count(), " ms is negative")));
  }
  timeout = WaitTimeout(timeout);
  absl::StatusOr<UniqueIdResult> immediate;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto gen = ResolveGeneration(generation);
    if (!gen.ok()) {
      immediate = gen.status();
    } else {
      Scope scope(*gen, GroupName(group));
      auto it = unique_ids_.find(scope);
      if (it != unique_ids_.end()) {
        immediate = UniqueIdResult{*gen, it->second};
      } else if (shutting_down_) {
        immediate = absl::UnavailableError("coordinator is shutting down");
      } else {
        UniqueIdWaiter& waiter = unique_id_waiters_[id];
        waiter.scope = std::move(scope);
        waiter.done = std::move(done);
        waiter.timer =
            timers_.ScheduleAfter(timeout, [this, id] { OnDeadline(id); });
        return;
      }
    }
  }
  done(std::move(immediate));
}

// ---------------------------------------------------------------------------
// Ending parked calls

void CoordinatorCore::OnDeadline(WaitId id) {
  std::function<void()> finish;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = register_waiters_.find(id); it != register_waiters_.end()) {
      RegisterWaiter waiter = std::move(it->second);
      register_waiters_.erase(it);
      std::string message =
          absl::StrCat("register: world incomplete after ",
                       waiter.timeout.count(), " ms: ", DescribeMissingLocked(),
                       "; rank ", waiter.rank, " released");
      auto& slot = slots_[waiter.rank];
      bool still_pending = std::any_of(
          register_waiters_.begin(), register_waiters_.end(), [&](auto& w) {
            return w.second.rank == waiter.rank &&
                   w.second.serial == waiter.serial;
          });
      // Withdraw, so that a retry (or another worker) can take the rank.
      if (slot.has_value() && slot->serial == waiter.serial &&
          slot->state == MemberState::kJoining && !still_pending) {
        spdlog::info("rank {} (worker '{}') withdrawn: {}", waiter.rank,
                     slot->worker_id, message);
        ClearSlotLocked(waiter.rank);
      }
      finish = [done = std::move(waiter.done), message] {
        done(absl::DeadlineExceededError(message));
      };
    } else if (auto it = kv_waiters_.find(id); it != kv_waiters_.end()) {
      KvWaiter waiter = std::move(it->second);
      kv_waiters_.erase(it);
      DropKvWaiterLocked(id, waiter);
      std::string message =
          absl::StrCat("kv wait: timed out after ", waiter.timeout.count(),
                       " ms in generation ", waiter.generation,
                       "; missing keys: ", absl::StrJoin(waiter.missing, ", "));
      finish = [done = std::move(waiter.done), message] {
        done(absl::DeadlineExceededError(message));
      };
    } else if (auto it = unique_id_waiters_.find(id);
               it != unique_id_waiters_.end()) {
      UniqueIdWaiter waiter = std::move(it->second);
      unique_id_waiters_.erase(it);
      std::string message = absl::StrCat(
          "get unique id: nothing posted for group '", waiter.scope.second,
          "' of generation ", waiter.scope.first, " before the deadline");
      finish = [done = std::move(waiter.done), message] {
        done(absl::DeadlineExceededError(message));
      };
    }
  }
  if (finish) finish();
}

void CoordinatorCore::Cancel(WaitId id) {
  std::function<void()> finish;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    absl::Status cancelled = absl::CancelledError("the caller went away");
    if (auto it = register_waiters_.find(id); it != register_waiters_.end()) {
      RegisterWaiter waiter = std::move(it->second);
      register_waiters_.erase(it);
      timers_.Cancel(waiter.timer);
      auto& slot = slots_[waiter.rank];
      bool still_pending = std::any_of(
          register_waiters_.begin(), register_waiters_.end(), [&](auto& w) {
            return w.second.rank == waiter.rank &&
                   w.second.serial == waiter.serial;
          });
      if (slot.has_value() && slot->serial == waiter.serial &&
          slot->state == MemberState::kJoining && !still_pending) {
        spdlog::info("rank {} (worker '{}') withdrawn: registration cancelled",
                     waiter.rank, slot->worker_id);
        ClearSlotLocked(waiter.rank);
      }
      finish = [done = std::move(waiter.done), cancelled] { done(cancelled); };
    } else if (auto it = kv_waiters_.find(id); it != kv_waiters_.end()) {
      timers_.Cancel(it->second.timer);
      DropKvWaiterLocked(id, it->second);
      finish = [done = std::move(it->second.done), cancelled] {
        done(cancelled);
      };
      kv_waiters_.erase(it);
    } else if (auto it = unique_id_waiters_.find(id);
               it != unique_id_waiters_.end()) {
      timers_.Cancel(it->second.timer);
      finish = [done = std::move(it->second.done), cancelled] {
        done(cancelled);
      };
      unique_id_waiters_.erase(it);
    }
  }
  if (finish) finish();
}

void CoordinatorCore::Shutdown() {
  Deferred deferred;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutting_down_ = true;
    absl::Status status =
        absl::UnavailableError("coordinator is shutting down");
    for (auto& [id, w] : register_waiters_) {
      timers_.Cancel(w.timer);
      deferred.push_back([done = std::move(w.done), status] { done(status); });
    }
    for (auto& [id, w] : kv_waiters_) {
      timers_.Cancel(w.timer);
      deferred.push_back([done = std::move(w.done), status] { done(status); });
    }
    for (auto& [id, w] : unique_id_waiters_) {
      timers_.Cancel(w.timer);
      deferred.push_back([done = std::move(w.done), status] { done(status); });
    }
    register_waiters_.clear();
    kv_waiters_.clear();
    kv_waiters_by_key_.clear();
    unique_id_waiters_.clear();
  }
  for (auto& f : deferred) f();
}

}  // namespace ccl::coordinator
