// Work: the handle of one accepted piece of sequenced work (an op, a bench,
// a group creation), as the RPC layer and the async table see it. Every kind
// derives from this one class, which owns the state machine
// (queued -> running -> completed | failed, exactly once) and the timing, so
// that waiting, callbacks and the flight recorder behave the same for all.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/core/types.h"

namespace ccl {

// "all_reduce seq 5 of group world".
std::string DescribeOp(const OpSpec& spec);

class Work {
 public:
  Work(int64_t id, OpSpec spec);
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  int64_t id() const { return id_; }
  const OpSpec& spec() const { return spec_; }
  WorkState state() const;
  // OK once completed; the error once failed; OK (meaningless) before.
  absl::Status status() const;
  OpTiming timing() const;
  // Blocks the caller (never a gRPC thread) up to `timeout`;
  // DEADLINE_EXCEEDED if still queued or running then, the status otherwise.
  // Returns after every OnDone callback registered before the end has run.
  absl::Status Wait(std::chrono::milliseconds timeout);
  // Runs `callback` once the work is done: on the thread that finishes it
  // (an executor), or at once if it already is. Callbacks must not block.
  void OnDone(std::function<void()> callback);
  // "all_reduce seq 5 of group world (work 12)".
  virtual std::string Describe() const;
  // The client went away: work that has not started is dropped when its
  // turn comes (it still takes its seq), a bench stops between instances.
  // What is already inside the backend runs to its end or its timeout.
  // Ranks drop and stop together (withdrawable() says where they can).
  void RequestCancel() { cancel_requested_ = true; }
  bool cancel_requested() const { return cancel_requested_; }

  // Whether every rank can be made to drop this work together when one
  // rank's caller gives it up before its turn (an op whose ranks agree
  // before it runs; a bench, whose ranks agree where to stop). Work that
  // cannot be is run even after a cancel: a rank that dropped it alone
  // would leave the others waiting inside it until its timeout.
  virtual bool withdrawable() const { return false; }
  // As RequestCancel, but only while the work is still queued, and atomic
  // with its start: true if it will not run here (nor, being withdrawable,
  // anywhere); false once it started, when its own completion answers. The
  // first time it succeeds it calls OnWithdrawn.
  bool TryWithdraw();

  // The time by which the call waiting for this work must have its answer
  // (a little before the client's deadline); max if none. A bench stops
  // there, on every rank together.
  void SetCallDeadline(std::chrono::steady_clock::time_point deadline);
  std::chrono::steady_clock::time_point call_deadline() const;

 protected:
  using Clock = std::chrono::steady_clock;
  // Withdrawn while queued: what a withdrawn run never touches can be given
  // back now instead of when its turn comes, which may be a gap timeout
  // away. Called once, with the work's lock held, so before Start.
  virtual void OnWithdrawn() {}
  // Queued -> running; records the time spent queued.
  void MarkRunning();
  // The one transition to done. A failure's message is prefixed with what
  // failed (DescribeOp) unless `annotate` is false. Later calls are ignored.
  void Finish(absl::Status status, double device_us, bool annotate = true);
  bool done() const;

 private:
  const int64_t id_;
  const OpSpec spec_;
  const Clock::time_point enqueued_ = Clock::now();
  std::atomic<bool> cancel_requested_{false};
  std::atomic<int64_t> call_deadline_ns_{INT64_MAX};

  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  WorkState state_ = WorkState::kQueued;
  bool withdrawn_ = false;
  absl::Status status_;
  OpTiming timing_;
  std::vector<std::function<void()>> callbacks_;
  // Set once the callbacks taken at the end have run: Wait returns only
  // then, so a waiter never sees the work done while its callbacks still
  // run on the executor (they may reference what the waiter frees next).
  bool callbacks_ran_ = false;
};

}  // namespace ccl
