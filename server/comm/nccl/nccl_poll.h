// Waiting on NCCL from the host, shared by the communicator's lifecycle
// (nccl_communicator.cc) and its launches (nccl_launch.cc).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "nccl.h"

namespace ccl::nccl {

using Clock = std::chrono::steady_clock;

// Polls: first by yielding for up to 10 ms, since a sleep costs at least the
// kernel's timer slack (50 us) and that lateness would land in every small
// op's latency and every benchmark's figure; then with a growing sleep
// (20 us to 1 ms) so that long ops do not burn a core. Runs on executor
// threads, never on a gRPC thread.
class Backoff {
 public:
  void Pause() {
    if (Clock::now() - start_ < std::chrono::milliseconds(10)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds(1000));
  }

 private:
  const Clock::time_point start_ = Clock::now();
  std::chrono::microseconds delay_{20};
};

// A communicator's state: ncclSuccess, ncclInProgress while a non-blocking
// call is under way, or the error NCCL recorded for it.
inline ncclResult_t CommState(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  const ncclResult_t got = ncclCommGetAsyncError(comm, &async);
  return got != ncclSuccess ? got : async;
}

inline bool IsError(ncclResult_t result) {
  return result != ncclSuccess && result != ncclInProgress;
}

}  // namespace ccl::nccl
