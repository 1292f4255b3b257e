#include "server/core/membership.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/heartbeat_policy.h"
#include "server/core/arrival_check.h"
#include "spdlog/spdlog.h"

namespace ccl {
namespace {

using Clock = Membership::Clock;

// The coordinator takes a reason of at most 4 KiB without control
// characters (coordinator/request_limits.h); a long backend message is cut.
std::string ReformReason(std::string reason) {
  constexpr size_t kMaxReason = 4000;
  for (char& c : reason) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  }
  if (reason.size() > kMaxReason) {
    reason.resize(kMaxReason);
    reason += "...";
  }
  return reason;
}

}  // namespace

// A diagnosis takes kArrivalCheckTime and a few KV round trips.
const std::chrono::milliseconds Membership::kSettleBound =
    kArrivalCheckTime + std::chrono::seconds(1);

Membership::Membership(MemberWorker& worker, MembershipPort& coordinator,
                       MembershipOptions options)
    : worker_(worker),
      coordinator_(coordinator),
      options_(std::move(options)),
      secret_(options_.secret) {}

Membership::~Membership() {
  Stop();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void Membership::SetState(const std::string& state) {
  if (options_.on_state) options_.on_state(state);
}

bool Membership::StopRequested() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_;
}

std::string Membership::Secret() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return secret_;
}

void Membership::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
}

bool Membership::Retryable(absl::StatusCode code, bool first) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    // The rank is still held by a predecessor the coordinator has not yet
    // declared lost (it was killed a moment ago): it will be, within the
    // heartbeat timeout.
    case absl::StatusCode::kAlreadyExists:
      return true;
    // A re-join parks until every rank is back, in attempts of
    // kRejoinAttempt; the first join has its own register timeout.
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
      return !first;
    default:
      return false;
  }
}

absl::Status Membership::Join() {
  SetState("joining");
  const Clock::time_point give_up = Clock::now() + options_.register_timeout;
  while (true) {
    bool registration_failed = false;
    absl::Status joined = Rejoin(/*first=*/true, give_up, registration_failed);
    if (joined.ok() || registration_failed || Clock::now() >= give_up ||
        StopRequested()) {
      return joined;
    }
    // The rendezvous failed (a peer died in it, or the generation moved
    // on). Its keys are spent: joining that generation again could read a
    // peer's address from the failed attempt. Wait for the next generation
    // (the heartbeat asks for one) and register into it.
    spdlog::warn(
        "ccworker: building the world failed: {}; waiting for the next "
        "generation",
        joined.ToString());
    std::unique_lock<std::mutex> lock(mutex_);
    rejoin_ = false;
    cv_.wait_until(lock, give_up, [this] { return stop_ || rejoin_; });
    rejoin_ = false;
  }
}

RegisterAsk Membership::NextRegistration(bool first) const {
  RegisterAsk ask;
  ask.secret = Secret();
  if (first) return ask;
  ask.requested_rank = worker_.rank();
  ask.rejoin = true;
  ask.timeout = kRejoinAttempt;
  ask.known_generation =
      std::max({worker_.known_generation(), registered_generation_.load(),
                heard_generation_.load()});
  if (worker_.CommunicatorHealth().ok()) {
    ask.resume_generation = worker_.generation();
    for (const GroupInfo& group : worker_.Groups()) {
      ask.resume_next_seq[group.name] = group.next_seq;
    }
  }
  return ask;
}

bool Membership::Registered(const Registration& registration, bool first) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    secret_ = registration.secret;
  }
  registered_rank_ = registration.rank;
  registered_generation_ = registration.generation;
  if (!first && registration.generation == worker_.generation() &&
      registration.rank == worker_.rank() &&
      registration.world_size == worker_.world_size() &&
      worker_.CommunicatorHealth().ok()) {
    spdlog::info(
        "ccworker: rank {} is back in generation {}; communicators carry on",
        registration.rank, registration.generation);
    SetState("ready");
    return true;
  }
  spdlog::info("ccworker: rank {} of {} in generation {}{}", registration.rank,
               registration.world_size, registration.generation,
               first ? "" : " (re-forming; tensors kept)");
  if (!first) SetState("re-forming");
  return false;
}

void Membership::FormFailed(int64_t generation, const absl::Status& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_reason_ = std::string(why.message());
  }
  failed_generation_ = generation;
}

void Membership::StartHeartbeats(const Registration& registration) {
  if (registration.heartbeat_interval_ms > 0) {
    heartbeat_interval_ = std::chrono::milliseconds(
        std::max<int64_t>(50, registration.heartbeat_interval_ms));
  }
  // From the first registration on: building the communicators may take
  // long, and a silent member would be declared lost meanwhile. The first
  // beat is staggered by rank: every member joins at once.
  const std::chrono::milliseconds first_beat = coordinator::HeartbeatPhase(
      heartbeat_interval_, registration.rank, registration.world_size);
  heartbeat_thread_ =
      std::thread([this, first_beat] { HeartbeatLoop(first_beat); });
}

