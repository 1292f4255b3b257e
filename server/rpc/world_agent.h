// Keeps a worker in the coordinator's world: the gRPC adapter of
// core/membership.h, whose machine decides when to register, heartbeat and
// re-join. This file converts its asks to the coordinator's messages, and
// builds a generation's world on a KV store of the coordinator's.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "ccl/v1/coordinator.pb.h"
#include "coordinator/client/coordinator_client.h"
#include "server/core/membership.h"
#include "server/core/worker_core.h"

namespace ccl {

// WorkerConfig::on_sequence_gap for a worker of `coordinator`: asks who
// holds the missing seq (AwaitSequenceHolder, bounded by the gap timeout)
// and skips the dead client's range when its lease has ended. Any other
// answer leaves the gap timeout to judge.
decltype(WorkerConfig::on_sequence_gap) SequenceHolderQuestion(
    CoordinatorClient& coordinator, std::chrono::milliseconds gap_timeout);

struct WorldAgentOptions {
  // Address, host, device, requested rank, worker id and register timeout.
  v1::RegisterRequest registration;
  // For messages.
  std::string coordinator;
  // Where Register calls go instead of the coordinator, when set: the
  // host's cchostagent (ccworker --host-agent), which sends the
  // registrations of the host's workers to the coordinator as one call.
  // Every other call goes to the coordinator directly, so the KV traffic of
  // a rendezvous takes no extra hop. Must outlive the agent.
  CoordinatorClient* registrar = nullptr;
  // Its address, for messages.
  std::string registrar_address;
  // Gives up the first join after this long; later re-joins retry until
  // the worker stops.
  std::chrono::milliseconds register_timeout{300000};
  // "joining", "ready", "re-forming": what GetInfo reports.
  std::function<void(const std::string&)> on_state;
  // After each heartbeat the coordinator accepted (metrics); must not block.
  std::function<void()> on_heartbeat;
};

class WorldAgent {
 public:
  WorldAgent(WorkerCore& core, CoordinatorClient& coordinator,
             WorldAgentOptions options);
  ~WorldAgent();
  WorldAgent(const WorldAgent&) = delete;
  WorldAgent& operator=(const WorldAgent&) = delete;

  // Membership's, as core/membership.h says.
  absl::Status Join() { return membership_->Join(); }
  void Run() { membership_->Run(); }
  void Stop() { membership_->Stop(); }
  absl::Status Leave() { return membership_->Leave(); }
  void Seal(int64_t generation, const absl::Status& cause) {
    membership_->Seal(generation, cause);
  }

 private:
  class Port;
  class Member;

  const WorldAgentOptions options_;
  std::unique_ptr<Port> port_;
  std::unique_ptr<Member> member_;
  std::unique_ptr<Membership> membership_;
};

}  // namespace ccl
