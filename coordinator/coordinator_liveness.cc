// CoordinatorCore's heartbeats and liveness: how often members beat (the
// policy is heartbeat_policy.h's), what a beat updates, and the sweep that
// declares silent members lost.
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/elapsed.h"
#include "common/world_keys.h"
#include "coordinator/coordinator_core.h"
#include "spdlog/spdlog.h"

namespace ccl::coordinator {

HeartbeatTiming CoordinatorCore::Timing() const {
  return AdaptHeartbeat(options_.heartbeat_interval, options_.heartbeat_timeout,
                        options_.max_heartbeat_rate, WorldSize());
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

absl::StatusOr<HeartbeatResult> CoordinatorCore::Heartbeat(
    const HeartbeatRequest& request) {
  Deferred deferred;
  absl::StatusOr<HeartbeatResult> result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    result = HeartbeatLocked(request, deferred);
  }
  for (auto& f : deferred) f();
  return result;
}

absl::StatusOr<HeartbeatResult> CoordinatorCore::HeartbeatLocked(
    const HeartbeatRequest& request, Deferred& deferred) {
  Member* member = roster_.Find(request.rank);
  if (member == nullptr || member->worker_id != request.worker_id) {
    return absl::NotFoundError(absl::StrCat(
        "heartbeat: rank ", request.rank, " is not held by worker '",
        request.worker_id, "'; register first"));
  }
  // A forged beat could keep a dead worker's rank or force a new generation.
  if (absl::Status s =
          CheckSecret(*member, request.rank, request.secret, "heartbeat");
      !s.ok()) {
    return s;
  }
  if (!member->live()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "heartbeat: rank ", request.rank, " is ",
        absl::AsciiStrToUpper(std::string(MemberStateName(member->state()))),
        " in generation ", generation_, "; re-register"));
  }
  // Even a stale heartbeat proves the process is alive.
  member->last_seen = Now();
  member->tensor_count = request.tensor_count;
  member->tensor_bytes = request.tensor_bytes;
  if (request.generation != generation_) {
    return absl::FailedPreconditionError(
        absl::StrCat("generation ", request.generation, " is over; current is ",
                     generation_, "; re-register"));
  }
  PublishProgressLocked(*member, request, deferred);
  if (!request.seal_reason.empty())
    SealLocked(request.rank, request.seal_reason);
  if (!request.reform_reason.empty()) {
    SealLocked(request.rank, request.reform_reason);
  }
  // Only a whole world re-forms at once; a degraded one re-forms when the
  // missing rank comes back (Register does that).
  if (!request.reform_reason.empty() &&
      StateLocked() == WorldState::kComplete && !reform_requested_at_) {
    reform_requested_at_ = member->last_seen;
    reform_reason_ = request.reform_reason;
    reform_rank_ = request.rank;
    spdlog::info(
        "generation {}: rank {} asks to re-form the world ({}); starting "
        "once every rank has been heard from",
        generation_, request.rank, request.reform_reason);
  }
  MaybeReformLocked(deferred);
  return HeartbeatResult{generation_, StateLocked()};
}

void CoordinatorCore::SealLocked(int rank, const std::string& reason) {
  if (!sealed_reason_.empty()) return;
  sealed_reason_ =
      absl::StrCat("rank ", rank, "'s communicator broke: ", reason);
  roster_.Touch();  // the world's snapshot says so now
  spdlog::warn(
      "generation {}: {}; no new ops in it, the next generation follows",
      generation_, sealed_reason_);
}

void CoordinatorCore::PublishProgressLocked(Roster::Member& member,
                                            const HeartbeatRequest& request,
                                            Deferred& deferred) {
  if (member.progress_generation != generation_) {
    member.progress_generation = generation_;
    member.published_progress.clear();
  }
  for (const auto& [group, next] : request.finished_below) {
    auto [it, fresh] = member.published_progress.try_emplace(group, next);
    if (!fresh && it->second == next) continue;
    it->second = next;
    kv_.Set(generation_, ProgressKey(group, request.rank), absl::StrCat(next),
            deferred);
  }
}

void CoordinatorCore::MaybeReformLocked(Deferred& deferred) {
  if (!reform_requested_at_) return;
  if (StateLocked() != WorldState::kComplete) {
    // A member was lost meanwhile: the world re-forms when it, or a
    // replacement, registers.
    reform_requested_at_.reset();
    return;
  }
  for (int rank = 0; rank < WorldSize(); ++rank) {
    if (roster_.Find(rank)->last_seen < *reform_requested_at_) return;
  }
  const int asked = reform_rank_;
  const std::string reason = reform_reason_;
  StartGenerationLocked(generation_ + 1, deferred);
  spdlog::warn(
      "generation {}: rank {} asked to re-form the world ({}); every rank "
      "re-registers into it",
      generation_, asked, reason);
}

void CoordinatorCore::SweepLocked(Deferred& deferred) {
  if (roster_.ready() == 0) return;
  const TimePoint now = Now();
  const std::chrono::milliseconds timeout = Timing().timeout;
  bool lost = false;
  for (int rank = 0; rank < WorldSize(); ++rank) {
    const Member* member = roster_.Find(rank);
    if (member == nullptr || member->state() != MemberState::kReady) continue;
    const auto silent = now - member->last_seen;
    if (silent <= timeout) continue;
    roster_.SetState(rank, MemberState::kLost);
    lost = true;
    spdlog::warn(
        "rank {} (worker '{}', {}) lost: no heartbeat for {} ms; generation "
        "{} degraded",
        rank, member->worker_id, member->address, ToMillis(silent),
        generation_);
    kv_.AbortWaits(generation_,
                   absl::UnavailableError(absl::StrCat(
                       "rank ", rank, " was lost (no heartbeat for ",
                       ToMillis(silent), " ms); generation ", generation_,
                       " re-forms when it or a replacement registers")),
                   deferred);
  }
  if (lost) {
    ShrinkLocked(deferred);
    AdmitParkedLocked(deferred);
  }
  MaybeReformLocked(deferred);
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

CoordinatorStats CoordinatorCore::Stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  CoordinatorStats stats;
  stats.world_size = WorldSize();
  stats.generation = generation_;
  stats.live_members = roster_.live();
  stats.parked_registrations = static_cast<int64_t>(register_waiters_.size());
  stats.kv = kv_.Stats();
  return stats;
}

}  // namespace ccl::coordinator
