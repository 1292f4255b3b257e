// Keeps a worker in the coordinator's world for as long as it runs: joins
// (register + rendezvous), heartbeats, and re-joins whenever the world
// moves on without changing the worker's tensors:
//   - the coordinator starts a new generation (a replacement rank joined, or
//     a rank asked for one): re-register, build the new communicators;
//   - this worker's communicator broke (an op timed out, a peer vanished
//     mid-op): ask for a new generation through the heartbeat;
//   - the coordinator restarted and forgot the world: re-register into the
//     same rank and generation, so running communicators carry on.
//
// The machine is gRPC-free, as the coordinator's core is: it talks to the
// coordinator through MembershipPort and to the worker through
// MemberWorker, and every decision is a step of its own (the timed one,
// PlanBeat, takes the time it decides at), so tests drive each transition
// with fakes; only the loops that chain the steps wait.
// rpc/world_agent.h adapts it to the coordinator's gRPC API.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/membership_types.h"
#include "server/core/types.h"
#include "server/core/worker_core.h"

namespace ccl {

// What one registration asks beyond the worker's fixed one (its address,
// host, device, worker id): RegisterRequest's fields that change.
struct RegisterAsk {
  std::string secret;
  bool rejoin = false;
  // The rank to take again; empty: the fixed registration's choice.
  std::optional<int> requested_rank;
  // Bounds one attempt at the coordinator; empty: the fixed registration's.
  std::optional<std::chrono::milliseconds> timeout;
  // Every generation this worker knows of, formed here or not, so that a
  // restarted coordinator starts above them.
  int64_t known_generation = 0;
  // Offered while the communicators are healthy, in case the coordinator
  // restarted: it resumes this generation and these groups' seqs.
  std::optional<int64_t> resume_generation;
  std::map<std::string, int64_t> resume_next_seq;
};

// The coordinator's answer to a registration.
struct Registration {
  int rank = 0;
  int64_t generation = 0;
  int world_size = 0;
  std::string secret;
  int64_t heartbeat_interval_ms = 0;
  ShrinkInfo shrink;
  // KV pairs the answer brought (the NCCL ids of nccl_ranks_per_root).
  std::map<std::string, std::string> kv;
  bool peer_addresses_published = false;
};

// The coordinator, as membership calls it. Errors carry the coordinator's
// canonical codes.
class MembershipPort {
 public:
  virtual ~MembershipPort() = default;
  virtual absl::StatusOr<Registration> Register(const RegisterAsk& ask) = 0;
  // The coordinator's current generation. `timeout`, when set, bounds the
  // call instead of the port's own.
  virtual absl::StatusOr<int64_t> Heartbeat(
      const HeartbeatRequest& beat,
      std::optional<std::chrono::milliseconds> timeout) = 0;
  virtual absl::Status Deregister(int rank, int64_t generation,
                                  const std::string& secret) = 0;
  // Who registrations go to, for messages.
  virtual std::string registrar_name() const = 0;
};

// The worker, as membership reads and drives it: WorkerCore's part, plus
// building a world from a registration (its KV store is the adapter's).
class MemberWorker {
 public:
  virtual ~MemberWorker() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int64_t generation() const = 0;
  virtual int64_t known_generation() const = 0;
  virtual absl::Status CommunicatorHealth() const = 0;
  virtual bool SettlingAfterBreak() const = 0;
  virtual std::vector<GroupInfo> Groups() const = 0;
  virtual int64_t TensorCount() const = 0;
  virtual int64_t BytesInUse() const = 0;
  virtual std::string backend() const = 0;
  virtual absl::Status FormWorld(const Registration& registration) = 0;
};

struct MembershipOptions {
  // Gives up the first join after this long; later re-joins retry until
  // the worker stops.
  std::chrono::milliseconds register_timeout{300000};
  // The secret of the first registration (usually empty).
  std::string secret;
  // "joining", "ready", "re-forming": what GetInfo reports.
  std::function<void(const std::string&)> on_state;
  // After each heartbeat the coordinator accepted (metrics); must not block.
  std::function<void()> on_heartbeat;
  // The coordinator's address, for messages.
  std::string coordinator;
};

class Membership {
 public:
  using Clock = std::chrono::steady_clock;

