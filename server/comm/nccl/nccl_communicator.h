// The NCCL backend. One group is three NCCL communicators on one device, each
// with its own stream, because NCCL makes us choose per communicator between
// an enqueue that can be interrupted and one that is fast:
//
//   control  non-blocking. Created first, bounded by the rendezvous timeout
//            and abortable at any point; the parent of every split (the two
//            lanes below, subgroups) and the carrier of the point-to-point
//            agreement exchange, whose first use with a peer connects them.
//   data     blocking, split from control: every collective and send/recv
//            the user asked for. A non-blocking communicator starts a thread
//            for every ncclGroupEnd (NCCL's group.cc), which measured
//            ~60-70 us per enqueue on 2 x H200 against ~8 us blocking
//            (bench/nccl_launch_latency); blocking is what makes small ops
//            as fast as nccl-tests. A blocking call is only safe while it
//            cannot wait for a peer on the host, so collectives connect when
//            the lane is made (NCCL_RUNTIME_CONNECT=0) and a peer's first
//            send/recv on this lane happens only after the control lane saw
//            that peer take part in the same op.
//   agree    blocking, one channel: the collective agreement exchange, so
//            checking op k runs beside op k-1 on the data lane instead of
//            queueing behind it.
//
// Launch enqueues on the data stream between two CUDA events (from a pool)
// and returns a handle that polls the stop event and the communicators'
// async errors, never blocking in NCCL or CUDA, and aborts every lane when an
// op passes its deadline (PyTorch's watchdog, per op). After an abort or an
// async error the communicator is poisoned and Health says why.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/comm/communicator.h"
#include "server/comm/kv_store.h"

namespace ccl {

// What a launch is called in its errors. A single op's name is worded only
// when an error reports it: Launch runs once per op of a plan, and a name
// formatted per op was an allocation per op.
class NcclWorkLabel {
 public:
  explicit NcclWorkLabel(std::string text) : text_(std::move(text)) {}
  NcclWorkLabel(OpKind kind, int64_t seq, int rank, int size)
      : op_(true), kind_(kind), seq_(seq), rank_(rank), size_(size) {}
  std::string Text() const;

 private:
  std::string text_;
  bool op_ = false;
  OpKind kind_ = OpKind::kNop;
  int64_t seq_ = 0;
  int rank_ = 0;
  int size_ = 0;
};

class NcclCommunicator final : public Communicator {
 public:
  using Clock = std::chrono::steady_clock;

  // The unique ids go through `store` as unique_id_plan.h describes: rank 0
  // posts one under nccl::UniqueIdKey(prefix), or, above
  // $CCL_NCCL_RANKS_PER_ROOT ranks (default 128), one rank per block posts
  // its block's id and the world inits with ncclCommInitRankScalable; the
  // others wait for them up to `timeout`. Initialisation and the lanes'
  // splits are polled up to `timeout`, then aborted.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      int rank, int size, int device, const std::string& prefix, KvStore& store,
      std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  absl::Status Supports(OpKind kind, DType dtype,
                        ReduceOp reduce_op) const override;
  absl::Status Health() const override;
  // Lets go of every lane, the control lane too: the communicator is
  // replaced or given up. (AbortComm, for an op that failed, keeps the
  // control lane for a --elastic shrink.)
  void Abort(const absl::Status& why) override;
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(const BoundOp& op) override;
  absl::StatusOr<std::unique_ptr<CommWork>> LaunchBatch(
      const std::vector<BoundOp>& ops, const BatchOptions& options) override;
  absl::Status AllGatherHost(const void* mine, void* all, size_t bytes,
                             Clock::time_point deadline) override;
  absl::Status ExchangeHost(int peer, const void* mine, void* theirs,
                            size_t bytes, Clock::time_point deadline) override;
  // ncclCommSplit of the control lane (every rank of this communicator
  // takes part); members then make their own data and agree lanes.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(
      const std::vector<int>& members, const std::string& name,
      std::chrono::milliseconds timeout) override;
  // ncclCommShrink of the control lane (NCCL_SHRINK_ABORT), then new lanes.
  absl::StatusOr<std::unique_ptr<Communicator>> Shrink(
      const std::vector<int>& excluded,
      std::chrono::milliseconds timeout) override;

  // For handles: the first error of any lane (ncclInProgress counts as
  // fine), poisoning and aborting.
  absl::Status AsyncError();
  void AbortComm(absl::Status why);
  int device() const { return device_; }

  // CUDA events for op handles, reused: creating two per op costs more than
  // a small op's enqueue.
  absl::StatusOr<cudaEvent_t> TakeEvent();
  void ReturnEvent(cudaEvent_t event);
  // An op's pair back at once. `completed`: its stop event was seen
  // complete, so both are (the start was recorded before it on the same
  // stream) and need no query each, which cost more than the op's enqueue
  // in a plan of small ops.
  void ReturnEvents(cudaEvent_t start, cudaEvent_t stop, bool completed);
  // Launches on the data lane's stream are numbered in stream order (from
  // 1, under comm_mutex_), and the highest one whose stop event was seen
  // complete is kept: every launch at or below it is complete too, without
  // a query of its own (a query costs about what a small op's enqueue does,
  // and a plan's thousands of ops would each pay one).
  int64_t CompletedThrough() const { return completed_through_.load(); }
  void SawCompleted(int64_t launch);

