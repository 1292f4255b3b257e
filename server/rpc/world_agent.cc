#include "server/rpc/world_agent.h"

#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/proto_convert.h"
#include "server/core/arrival_check.h"
#include "server/rpc/coordinator_kv_store.h"
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

// The coordinator's RPCs, in membership's terms.
class WorldAgent::Port final : public MembershipPort {
 public:
  Port(CoordinatorClient& coordinator, const WorldAgentOptions& options)
      : coordinator_(coordinator), options_(options) {}

  absl::StatusOr<Registration> Register(const RegisterAsk& ask) override {
    v1::RegisterRequest request = options_.registration;
    request.set_worker_secret(ask.secret);
    request.set_rejoin(ask.rejoin);
    if (ask.requested_rank) request.set_requested_rank(*ask.requested_rank);
    if (ask.timeout) request.set_timeout_ms(ask.timeout->count());
    request.set_known_generation(ask.known_generation);
    if (ask.resume_generation) {
      request.set_resume_generation(*ask.resume_generation);
    }
    request.mutable_resume_next_seq()->insert(ask.resume_next_seq.begin(),
                                              ask.resume_next_seq.end());
    absl::StatusOr<v1::RegisterResponse> answer =
        (options_.registrar != nullptr ? *options_.registrar : coordinator_)
            .Register(request);
    if (!answer.ok()) return answer.status();
    Registration registration;
    registration.rank = answer->rank();
    registration.generation = answer->generation();
    registration.world_size = answer->world().world_size();
    registration.secret = answer->worker_secret();
    registration.heartbeat_interval_ms =
        answer->world().heartbeat_interval_ms();
    registration.shrink.from_generation =
        answer->world().shrunk_from_generation();
    registration.shrink.excluded_ranks.assign(
        answer->world().excluded_ranks().begin(),
        answer->world().excluded_ranks().end());
    registration.kv.insert(answer->kv().begin(), answer->kv().end());
    registration.peer_addresses_published = answer->peer_addresses_published();
    return registration;
  }

  absl::StatusOr<int64_t> Heartbeat(
      const HeartbeatRequest& ask,
      std::optional<std::chrono::milliseconds> timeout) override {
    v1::HeartbeatRequest beat = ToProto(ask);
    beat.set_worker_id(options_.registration.worker_id());
    absl::StatusOr<v1::HeartbeatResponse> reply =
        coordinator_.Heartbeat(beat, timeout);
    if (!reply.ok()) return reply.status();
    return reply->generation();
  }

  absl::Status Deregister(int rank, int64_t generation,
                          const std::string& secret) override {
    v1::DeregisterRequest leave;
    leave.set_rank(rank);
    leave.set_generation(generation);
    leave.set_worker_id(options_.registration.worker_id());
    leave.set_worker_secret(secret);
    return coordinator_.Deregister(leave);
  }

  std::string registrar_name() const override {
    return options_.registrar != nullptr
               ? absl::StrCat(options_.coordinator, " through the host agent ",
                              options_.registrar_address)
               : options_.coordinator;
  }

 private:
  CoordinatorClient& coordinator_;
  const WorldAgentOptions& options_;
};

// The worker core, and each generation's KV store on the coordinator.
class WorldAgent::Member final : public MemberWorker {
 public:
  Member(WorkerCore& core, CoordinatorClient& coordinator,
         const WorldAgentOptions& options)
      : core_(core), coordinator_(coordinator), options_(options) {}

  int rank() const override { return core_.rank(); }
  int world_size() const override { return core_.world_size(); }
  int64_t generation() const override { return core_.generation(); }
  int64_t known_generation() const override { return core_.known_generation(); }
  absl::Status CommunicatorHealth() const override {
    return core_.CommunicatorHealth();
  }
  bool SettlingAfterBreak() const override {
    return core_.SettlingAfterBreak();
  }
  std::vector<GroupInfo> Groups() const override { return core_.Groups(); }
  int64_t TensorCount() const override {
    return static_cast<int64_t>(core_.List().size());
  }
  int64_t BytesInUse() const override { return core_.BytesInUse(); }
  std::string backend() const override { return core_.backend(); }

  absl::Status FormWorld(const Registration& registration) override {
    // The NCCL ids the registration brought (nccl_ranks_per_root), if any:
    // the rendezvous then reads them from the store without a call.
    stores_.push_back(std::make_unique<CoordinatorKvStore>(
        coordinator_, registration.generation, registration.kv));
    // Where the peers' failure diagnosis can try to reach this worker (a
    // link cut between two workers then shows by name), unless the
    // coordinator already set it. Best effort: a diagnosis without it just
    // names no unreachable peer.
    if (!registration.peer_addresses_published) {
      if (absl::Status s =
              stores_.back()->Set(PeerAddressKey(registration.rank),
                                  options_.registration.address());
          !s.ok()) {
        spdlog::debug("ccworker: publishing the address for diagnosis: {}",
                      s.ToString());
      }
    }
    return core_.FormWorld(registration.rank, registration.world_size,
                           registration.generation, *stores_.back(),
                           registration.shrink);
  }

 private:
  WorkerCore& core_;
  CoordinatorClient& coordinator_;
  const WorldAgentOptions& options_;
  // KV stores of every generation this worker joined: communicators and
  // their diagnosis hooks keep pointers to them, and a store is a few
  // bytes, so they live as long as the agent.
  std::deque<std::unique_ptr<CoordinatorKvStore>> stores_;
};

WorldAgent::WorldAgent(WorkerCore& core, CoordinatorClient& coordinator,
                       WorldAgentOptions options)
    : options_(std::move(options)),
      port_(std::make_unique<Port>(coordinator, options_)),
      member_(std::make_unique<Member>(core, coordinator, options_)) {
  MembershipOptions membership;
  membership.register_timeout = options_.register_timeout;
  membership.secret = options_.registration.worker_secret();
  membership.on_state = options_.on_state;
  membership.on_heartbeat = options_.on_heartbeat;
  membership.coordinator = options_.coordinator;
  membership_ = std::make_unique<Membership>(*member_, *port_, membership);
}

// The membership (and its heartbeat thread) ends before its port and member.
WorldAgent::~WorldAgent() { membership_.reset(); }

}  // namespace ccl
