// The host agent's logic: which Register calls of a host's workers travel
// together in one RegisterHost (cchostagent, docs/scale.md). The workers of
// a host are started together by one launcher, so a batch leaves as soon as
// every worker of the host that has not registered in this round waits
// (`expected` of them in all, when the agent is told how many), or `window`
// after its first call, whichever is first. A round ends when `expected`
// registrations have been sent: so the stragglers of a batch the window
// sent early leave as soon as they are all there, and a worker that
// registers alone after the round (a restart, a re-join) waits at most
// `window` for others (a host whose workers all restart registers as one
// batch again). Calls that carry different credentials never share a batch
// (the coordinator checks one token per call) and count rounds apart. No
// gRPC here.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/timer_queue.h"

namespace ccl::coordinator {

class RegistrationBatcher {
 public:
  using CallId = uint64_t;
  // Receives a batch, in arrival order; runs on the thread of the Add that
  // completed it or on the batcher's timer thread, never under its lock.
  using Send = std::function<void(std::vector<CallId> batch)>;

  // `expected` <= 0: no count is known, batches leave by the window alone.
  RegistrationBatcher(int expected, std::chrono::milliseconds window,
                      Send send);
  // Calls still waiting are dropped unsent; the owner finishes them.
  ~RegistrationBatcher() = default;

  void Add(CallId call, const std::string& credential);
  // For a call that went away: true if it was still waiting (it will not
  // be sent), false if its batch has left already.
  bool Remove(CallId call);

 private:
  struct Waiting {
    std::vector<CallId> calls;
    uint64_t batch = 0;  // which batch the window timer is for
    int sent_in_round = 0;
  };
  // Takes the batch of `credential` out, if it is still `batch`.
  std::vector<CallId> TakeLocked(const std::string& credential, uint64_t batch);

  const int expected_;
  const std::chrono::milliseconds window_;
  const Send send_;
  std::mutex mutex_;
  uint64_t next_batch_ = 1;
  std::map<std::string, Waiting> waiting_;  // by credential
  std::map<CallId, std::string> credential_of_;
  // Last: destroyed first, so no timer runs into the members above.
  TimerQueue timers_;
};

}  // namespace ccl::coordinator
