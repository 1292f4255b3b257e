// The one backend interface: a communicator of a group runs bound ops
// (pointers and counts already resolved and validated by the worker) and
// hands back a handle to wait on. Gloo runs an op to completion inside
// Launch and returns a completed handle; NCCL enqueues on a stream and
// returns a handle on a CUDA event. The executor therefore treats launch and
// completion as separate stages for every backend.
//
// Backends do not check that ranks agree on an op: AgreeingCommunicator
// (agreement.h) does that once for every backend, over the two small host
// exchanges each backend provides.
//
// Thread-safety: Launch, LaunchBatch, the exchanges and Split are called
// from one thread at a time (the group's executor), in sequence order.
// Supports, rank, size, name, Health and Abort may be called from any
// thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/types.h"

namespace ccl {

// An op with its buffers resolved. Counts follow NCCL's API so that a bound
// op maps onto one NCCL call:
//   all_reduce, broadcast, reduce, send, recv: `count` elements in and out.
//   all_gather: input `count`, output size * count.
//   reduce_scatter: input size * count, output `count`.
//   gather: input `count`, output size * count (root only).
//   scatter: input size * count (root only), output `count`.
//   all_to_all: input and output size * count; chunk j goes to rank j.
// In place is expressed with pointers, as in NCCL: input == output, or for
// all_gather / gather input == output + rank * count, and for
// reduce_scatter / scatter output == input + rank * count. Pointers a rank
// does not use (gather output off root, scatter input off root) may be null.
enum class Agreement {
  kCheck,
  // The client asked to run without the check. A backend that cannot
  // survive a mismatch (Gloo) still compares sizes.
  kSkip,
  // Already compared: the decorator did it, or this is a repeat of an op
  // that was (a benchmark's timed loop, a plan agreed as a whole).
  kAgreed,
};

struct BoundOp {
  OpKind kind = OpKind::kBarrier;
  DType dtype = DType::kFloat32;
  int64_t count = 0;
  const void* input = nullptr;
  void* output = nullptr;
  int root = 0;
  int peer = 0;
  ReduceOp reduce_op = ReduceOp::kSum;
  double premul_scale = 1.0;
  // Matches the op across ranks: the group's sequence number.
  int64_t seq = 0;
  std::chrono::milliseconds timeout{60000};
  // Whether ranks first agree that they run the same op (kind, dtype, count,
  // root, peer), so a mismatch fails cleanly on every rank instead of
  // hanging, corrupting memory or taking the process down. Checked by
  // AgreeingCommunicator; backends see kSkip or kAgreed only.
  Agreement agreement = Agreement::kCheck;
  // This rank's caller gave the op up before its turn (its client went
  // away, or its deadline came while the op was queued). It still takes
  // part in the agreement, which then fails the op on every rank with
  // CANCELLED before any data moves: a rank that dropped it alone would
  // leave the others waiting inside it. Only with kCheck.
  bool withdrawn = false;
  // This rank refused the op (a tensor it does not hold, is busy, or does
  // not fit the op) and stands in for it at its seq: no buffers, only the
  // agreement, which fails the op on every rank with FAILED_PRECONDITION
  // before any data moves. Were the seq given back instead, the other ranks
  // would run on to the next seq out of step with this one and abort the
  // communicator, failing every client's ops. Only with kCheck.
  bool refused = false;
};

// How LaunchBatch runs a batch of ops.
struct BatchOptions {
  // One NCCL group (ncclGroupStart/End): one launch for every op; the ops
  // must not depend on each other's results.
  bool aggregate = false;
  // Capture the batch once in a CUDA graph and launch the graph this many
  // times (nccl-tests' -G); 0: no graph.
  int graph_launches = 0;
};

// Completion handle of one launched op.
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual bool IsCompleted() = 0;
  // DEADLINE_EXCEEDED if not complete within `timeout`; the op's status
  // otherwise.
  virtual absl::Status Wait(std::chrono::milliseconds timeout) = 0;
  // Best effort: a backend that cannot abort a running op leaves it to its
  // own timeout.
  virtual void Abort() = 0;
  // Time the backend spent on the op itself (device time for NCCL, host
  // time for Gloo); valid once completed.
  virtual double DeviceMicros() const = 0;
};

