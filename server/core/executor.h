// The ordered executor of one group.
//
// Every op of a group carries a sequence number; every rank runs the group's
// ops strictly in that order (from 0 for each generation), whatever order
// the requests arrive in, so ranks can never disagree on which collective
// comes next. Ops that arrive early wait in a map. Two stages, so that an
// asynchronous backend (NCCL) can have several ops in flight:
//   launch thread:     takes seq k once k-1 was launched, waits for host
//                      accesses of its tensors to end, calls Launch.
//                      Gloo ops run to completion right here.
//   completion thread: waits on the handles of launched ops, in order, and
//                      completes their Work (only used by handles that were
//                      not already complete when Launch returned).
// A seq that has not arrived `gap_timeout` after the executor started
// waiting for it (with later ops queued) is declared lost: the executor
// skips every missing seq below the lowest queued one and runs on; a late
// Submit of a lost seq fails DEADLINE_EXCEEDED with the reason. A dead client
// thus costs one gap timeout, not a hung group.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/comm/communicator.h"
#include "server/core/work.h"

namespace ccl {

// What the executor runs: one op, or a bench loop occupying one seq.
class ExecutorTask {
 public:
  virtual ~ExecutorTask() = default;
  // The task takes the seqs [seq, seq + seq_count): a plan takes one per op,
  // a released range all of its seqs.
  virtual int64_t seq() const = 0;
  virtual int64_t seq_count() const { return 1; }
  virtual std::chrono::milliseconds timeout() const = 0;
  // Launch thread, in seq order, right before Launch: the earlier seqs have
  // been launched; blocks until host reads/writes of the task's tensors end.
  virtual void Start() = 0;
  // Errors mean nothing is in flight.
  virtual absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      Communicator& comm) = 0;
  // Whether every rank of the group takes part (a collective), so that a
  // rank that never reached the seq is worth naming; send/recv involve two.
  virtual bool involves_every_rank() const { return true; }
  // Called exactly once: with the op's result, or with the reason it was
  // never run (cancelled at shutdown). Must not block.
  virtual void Complete(absl::Status status, double device_us) = 0;
};

class Executor {
 public:
  // Whether a diagnosis also names the ranks that never reached the op.
  // Only when the ranks that reached it fail together, or the missing marks
  // would misname ranks still waiting in it: kAfterTimeout when this rank's
  // own deadline passed (every rank there times out at about the same
  // moment); kIfAPeerTimedOut when the backend lost a peer, which is a
  // peer's abort at its deadline if one says so (then the others fail
  // now), and otherwise a peer that died (its neighbours fail at once and
  // the rest only at their deadline: no arrival check then); kNever for an
  // op of some ranks only.
  enum class Arrival { kNever, kAfterTimeout, kIfAPeerTimedOut };
  struct Diagnosed {
    // Appended to the op's error; empty when there is nothing to add.
    std::string why;
    // A peer gave up on this op at its deadline, which is why the backend
    // lost it here: the op failed of a timeout, not of a lost peer.
    bool peer_timed_out = false;
  };
  // Says what went wrong with `seq` beyond the backend's own error: which
  // ranks never reached it (see Arrival) and which peers this rank cannot
  // reach. Asked when an op timed out or lost a peer. May block briefly.
  using Diagnosis = std::function<Diagnosed(int64_t seq, Arrival arrival)>;
  // Told once, with the communicator's health, when an op ends with the
  // communicator broken, before that op is answered: the worker tells the
  // coordinator that this generation takes no more ops, so a client that
  // saw the failure and sends its next op waits for the next generation
  // instead of meeting the broken communicator. May block briefly.
  using BreakListener = std::function<void(const absl::Status& cause)>;
  // Tells the executor that nobody will send an op at the seqs
  // [begin, end) it has not received: their holder is gone. Any thread; a
  // no-op once the executor has stopped.
  using SkipSeqs =
      std::function<void(int64_t begin, int64_t end, absl::Status reason)>;
  // Asked once per missing seq that later ops have waited behind for
  // kGapWatchAfter: the client that reserved it may be gone. Starts finding
  // out (the worker asks the coordinator, which knows whether that client
  // still holds its lease) and calls `skip` if it is gone; returns what
  // stops finding out, called once the seq arrives, the gap is skipped or
  // the executor stops. Must not block or call back into the executor.
  using GapWatch =
      std::function<std::function<void()>(int64_t seq, SkipSeqs skip)>;
  // Short, so that a dead client's seqs are skipped well within a second,
  // and long enough that two live clients' ops arriving out of order (the
  // common gap) finish without a question to the coordinator.
  static constexpr std::chrono::milliseconds kGapWatchAfter{50};

  // `busy_poll`: how long the executor's threads spin for the next op or
  // completion before they sleep (common/busy_poll.h); zero never spins.
  Executor(std::string group, int rank, std::shared_ptr<Communicator> comm,
           std::chrono::milliseconds gap_timeout, Diagnosis diagnose = nullptr,
           std::chrono::microseconds busy_poll = {},
           BreakListener on_break = nullptr, GapWatch gap_watch = nullptr);
  // Stops (cancelling queued tasks) and joins.
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Never blocks. ALREADY_EXISTS for a seq already queued or run,
  // DEADLINE_EXCEEDED for one declared lost or released, OUT_OF_RANGE for
  // one more than kMaxSeqsAhead past the next seq (a seq that far ahead
  // can only be a client's mistake, and queueing it would make the group
  // skip everything before it), ABORTED once stopped.
  absl::Status Enqueue(std::shared_ptr<ExecutorTask> task);
  // The seqs [begin, end) will carry no op (a client reserved them and gave
  // them back, or a refused request took them, or their holder is gone):
  // the group runs past them at once. Seqs already run or queued are left
  // as they are; a later op at one of the others fails with `reason`.
  absl::Status Release(int64_t begin, int64_t end, absl::Status reason);