 private:
  // One NCCL communicator and its stream.
  struct Lane {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };

  NcclCommunicator(int rank, int size, int device, Lane control, Lane data,
                   Lane agree, void* scratch64);
  // Splits `parent` into the data and agree lanes of a group of `size`, and
  // wraps the three. Aborts `control` (and whatever it made) on failure.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> FromControl(
      int rank, int size, int device, ncclComm_t control,
      std::chrono::milliseconds timeout);
  // A communicator over `child` (a split or shrink's control lane) on
  // `device`, its rank and size read from NCCL; errors name `where`.
  static absl::StatusOr<std::unique_ptr<Communicator>> AdoptChild(
      ncclComm_t child, int device, const std::string& where,
      Clock::time_point deadline);
  // ncclCommSplit of `parent` (non-blocking), polled until parent and child
  // are ready or `deadline`. Null for a rank with color NCCL_SPLIT_NOCOLOR.
  static absl::StatusOr<ncclComm_t> SplitComm(ncclComm_t parent, int color,
                                              int key, ncclConfig_t config,
                                              Clock::time_point deadline);
  // The child made by `make` (a split or a shrink of `parent`), polled
  // until ready or `deadline`. Null only if `none_expected`.
  static absl::StatusOr<ncclComm_t> ChildComm(
      ncclComm_t parent, const char* what,
      const std::function<ncclResult_t(ncclComm_t*)>& make, bool none_expected,
      Clock::time_point deadline);
  // Aborts the data and agree lanes once. Caller holds comm_mutex_.
  void AbortLanesLocked();

  // Enqueues `op` on the data lane. Caller holds comm_mutex_.
  absl::Status Enqueue(const BoundOp& op, ncclDataType_t dtype);
  // Makes sure the data lane's first send/recv with `peer` cannot wait for
  // it on the host: the control lane exchanges a token with it first.
  absl::Status ReachPeer(int peer, Clock::time_point deadline);
  // ReachPeer for every peer `ops` exchange with point to point inside NCCL:
  // send/recv's peer, and gather's, scatter's and all_to_all's, which NCCL
  // runs as sends and receives that connect at their first use (unlike the
  // ring and tree collectives, connected when the lane is made). Without
  // it, a gather whose peer had died blocked its launch in NCCL's socket
  // connect for about a minute, past the op's own timeout. In ascending
  // peer order, which every rank shares, so no two ranks wait on each other.
  absl::Status ReachPeersOf(std::span<const BoundOp> ops,
                            Clock::time_point deadline);
  // The exchange of ExchangeHost on the control lane, and of AllGatherHost
  // on the agree lane: copies in, NCCL call(s), copies out, waited for on an
  // event without holding comm_mutex_ so an abort can interrupt it.
  absl::Status ExchangeOn(Lane& lane, bool p2p, int peer, const void* mine,
                          void* out, size_t bytes, Clock::time_point deadline);
  absl::StatusOr<void*> Scratch(size_t bytes);
  absl::StatusOr<std::unique_ptr<CommWork>> Handle(
      NcclWorkLabel what, const std::function<absl::Status()>& enqueue);
  void Poison(absl::Status why);
  // Waits (polling) up to `limit` for the data stream's work to finish.
  void DrainStream(std::chrono::milliseconds limit);

  const int rank_;
  const int size_;
  const int device_;
  Lane control_;
  Lane data_;
  Lane agree_;
  // 64 device bytes for barriers.
  void* barrier_buf_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  // Exchange buffers, grown on demand: device and pinned host.
  void* exchange_device_ = nullptr;
  void* exchange_host_ = nullptr;
  size_t exchange_bytes_ = 0;
  cudaEvent_t exchange_done_ = nullptr;
  // Buffers a larger one replaced, freed with the communicator: work
  // already on a stream may still use them, and waiting for it under
  // comm_mutex_ could wait forever behind an op whose peer is gone while
  // the abort that would end that op waits for the lock.
  std::vector<void*> retired_device_;
  std::vector<void*> retired_host_;
  // Peers the data lane has a send/recv connection with.
  std::set<int> reached_peers_;

  // Serialises NCCL calls on every lane with their abort.
  std::mutex comm_mutex_;
  // The data and agree lanes were aborted: no op runs any more.
  std::atomic<bool> aborted_{false};
  // The control lane was aborted or handed to a shrink.
  bool control_released_ = false;
  mutable std::mutex mutex_;
  absl::Status broken_;
  std::mutex events_mutex_;
  std::vector<cudaEvent_t> free_events_;
  int64_t launches_ = 0;  // guarded by comm_mutex_
  std::atomic<int64_t> completed_through_{0};
};

}  // namespace ccl
