#include "server/rpc/world_agent.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "coordinator/heartbeat_policy.h"
#include "server/core/arrival_check.h"
#include "spdlog/spdlog.h"

namespace ccl {

decltype(WorkerConfig::on_sequence_gap) SequenceHolderQuestion(
    CoordinatorClient& coordinator, std::chrono::milliseconds gap_timeout) {
  return [&coordinator, gap_timeout](
             int64_t generation, const std::string& group, int64_t seq,
             std::function<void(int64_t, int64_t, absl::Status)> skip) {
    v1::AwaitSequenceHolderRequest request;
    request.set_generation(generation);
    request.set_group(group);
    request.set_seq(seq);
    request.set_timeout_ms(gap_timeout.count());
    return coordinator.AwaitSequenceHolderAsync(
        request, [skip = std::move(skip), group,
                  seq](absl::StatusOr<v1::AwaitSequenceHolderResponse> answer) {
          if (!answer.ok()) {
            // An older coordinator, or one restarting: the gap timeout
            // stays the judge.
            if (!absl::IsCancelled(answer.status())) {
              spdlog::debug("ccworker: who holds seq {} of group {}: {}", seq,
                            group, std::string(answer.status().message()));
            }
            return;
          }
          if (!answer->released()) return;
          spdlog::info("ccworker: skipping {}", answer->reason());
          skip(answer->begin(), answer->end(),
               absl::FailedPreconditionError(
                   absl::StrCat("skipped: ", answer->reason())));
        });
  };
}
namespace {

using Clock = std::chrono::steady_clock;

// A re-join parks in Register until every rank is back; short attempts keep
// SIGTERM responsive while it waits (the coordinator withdraws a timed-out
// registration, and the next attempt takes the rank again).
constexpr std::chrono::milliseconds kRejoinAttempt(5000);
constexpr std::chrono::milliseconds kMaxBackoff(2000);

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

bool Retryable(absl::StatusCode code, bool first) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    // The rank is still held by a predecessor the coordinator has not yet
    // declared lost (it was killed a moment ago): it will be, within the
    // heartbeat timeout.
    case absl::StatusCode::kAlreadyExists:
      return true;
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kCancelled:
      return !first;
    default:
      return false;
  }
}

}  // namespace

WorldAgent::WorldAgent(WorkerCore& core, CoordinatorClient& coordinator,
                       WorldAgentOptions options)
    : core_(core),
      coordinator_(coordinator),
      options_(std::move(options)),
      secret_(options_.registration.worker_secret()) {}

WorldAgent::~WorldAgent() {
  Stop();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void WorldAgent::SetState(const std::string& state) {
  if (options_.on_state) options_.on_state(state);
}

bool WorldAgent::StopRequested() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_;
}

void WorldAgent::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
}

