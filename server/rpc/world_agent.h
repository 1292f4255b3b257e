// Keeps a worker in the coordinator's world for as long as it runs: joins
// (register + rendezvous), heartbeats, and re-joins whenever the world
// moves on without changing the worker's tensors:
//   - the coordinator starts a new generation (a replacement rank joined, or
//     a rank asked for one): re-register, build the new communicators;
//   - this worker's communicator broke (an op timed out, a peer vanished
//     mid-op): ask for a new generation through the heartbeat;
//   - the coordinator restarted and forgot the world: re-register into the
//     same rank and generation, so running communicators carry on.
// It talks gRPC to the coordinator, so it belongs to the adapter layer; the
// decisions it acts on live in WorkerCore and the coordinator's core.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "ccl/v1/coordinator.pb.h"
#include "coordinator/client/coordinator_client.h"
#include "server/core/worker_core.h"
#include "server/rpc/coordinator_kv_store.h"

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
  // Stops the heartbeat thread.
  ~WorldAgent();
  WorldAgent(const WorldAgent&) = delete;
  WorldAgent& operator=(const WorldAgent&) = delete;

  // Registers and builds the first world; blocks. An error means the
  // worker never joined (the coordinator refused it, or the world did not
  // form within the register timeout).
  absl::Status Join();

  // Heartbeats and re-joins as needed until Stop(); blocks.
  void Run();
  // From any thread (the signal handler's).
  void Stop();

  // Deregisters (after Run returned).
  absl::Status Leave();

  // A communicator of `generation` broke (`cause`): tells the coordinator
  // at once, bounded by kSealTimeout, that the generation takes no new ops
  // (HeartbeatRequest.seal_reason), before the op that found it is
  // answered. The request to re-form follows on the heartbeat thread once
  // the failed ops are diagnosed. From an executor thread
  // (WorkerConfig::on_communicator_broken); never calls into the core.
  void Seal(int64_t generation, const absl::Status& cause);
  static constexpr std::chrono::milliseconds kSealTimeout{1000};

 private:
  enum class Beat { kOk, kRejoin, kUnreachable };

  // Registers (with backoff while the coordinator is unreachable or the
  // rank is still held by a lost predecessor), then builds the world's
  // communicators unless the coordinator resumed our generation. Errors of
  // the registration itself come back with `registration_failed` set.
  absl::Status Rejoin(bool first, std::chrono::steady_clock::time_point give_up,
                      bool& registration_failed);
  // `report_broken`: ask for a new generation if a communicator broke.
  Beat HeartbeatOnce(bool report_broken);
  void HeartbeatLoop(std::chrono::milliseconds first_beat);
  void SetState(const std::string& state);
  bool StopRequested();

  WorkerCore& core_;
  CoordinatorClient& coordinator_;
  const WorldAgentOptions options_;
  std::chrono::milliseconds heartbeat_interval_{1000};

  // What the coordinator last said this worker is; heartbeats carry it,
  // so that a world still being built is not mistaken for a stale one.
  std::atomic<int> registered_rank_{-1};
  std::atomic<int64_t> registered_generation_{0};
  // The coordinator's generation in its last heartbeat reply: newer than
  // the registered one while the world moves on without this worker yet.
  std::atomic<int64_t> heard_generation_{0};
  // A generation whose communicators could not be built here; heartbeats
  // ask the coordinator for the next one (failed_reason_ under mutex_).
  std::atomic<int64_t> failed_generation_{-1};
  // The last generation Seal told the coordinator about.
  std::atomic<int64_t> sealed_generation_{-1};
  // The tensor counts of the last heartbeat, for Seal's (which must not
  // ask the core: an executor thread calls it).
  std::atomic<int64_t> last_tensor_count_{0};
  std::atomic<int64_t> last_tensor_bytes_{0};
  std::string failed_reason_;
  // The secret the coordinator issued this worker (under mutex_): every
  // heartbeat, re-registration and the deregistration carry it. Memory
  // only; a coordinator that restarted issues a new one at re-registration.
  std::string secret_;

  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool rejoin_ = false;
  // KV stores of every generation this worker joined: communicators and
  // their diagnosis hooks keep pointers to them, and a store is a few
  // bytes, so they live as long as the agent.
  std::deque<std::unique_ptr<CoordinatorKvStore>> stores_;
  std::thread heartbeat_thread_;
};

}  // namespace ccl
