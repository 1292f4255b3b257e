// The lease a client holds on the coordinator for the sequence numbers it
// reserves (HoldLease): a stream open for as long as the client lives. When
// the process dies, the connection closes, the coordinator ends the lease,
// and a worker waiting on a number the client reserved and never sent skips
// it at once (coordinator/sequence_leases.h) instead of after its gap
// timeout: one killed script does not freeze a shared cluster.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "ccl/v1/coordinator.grpc.pb.h"

namespace ccl::client::internal {

class SequenceLease {
 public:
  // `open_timeout` bounds the wait for the coordinator's acknowledgement.
  SequenceLease(v1::Coordinator::Stub& stub,
                std::chrono::milliseconds open_timeout);
  // Ends the stream (the coordinator ends the lease) and waits for it.
  ~SequenceLease();
  SequenceLease(const SequenceLease&) = delete;
  SequenceLease& operator=(const SequenceLease&) = delete;

  // The id to reserve under: the held lease's, opening a new one first if
  // there is none (the first reservation, or the last stream broke). Empty
  // when no lease could be held (a coordinator older than leases, a host
  // agent, an unreachable one): the reservation is then nobody's, and only
  // the workers' gap timeout skips it if this client dies holding it.
  std::string Id();
  // Whether a lease that was held has ended since the last call while this
  // client lives on (the connection broke, the coordinator restarted): the
  // coordinator took the seqs reserved under it for those of a dead client,
  // so the ones still held should be given back, not used.
  bool TakeLost() { return lost_.exchange(false); }

 private:
  class Stream;

  v1::Coordinator::Stub& stub_;
  const std::chrono::milliseconds open_timeout_;
  std::mutex mutex_;
  std::unique_ptr<Stream> stream_;
  // The coordinator does not know HoldLease: never asked again.
  bool unsupported_ = false;
  std::atomic<bool> lost_{false};
};

}  // namespace ccl::client::internal