  Membership(MemberWorker& worker, MembershipPort& coordinator,
             MembershipOptions options);
  // Stops the heartbeat thread.
  ~Membership();
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

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
  // at once, bounded by kSealTimeout, that the generation takes no new ops,
  // before the op that found it is answered. The request to re-form
  // follows on the heartbeat thread once the failed ops are diagnosed.
  // From an executor thread; never calls into the worker.
  void Seal(int64_t generation, const absl::Status& cause);
  static constexpr std::chrono::milliseconds kSealTimeout{1000};

  // ---- The machine's steps (what Join, Run and the heartbeat thread do),
  // public so that tests drive every transition.

  // What the next registration asks: the first one as configured; a
  // re-join the same rank, with what a restarted coordinator needs.
  RegisterAsk NextRegistration(bool first) const;
  // Whether a registration refused with `code` is tried again.
  static bool Retryable(absl::StatusCode code, bool first);
  // Takes the coordinator's answer. True when the worker carries on in it
  // as it is (a coordinator that restarted resumed our generation); false
  // when it must build the registration's world.
  bool Registered(const Registration& registration, bool first);
  // The world of `registration` could not be built: heartbeats ask for the
  // next generation, saying why.
  void FormFailed(int64_t generation, const absl::Status& why);

  enum class Beat { kOk, kRejoin, kUnreachable };
  struct BeatPlan {
    bool beat = false;           // send a heartbeat now
    bool report_broken = false;  // and ask for a new generation in it
  };
  // Called every kHealthPoll and at each beat's time: whether to beat at
  // `now`. A broken generation is reported at once, once, after its failed
  // ops are diagnosed (bounded by kSettleBound); otherwise every interval.
  BeatPlan PlanBeat(Clock::time_point now);
  // The beat to send.
  HeartbeatRequest NextBeat(bool report_broken);
  // What the coordinator's answer (its generation, or an error) means.
  Beat Heard(const HeartbeatRequest& beat,
             const absl::StatusOr<int64_t>& coordinator_generation);
  // The seal to send for a break in `generation`; empty when that
  // generation was left or is already sealed.
  std::optional<HeartbeatRequest> SealBeat(int64_t generation,
                                           const absl::Status& cause);

  std::chrono::milliseconds heartbeat_interval() const {
    return heartbeat_interval_;
  }
  int64_t registered_generation() const { return registered_generation_; }

  // How often a broken communicator is looked for between beats.
  static constexpr std::chrono::milliseconds kHealthPoll{50};
  // How long a broken generation's report waits for the diagnosis of its
  // failed ops.
  static const std::chrono::milliseconds kSettleBound;
  // A re-join parks in Register until every rank is back; short attempts
  // keep SIGTERM responsive while it waits.
  static constexpr std::chrono::milliseconds kRejoinAttempt{5000};
  static constexpr std::chrono::milliseconds kMaxBackoff{2000};

 private:
  // Registers (with backoff while the coordinator is unreachable or the
  // rank is still held by a lost predecessor), then builds the world
  // unless the coordinator resumed our generation. Errors of the
  // registration itself come back with `registration_failed` set.
  absl::Status Rejoin(bool first, Clock::time_point give_up,
                      bool& registration_failed);
  void HeartbeatLoop(std::chrono::milliseconds first_beat);
  void StartHeartbeats(const Registration& registration);
  void SetState(const std::string& state);
  bool StopRequested();
  std::string Secret() const;

  MemberWorker& worker_;
  MembershipPort& coordinator_;
  const MembershipOptions options_;
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
  // ask the worker: an executor thread calls it).
  std::atomic<int64_t> last_tensor_count_{0};
  std::atomic<int64_t> last_tensor_bytes_{0};

  // PlanBeat's state (the heartbeat thread's alone).
  Clock::time_point next_beat_{};
  int64_t settling_generation_ = -1;
  Clock::time_point settling_since_{};
  int64_t reported_broken_ = -1;  // generation whose breakage was reported

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::string failed_reason_;
  // The secret the coordinator issued this worker: every heartbeat,
  // re-registration and the deregistration carry it. Memory only; a
  // coordinator that restarted issues a new one at re-registration.
  std::string secret_;
  bool stop_ = false;
  bool rejoin_ = false;
  std::thread heartbeat_thread_;
};

}  // namespace ccl