absl::Status WorldAgent::Join() {
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

absl::Status WorldAgent::Rejoin(bool first, Clock::time_point give_up,
                                bool& registration_failed) {
  v1::RegisterRequest request = options_.registration;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    request.set_worker_secret(secret_);
  }
  if (!first) {
    request.set_requested_rank(core_.rank());
    request.set_rejoin(true);
    request.set_timeout_ms(kRejoinAttempt.count());
    // Every generation this worker knows of, formed here or not, so that a
    // restarted coordinator starts above them (RegisterRequest).
    request.set_known_generation(
        std::max({core_.known_generation(), registered_generation_.load(),
                  heard_generation_.load()}));
    if (core_.CommunicatorHealth().ok()) {
      // Offered in case the coordinator restarted; ignored otherwise.
      request.set_resume_generation(core_.generation());
      for (const GroupInfo& group : core_.Groups()) {
        (*request.mutable_resume_next_seq())[group.name] = group.next_seq;
      }
    }
  }
  std::chrono::milliseconds backoff(100);
  absl::StatusOr<v1::RegisterResponse> registered;
  int attempts = 0;
  while (true) {
    if (StopRequested()) {
      registration_failed = true;
      return absl::CancelledError("the worker is stopping");
    }
    registered =
        (options_.registrar != nullptr ? *options_.registrar : coordinator_)
            .Register(request);
    if (registered.ok()) break;
    const absl::Status& error = registered.status();
    if (!Retryable(error.code(), first) || Clock::now() + backoff > give_up) {
      registration_failed = true;
      return error;
    }
    if (attempts++ % 10 == 0) {
      spdlog::warn("ccworker: register with {}: {}; retrying",
                   options_.registrar != nullptr
                       ? options_.coordinator + " through the host agent " +
                             options_.registrar_address
                       : options_.coordinator,
                   error.ToString());
    }
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_for(lock, backoff, [this] { return stop_; });
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
  const int rank = registered->rank();
  const int64_t generation = registered->generation();
  const int world_size = registered->world().world_size();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    secret_ = registered->worker_secret();
  }
  registered_rank_ = rank;
  registered_generation_ = generation;
  if (!heartbeat_thread_.joinable()) {
    if (registered->world().heartbeat_interval_ms() > 0) {
      heartbeat_interval_ = std::chrono::milliseconds(
          std::max<int64_t>(50, registered->world().heartbeat_interval_ms()));
    }
    // From the first registration on: building the communicators may take
    // long, and a silent member would be declared lost meanwhile. The first
    // beat is staggered by rank: every member joins at once.
    const std::chrono::milliseconds first_beat =
        coordinator::HeartbeatPhase(heartbeat_interval_, rank, world_size);
    heartbeat_thread_ =
        std::thread([this, first_beat] { HeartbeatLoop(first_beat); });
  }
  if (!first && generation == core_.generation() && rank == core_.rank() &&
      world_size == core_.world_size() && core_.CommunicatorHealth().ok()) {
    spdlog::info(
        "ccworker: rank {} is back in generation {}; communicators "
        "carry on",
        rank, generation);
    SetState("ready");
    return absl::OkStatus();
  }
  spdlog::info("ccworker: rank {} of {} in generation {}{}", rank, world_size,
               generation, first ? "" : " (re-forming; tensors kept)");
  if (!first) SetState("re-forming");
  // The NCCL ids the registration brought (nccl_ranks_per_root), if any:
  // the rendezvous then reads them from the store without a call.
  std::map<std::string, std::string> known(registered->kv().begin(),
                                           registered->kv().end());
  stores_.push_back(std::make_unique<CoordinatorKvStore>(
      coordinator_, generation, std::move(known)));
  // Where the peers' failure diagnosis can try to reach this worker (a
  // link cut between two workers then shows by name), unless the
  // coordinator already set it. Best effort: a diagnosis without it just
  // names no unreachable peer.
  if (absl::Status s =
          registered->peer_addresses_published()
              ? absl::OkStatus()
              : stores_.back()->Set(PeerAddressKey(rank),
                                    options_.registration.address());
      !s.ok()) {
    spdlog::debug("ccworker: publishing the address for diagnosis: {}",
                  s.ToString());
  }
  ShrinkInfo shrink;
  shrink.from_generation = registered->world().shrunk_from_generation();
  shrink.excluded_ranks.assign(registered->world().excluded_ranks().begin(),
                               registered->world().excluded_ranks().end());
  absl::Status formed =
      core_.FormWorld(rank, world_size, generation, *stores_.back(), shrink);
  if (!formed.ok()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed_reason_ = std::string(formed.message());
    }
    failed_generation_ = generation;
    return formed;
  }
  SetState("ready");
  if (!first) {
    std::printf("ccworker rank %d of %d ready (generation %lld, backend %s)\n",
                rank, world_size, static_cast<long long>(generation),
                core_.backend().c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

WorldAgent::Beat WorldAgent::HeartbeatOnce(bool report_broken) {
  v1::HeartbeatRequest beat;
  beat.set_rank(registered_rank_);
  beat.set_generation(registered_generation_);
  beat.set_worker_id(options_.registration.worker_id());
  beat.set_tensor_count(static_cast<int64_t>(core_.List().size()));
  beat.set_tensor_bytes(core_.BytesInUse());
  last_tensor_count_ = beat.tensor_count();
  last_tensor_bytes_ = beat.tensor_bytes();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    beat.set_worker_secret(secret_);
  }
  if (failed_generation_ == beat.generation()) {
    std::lock_guard<std::mutex> lock(mutex_);
    beat.set_reform_reason(ReformReason(
        absl::StrCat("building the communicators of "
                     "generation ",
                     beat.generation(), " failed: ", failed_reason_)));
  } else if (core_.generation() == beat.generation()) {
    if (absl::Status health = core_.CommunicatorHealth();
        report_broken && !health.ok()) {
      beat.set_reform_reason(ReformReason(std::string(health.message())));
    }
    // How far each group got, for a peer's arrival diagnosis; a group this
    // rank is not a member of is left out. Should the core move to the
    // next generation meanwhile, the coordinator drops the whole beat (it
    // is stamped with this one).
    for (const GroupInfo& group : core_.Groups()) {
      if (group.group_rank >= 0) {
        (*beat.mutable_finished_below())[group.name] = group.finished_below;
      }
    }
  }
  absl::StatusOr<v1::HeartbeatResponse> reply = coordinator_.Heartbeat(beat);
  if (reply.ok()) {
    if (options_.on_heartbeat) options_.on_heartbeat();
    heard_generation_ = std::max(heard_generation_.load(), reply->generation());
    return reply->generation() == beat.generation() ? Beat::kOk : Beat::kRejoin;
  }
  switch (reply.status().code()) {
    case absl::StatusCode::kFailedPrecondition:  // generation over, or lost
    case absl::StatusCode::kNotFound:            // coordinator restarted
      spdlog::info("ccworker: heartbeat: {}; re-joining",
                   std::string(reply.status().message()));
      return Beat::kRejoin;
    case absl::StatusCode::kPermissionDenied:
      // Another process holds this worker's id with a secret this one does
      // not have (it registered first after the coordinator restarted):
      // nothing this worker can fix; an operator must look.
      spdlog::error("ccworker: heartbeat refused: {}",
                    std::string(reply.status().message()));
      return Beat::kUnreachable;
    default:
      return Beat::kUnreachable;
  }
}

void WorldAgent::Seal(int64_t generation, const absl::Status& cause) {
  // An executor of a generation this worker has left has nothing to end.
  if (generation != registered_generation_ ||
      sealed_generation_.exchange(generation) == generation) {
    return;
  }
  v1::HeartbeatRequest beat;
  beat.set_rank(registered_rank_);
  beat.set_generation(generation);
  beat.set_worker_id(options_.registration.worker_id());
  beat.set_tensor_count(last_tensor_count_);
  beat.set_tensor_bytes(last_tensor_bytes_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    beat.set_worker_secret(secret_);
  }
  beat.set_seal_reason(ReformReason(std::string(cause.message())));
  const auto started = Clock::now();
  absl::StatusOr<v1::HeartbeatResponse> reply =
      coordinator_.Heartbeat(beat, kSealTimeout);
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

void WorldAgent::HeartbeatLoop(std::chrono::milliseconds first_beat) {
  // A broken communicator is reported at once rather than at the next
  // beat: the sooner the coordinator grants a new generation, the shorter
  // the window in which ops fail.
  constexpr std::chrono::milliseconds kHealthPoll(50);
  // A diagnosis takes kArrivalCheckTime and a few KV round trips.
  constexpr auto kSettleBound = kArrivalCheckTime + std::chrono::seconds(1);
  int64_t settling_generation = -1;
  Clock::time_point settling_since;
  bool unreachable = false;
  int64_t reported_broken = -1;  // generation whose breakage was reported
  Clock::time_point next_beat = Clock::now() + first_beat;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      const auto wake = std::min(next_beat, Clock::now() + kHealthPoll);
      if (cv_.wait_until(lock, wake, [this] { return stop_; })) return;
    }
    const int64_t generation = registered_generation_;
    const bool comm_broken =
        core_.generation() == generation && !core_.CommunicatorHealth().ok();
    const bool broken = failed_generation_ == generation || comm_broken;
    // The ops that failed with the communicator are diagnosed first: each
    // rank's arrival check reads the KV of this generation, which a
    // re-form would end under it (and then a rank still in the op was
    // named as one that never reached it). Bounded, should a check hang.
    bool hold = false;
    if (comm_broken && reported_broken != generation) {
      if (settling_generation != generation) {
        settling_generation = generation;
        settling_since = Clock::now();
      }
      hold = Clock::now() - settling_since < kSettleBound &&
             core_.SettlingAfterBreak();
    }
    if (Clock::now() < next_beat &&
        !(broken && !hold && reported_broken != generation)) {
      continue;
    }
    if (broken && !hold) reported_broken = generation;
    next_beat = Clock::now() + heartbeat_interval_;
    const Beat beat = HeartbeatOnce(/*report_broken=*/!hold);
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

void WorldAgent::Run() {
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

absl::Status WorldAgent::Leave() {
  v1::DeregisterRequest leave;
  leave.set_rank(registered_rank_);
  leave.set_generation(registered_generation_);
  leave.set_worker_id(options_.registration.worker_id());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    leave.set_worker_secret(secret_);
  }
  return coordinator_.Deregister(leave);
}

}  // namespace ccl