// A handle for an op that finished inside Launch.
class CompletedWork : public CommWork {
 public:
  CompletedWork(absl::Status status, double device_us)
      : status_(std::move(status)), device_us_(device_us) {}
  bool IsCompleted() override { return true; }
  absl::Status Wait(std::chrono::milliseconds) override { return status_; }
  void Abort() override {}
  double DeviceMicros() const override { return device_us_; }

 private:
  absl::Status status_;
  double device_us_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "gloo", "nccl".
  virtual std::string name() const = 0;

  // UNIMPLEMENTED, with a message saying what to use instead, for what the
  // backend cannot do; checked at Submit so nothing unsupported is queued.
  virtual absl::Status Supports(OpKind kind, DType dtype,
                                ReduceOp reduce_op) const = 0;

  // OK while usable; after a transport error or timeout the communicator
  // is poisoned (peers may be mid-op) and this says why.
  virtual absl::Status Health() const = 0;

  // Poisons the communicator with `why` and stops what it can: NCCL aborts
  // the communicator, so kernels waiting for a dead peer end and the device
  // is free for the next generation's; Gloo cannot interrupt an op inside
  // its transport, which ends at the op's own timeout. Any thread.
  virtual void Abort(const absl::Status& why) = 0;

  // Errors returned here mean nothing was launched; errors of the op
  // itself come back through the handle.
  virtual absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      const BoundOp& op) = 0;

  // Checks, in one exchange, that every rank runs the same `ops` (those
  // whose agreement is kCheck). Only AgreeingCommunicator checks anything;
  // for a bare backend this is OK. A plan agrees once, then launches its
  // ops as kAgreed.
  virtual absl::Status Agree(const std::vector<BoundOp>& ops) {
    return absl::OkStatus();
  }

  // Several ops of consecutive seqs, as one unit: one handle, complete when
  // every op is (its device time covers them all). Without options every
  // backend has it (by default, Launch of each in turn; NCCL enqueues them
  // between one pair of events); aggregation and graphs are UNIMPLEMENTED
  // where the backend has no such thing (Gloo).
  virtual absl::StatusOr<std::unique_ptr<CommWork>> LaunchBatch(
      const std::vector<BoundOp>& ops, const BatchOptions& options);

  // The host-side exchanges the agreement check runs on: every rank gives
  // `bytes` bytes and gets every rank's in rank order (an all_gather of host
  // memory), or two ranks swap theirs. Collective (resp. pairwise) calls of
  // this communicator, done before the op they vouch for is launched; a
  // backend that enqueues (NCCL) runs them beside its data ops rather than
  // behind them, so that checking op k never waits for op k-1 to finish.
  // DEADLINE_EXCEEDED if a rank does not take part by `deadline`; the
  // backend is then aborted.
  virtual absl::Status AllGatherHost(
      const void* mine, void* all, size_t bytes,
      std::chrono::steady_clock::time_point deadline) = 0;
  virtual absl::Status ExchangeHost(
      int peer, const void* mine, void* theirs, size_t bytes,
      std::chrono::steady_clock::time_point deadline) = 0;

  // The communicator of a subgroup (torch.distributed.new_group). Every rank
  // of this communicator calls it at the same point of its op sequence,
  // members or not (NCCL splits through a collective of the parent), from
  // the thread that launches ops. `members` are ranks of this communicator
  // in the order of the new group's ranks; a rank not among them gets null.
  // `name` tells subgroups apart where the backend rendezvous by key.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Split(
      const std::vector<int>& members, const std::string& name,
      std::chrono::milliseconds timeout) = 0;

  // The communicator of this one's survivors when the ranks `excluded` (of
  // this communicator) are gone, ranks renumbered in order: every survivor
  // calls it, after which this communicator runs nothing more. Faster than
  // a new rendezvous where the backend can do it (ncclCommShrink);
  // UNIMPLEMENTED where it cannot (Gloo), and the caller builds anew.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Shrink(
      const std::vector<int>& excluded, std::chrono::milliseconds timeout) {
    return absl::UnimplementedError(
        absl::StrCat("the ", name(), " backend cannot shrink a communicator"));
  }
};

}  // namespace ccl
