// Thousands of simulated workers in one process, each doing against a real
// coordinator what a ccworker does: Register, then the NCCL unique-id
// rendezvous through the KV store (common/unique_id_plan.h: one id, or
// one per block of ranks and the list from rank 0), which the ranks that
// post no id skip when their Register reply brought the ids; then
// heartbeats at the interval and phase the coordinator tells it. The callback
// client API keeps them threadless; they share a few dozen channels, as workers
// on a few dozen hosts would share links.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ccl/v1/coordinator.grpc.pb.h"

namespace ccl::bench {

struct FormedWorld {
  std::string error;        // empty on success
  double registered_s = 0;  // until the last Register reply
  double formed_s = 0;      // until the last rank has every unique id
  int64_t generation = 0;
  int64_t interval_ms = 0;
  int64_t timeout_ms = 0;
  int unique_ids = 0;
  std::vector<int> rank_of;  // by simulated worker
  std::vector<std::string> worker_id_of;
  // What each registration returned; heartbeats carry it.
  std::vector<std::string> secret_of;
};

struct HeartbeatStats {
  int64_t sent = 0;
  int64_t failed = 0;
  std::string first_error;
  std::vector<double> latencies_us;  // one per reply, in arrival order
};

class SimulatedWorld {
 public:
  // Opens `channels` connections to `address`.
  SimulatedWorld(const std::string& address, int channels);

  // Registers `n` workers and runs the unique-id rendezvous of a world of
  // size n with `ranks_per_root` (0: one id). With `ids_with_register`, as
  // ccworker does for a CUDA device, each Register asks for the ids
  // (RegisterRequest.nccl_ranks_per_root) and a rank whose reply carries
  // them is done; without it, every rank reads them from the KV store (the
  // protocol before the ids came with the registration). With
  // `ranks_per_host` > 1, the workers register as host agents register them:
  // one RegisterHost per host of that many workers, each worker's answer
  // taken from the stream; otherwise one Register per worker.
  FormedWorld Form(int n, int ranks_per_root, bool ids_with_register = true,
                   int ranks_per_host = 1);

  // Heartbeats every worker of `world` for `duration` at the interval the
  // coordinator gave, first beats staggered as ccworker does. When
  // `victim_rank` >= 0, that rank stops beating at `stop_victim_after` and
  // the run continues until a reply reports the world DEGRADED (or
  // `duration` ends): `lost_after_s` is then the time from the victim's last
  // beat to that reply, -1 if it never came.
  // One heartbeat from every worker of `world`, all in flight at once; the
  // highest generation the replies named (-1 if a beat failed). A re-form
  // one rank asked for starts once every member was heard from after it.
  int64_t BeatOnce(const FormedWorld& world);

  // With progress on, every beat of Heartbeat also reports a new
  // finished_below for the world group (as a worker whose ops advance
  // between every two beats), so the coordinator publishes a progress key
  // per beat: its worst case.
  void set_progress(bool on) { progress_ = on; }

  // The coordinator's value of `key` in the world's generation, or the
  // error, as text (to show what a run left in the KV store).
  std::string KvGet(const FormedWorld& world, const std::string& key);

  HeartbeatStats Heartbeat(const FormedWorld& world,
                           std::chrono::milliseconds duration, int victim_rank,
                           std::chrono::milliseconds stop_victim_after,
                           double* lost_after_s);

 private:
  v1::Coordinator::Stub* Stub(int worker) {
    return stubs_[static_cast<size_t>(worker) % stubs_.size()].get();
  }

  std::vector<std::unique_ptr<v1::Coordinator::Stub>> stubs_;
  // The secret each worker was issued at its first registration, which
  // its later ones (a new generation) must bring, as ccworker's do.
  std::vector<std::string> secrets_;
  bool progress_ = false;
};

}  // namespace ccl::bench