absl::Status Membership::Rejoin(bool first, Clock::time_point give_up,
                                bool& registration_failed) {
  const RegisterAsk ask = NextRegistration(first);
  std::chrono::milliseconds backoff(100);
  absl::StatusOr<Registration> registered;
  int attempts = 0;
  while (true) {
    if (StopRequested()) {
      registration_failed = true;
      return absl::CancelledError("the worker is stopping");
    }
    registered = coordinator_.Register(ask);
    if (registered.ok()) break;
    const absl::Status& error = registered.status();
    if (!Retryable(error.code(), first) || Clock::now() + backoff > give_up) {
      registration_failed = true;
      return error;
    }
    if (attempts++ % 10 == 0) {
      spdlog::warn("ccworker: register with {}: {}; retrying",
                   coordinator_.registrar_name(), error.ToString());
    }
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, backoff, [this] { return stop_; });
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  const bool carry_on = Registered(*registered, first);
  if (!heartbeat_thread_.joinable()) StartHeartbeats(*registered);
  if (carry_on) return absl::OkStatus();
  if (absl::Status formed = worker_.FormWorld(*registered); !formed.ok()) {
    FormFailed(registered->generation, formed);
    return formed;
  }
  SetState("ready");
  if (!first) {
    std::printf("ccworker rank %d of %d ready (generation %lld, backend %s)\n",
                registered->rank, registered->world_size,
                static_cast<long long>(registered->generation),
                worker_.backend().c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

HeartbeatRequest Membership::NextBeat(bool report_broken) {
  HeartbeatRequest beat;
  beat.rank = registered_rank_;
  beat.generation = registered_generation_;
  beat.tensor_count = worker_.TensorCount();
  beat.tensor_bytes = worker_.BytesInUse();
  last_tensor_count_ = beat.tensor_count;
  last_tensor_bytes_ = beat.tensor_bytes;
  beat.secret = Secret();
  // mutex_ is never held while the worker is asked: an executor thread
  // that holds the worker's locks may be calling Seal.
  if (failed_generation_ == beat.generation) {
    std::lock_guard<std::mutex> lock(mutex_);
    beat.reform_reason = ReformReason(
        absl::StrCat("building the communicators of generation ",
                     beat.generation, " failed: ", failed_reason_));
  } else if (worker_.generation() == beat.generation) {
    if (absl::Status health = worker_.CommunicatorHealth();
        report_broken && !health.ok()) {
      beat.reform_reason = ReformReason(std::string(health.message()));
    }
    // How far each group got, for a peer's arrival diagnosis; a group this
    // rank is not a member of is left out. Should the worker move to the
    // next generation meanwhile, the coordinator drops the whole beat (it
    // is stamped with this one).
    for (const GroupInfo& group : worker_.Groups()) {
      if (group.group_rank >= 0) {
        beat.finished_below[group.name] = group.finished_below;
      }
    }
  }
  return beat;
}

Membership::Beat Membership::Heard(
    const HeartbeatRequest& beat,
    const absl::StatusOr<int64_t>& coordinator_generation) {
  if (coordinator_generation.ok()) {
    if (options_.on_heartbeat) options_.on_heartbeat();
    heard_generation_ =
        std::max(heard_generation_.load(), *coordinator_generation);
    return *coordinator_generation == beat.generation ? Beat::kOk
                                                      : Beat::kRejoin;
  }
  const absl::Status& error = coordinator_generation.status();
  switch (error.code()) {
    case absl::StatusCode::kFailedPrecondition:  // generation over, or lost
    case absl::StatusCode::kNotFound:            // coordinator restarted
      spdlog::info("ccworker: heartbeat: {}; re-joining",
                   std::string(error.message()));
      return Beat::kRejoin;
    case absl::StatusCode::kPermissionDenied:
      // Another process holds this worker's id with a secret this one does
      // not have (it registered first after the coordinator restarted):
      // nothing this worker can fix; an operator must look.
      spdlog::error("ccworker: heartbeat refused: {}",
                    std::string(error.message()));
      return Beat::kUnreachable;
    default:
      return Beat::kUnreachable;
  }
}

std::optional<HeartbeatRequest> Membership::SealBeat(
    int64_t generation, const absl::Status& cause) {
  // An executor of a generation this worker has left has nothing to end.
  if (generation != registered_generation_ ||
      sealed_generation_.exchange(generation) == generation) {
    return std::nullopt;
  }
  HeartbeatRequest beat;
  beat.rank = registered_rank_;
  beat.generation = generation;
  beat.tensor_count = last_tensor_count_;
  beat.tensor_bytes = last_tensor_bytes_;
  beat.secret = Secret();
  beat.seal_reason = ReformReason(std::string(cause.message()));
  return beat;
}

void Membership::Seal(int64_t generation, const absl::Status& cause) {
  const std::optional<HeartbeatRequest> beat = SealBeat(generation, cause);
  if (!beat) return;
  const auto started = Clock::now();
  absl::StatusOr<int64_t> reply = coordinator_.Heartbeat(*beat, kSealTimeout);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      Clock::now() - started);
  if (reply.ok()) {
    spdlog::warn(
        "ccworker: a communicator of generation {} broke ({}); the "
        "coordinator takes no new ops in it ({} ms)",
        generation, std::string(cause.message()), took.count());
  } else {
    // The heartbeat thread asks for the re-form all the same; until the
    // coordinator hears of it, ops sent meanwhile fail as the one that
    // found the break did.
    spdlog::warn(
        "ccworker: a communicator of generation {} broke ({}); telling the "
        "coordinator failed after {} ms: {}",
        generation, std::string(cause.message()), took.count(),
        reply.status().ToString());
  }
}

Membership::BeatPlan Membership::PlanBeat(Clock::time_point now) {
  const int64_t generation = registered_generation_;
  const bool comm_broken =
      worker_.generation() == generation && !worker_.CommunicatorHealth().ok();
  const bool broken = failed_generation_ == generation || comm_broken;
  // The ops that failed with the communicator are diagnosed first: each
  // rank's arrival check reads the KV of this generation, which a re-form
  // would end under it (and then a rank still in the op was named as one
  // that never reached it). Bounded, should a check hang.
  bool hold = false;
  if (comm_broken && reported_broken_ != generation) {
    if (settling_generation_ != generation) {
      settling_generation_ = generation;
      settling_since_ = now;
    }
    hold = now - settling_since_ < kSettleBound && worker_.SettlingAfterBreak();
  }
  // A break not yet reported goes at once rather than at the next beat:
  // the sooner the coordinator grants a new generation, the shorter the
  // window in which ops fail.
  const bool report_now = broken && !hold && reported_broken_ != generation;
  if (now < next_beat_ && !report_now) return {};
  if (broken && !hold) reported_broken_ = generation;
  next_beat_ = now + heartbeat_interval_;
  return {.beat = true, .report_broken = !hold};
}

void Membership::HeartbeatLoop(std::chrono::milliseconds first_beat) {
  bool unreachable = false;
  next_beat_ = Clock::now() + first_beat;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto wake = std::min(next_beat_, Clock::now() + kHealthPoll);
      if (cv_.wait_until(lock, wake, [this] { return stop_; })) return;
    }
    const BeatPlan plan = PlanBeat(Clock::now());
    if (!plan.beat) continue;
    const HeartbeatRequest ask = NextBeat(plan.report_broken);
    const Beat beat = Heard(ask, coordinator_.Heartbeat(ask, std::nullopt));
    if (beat == Beat::kUnreachable && !unreachable) {
      // Communicators do not need the coordinator; keep serving and keep
      // trying, and re-join once it answers again.
      spdlog::warn(
          "ccworker: coordinator {} unreachable; still serving, retrying "
          "every heartbeat",
          options_.coordinator);
    }
    unreachable = beat == Beat::kUnreachable;
    if (beat == Beat::kRejoin) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        rejoin_ = true;
      }
      cv_.notify_all();
    }
  }
}

void Membership::Run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stop_ || rejoin_; });
      if (stop_) break;
      rejoin_ = false;
    }
    bool registration_failed = false;
    absl::Status joined =
        Rejoin(/*first=*/false, Clock::time_point::max(), registration_failed);
    if (!joined.ok() && !StopRequested()) {
      std::unique_lock<std::mutex> lock(mutex_);
      if (registration_failed) {
        spdlog::warn("ccworker: re-joining the world failed: {}; trying again",
                     joined.ToString());
        cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; });
        rejoin_ = true;
      } else {
        // As in Join: that generation's rendezvous is spent; the heartbeat
        // asks for the next one and flags the re-join when it comes.
        spdlog::warn(
            "ccworker: building the world failed: {}; waiting for the next "
            "generation",
            joined.ToString());
        rejoin_ = false;
      }
    }
  }
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

absl::Status Membership::Leave() {
  return coordinator_.Deregister(registered_rank_, registered_generation_,
                                 Secret());
}

}  // namespace ccl