  // As far ahead as a client can legitimately be: one plan or reserved
  // range (the coordinator hands out at most this many seqs at once). A
  // queued seq further ahead would, once the gap before it timed out, make
  // the group skip every seq below it, failing the ops other clients hold
  // reservations for.
  static constexpr int64_t kMaxSeqsAhead = int64_t{1} << 16;
  // Ops launched but not yet complete, at most: beyond this the launch
  // thread waits, so a stuck device cannot make a launch block inside the
  // backend (CUDA's launch queue is about a thousand deep).
  static constexpr size_t kMaxInFlight = 256;

  // The next seq the launch thread will run.
  int64_t next_seq() const;
  // Every op below this seq has ended, well or not (ops end in seq order),
  // save seqs the group skipped: what a peer's arrival diagnosis may say
  // this rank finished. next_seq() counts an op as soon as it starts.
  int64_t finished_below() const;
  // Why the task at `seq` (queued) has not started, for a person: the seq
  // it waits for has not arrived (for how long, and when the gap timeout
  // skips it), or an earlier op still runs.
  std::string WhyWaiting(int64_t seq) const;
  // "ready", "broken" (communicator poisoned) or "stopped".
  std::string state() const;
  // An op is being launched, in flight or being finished (and diagnosed).
  // After the communicator broke, these ops fail and diagnose promptly;
  // the worker holds its request to re-form until they have (see
  // WorkerCore::SettlingAfterBreak), because a diagnosis reads the KV of
  // the generation it is about, and the re-form would end it.
  bool settling() const;
  const std::string& group() const { return group_; }
  Communicator& communicator() { return *comm_; }

  // Fails queued tasks with `reason` and joins both threads. An op already
  // inside the backend runs until it completes or hits its own timeout.
  // Not from a completion callback: it would join its own thread.
  void Stop(absl::Status reason);

  // Blocks until every task queued so far has ended, bounded by the gap
  // timeout plus the longest of their timeouts, or until CancelDrain or
  // Stop. For a group destroyed with ops still queued: the other ranks may
  // be running those ops, and cancelling them here (then closing the
  // communicator under the others) would fail them there and break the
  // group on those ranks, which asks the whole world to re-form.
  void Drain();
  // Ends a Drain at once (the worker shuts down).
  void CancelDrain();

 private:
  struct InFlight {
    std::shared_ptr<ExecutorTask> task;
    std::unique_ptr<CommWork> handle;
  };

  // Enqueue, with mutex_ held.
  absl::Status EnqueueLocked(std::shared_ptr<ExecutorTask> task);
  void LaunchLoop();
  void CompletionLoop();
  // An op is being launched, in flight or being finished (a launch whose
  // handle failed is in flight too, for its completion). Under mutex_.
  bool OpsUnderWayLocked() const;
  void Finish(std::shared_ptr<ExecutorTask> task,
              std::unique_ptr<CommWork> handle);
  // Under mutex_: wakes `cv`'s waiters and the threads spinning for a change.
  void Notify(std::condition_variable& cv);
  // With busy_poll_: releases `lock` and spins until a Notify or for
  // busy_poll_, then takes it back; true if a Notify came. The caller
  // re-checks its condition under the lock before it waits.
  bool SpinForChange(std::unique_lock<std::mutex>& lock);

  const std::string group_;
  const int rank_;
  const std::shared_ptr<Communicator> comm_;
  const std::chrono::milliseconds gap_timeout_;
  const Diagnosis diagnose_;
  const std::chrono::microseconds busy_poll_;
  const BreakListener on_break_;
  std::atomic<bool> break_told_{false};
  const GapWatch gap_watch_;
  // What a GapWatch's skip reaches: this executor until it stops.
  struct SkipTarget {
    std::mutex mutex;
    Executor* executor = nullptr;
  };
  const std::shared_ptr<SkipTarget> skip_target_;
  // The missing seq last asked about (-1: none), and what stops that
  // question. Guarded by mutex_.
  int64_t watched_seq_ = -1;
  std::function<void()> stop_watch_;
  // The failure that broke the communicator, as its op reported it (the
  // diagnosed cause, not the transport's words): what the ops queued
  // behind it are told. Guarded by mutex_.
  absl::Status broke_with_;
  // Bumped by every Notify of launch_cv_ or completion_cv_.
  std::atomic<uint64_t> changes_{0};

  mutable std::mutex mutex_;
  std::condition_variable launch_cv_;
  std::condition_variable completion_cv_;
  std::condition_variable retired_cv_;
  // Notified whenever a task ends (for Drain).
  std::condition_variable ended_cv_;
  bool drain_cancelled_ = false;
  bool stopping_ = false;
  bool stopped_ = false;
  int64_t next_seq_ = 0;
  int64_t finished_below_ = 0;
  // Since when next_seq_ has been missing with later tasks queued.
  std::optional<std::chrono::steady_clock::time_point> gap_since_;
  // The seq being launched (-1: none).
  int64_t launching_ = -1;
  // Finish calls under way (taken out of in_flight_ or never in it).
  int finishing_ = 0;
  std::map<int64_t, std::shared_ptr<ExecutorTask>> pending_;
  // begin -> (end, what a late op there fails with) of seq ranges declared
  // lost or released.
  std::map<int64_t, std::pair<int64_t, absl::Status>> lost_;
  std::deque<InFlight> in_flight_;
  std::thread launch_thread_;
  std::thread completion_thread_;
};

}  // namespace ccl
