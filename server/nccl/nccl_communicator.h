// The NCCL backend: one non-blocking NCCL communicator and one CUDA stream
// per group. Launch enqueues the op on the stream between two CUDA events
// and returns a handle on them; the handle polls the stop event and the
// communicator's async error (never blocking in NCCL or CUDA), and aborts
// the communicator when an op times out. After an abort or an async error
// the communicator is poisoned and Health says why.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/communicator.h"
#include "server/kv_store.h"

namespace ccl {

class NcclCommunicator final : public Communicator {
 public:
  // The unique ids go through `store` as unique_id_plan.h describes: rank 0
  // posts one under nccl::UniqueIdKey(prefix), or, above
  // $CCL_NCCL_RANKS_PER_ROOT ranks (default 128), one rank per block posts
  // its block's id and the world inits with ncclCommInitRankScalable; the
  // others wait for them up to `timeout`. Initialisation (non-blocking) is
  // polled up to `timeout`, then aborted.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      int rank, int size, int device, const std::string& prefix, KvStore& store,
      std::chrono::milliseconds timeout);
  ~NcclCommunicator() override;

  // ncclCommSplit of this communicator, non-blocking like the parent and
  // polled up to `timeout`. A collective of the parent: every one of its
  // ranks calls it, in the same place in its sequence of ops. Members pass
  // color 0 and their group rank as `key` and get the child; the others
  // pass NCCL_SPLIT_NOCOLOR and get null.
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> Split(
      int color, int key, std::chrono::milliseconds timeout);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  absl::Status Supports(OpKind kind, DType dtype,
                        ReduceOp reduce_op) const override;
  absl::Status Health() const override;
  void Abort(const absl::Status& why) override { AbortComm(why); }
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(const BoundOp& op) override;

  // For handles: the communicator's async error (ncclInProgress counts as
  // fine), poisoning and aborting.
  absl::Status AsyncError();
  void Poison(absl::Status why);
  void AbortComm(absl::Status why);
  int device() const { return device_; }

 private:
  NcclCommunicator(int rank, int size, int device, ncclComm_t comm,
                   cudaStream_t stream, void* barrier_buf);
  // Gives an initialised comm its stream and barrier buffer; aborts the
  // comm on failure.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Wrap(
      int rank, int size, int device, ncclComm_t comm);

  absl::Status Enqueue(const BoundOp& op, ncclDataType_t dtype,
                       std::chrono::steady_clock::time_point deadline);
  // Waits out ncclInProgress of the last call on a non-blocking comm.
  absl::Status Settle(ncclResult_t result, const char* what,
                      std::chrono::steady_clock::time_point deadline);
  absl::StatusOr<void*> Scratch(size_t bytes);
  // Ranks exchange op fingerprints (an all_gather of 32 bytes, or a
  // send/recv pair for point to point) and compare them on the host before
  // the op is enqueued: different collectives at one seq would otherwise
  // hang inside NCCL, and mismatched sizes would corrupt memory.
  // INVALID_ARGUMENT on a mismatch (nothing enqueued, the communicator
  // stays usable); DEADLINE_EXCEEDED, with the communicator aborted, when a
  // rank never arrives.
  absl::Status Agree(const BoundOp& op,
                     std::chrono::steady_clock::time_point deadline);
  // Waits (polling) up to `limit` for the stream's work to finish.
  void DrainStream(std::chrono::milliseconds limit);

  const int rank_;
  const int size_;
  const int device_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  void* barrier_buf_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  // Agreement buffers, made on first use: size_ + 1 fingerprints each
  // (everyone's, then this rank's own as the source).
  void* agree_device_ = nullptr;
  void* agree_host_ = nullptr;  // pinned
  cudaEvent_t agree_done_ = nullptr;

  // Serialises NCCL calls on comm_ with its abort.
  std::mutex comm_mutex_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  absl::Status broken_;
};

}  // namespace ccl
