// The Work of one submitted op: holds its tensors (busy in the store) from
// Submit until it completes, and is what the group's executor runs.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/comm/communicator.h"
#include "server/core/executor.h"
#include "server/core/tensor_store.h"
#include "server/core/work.h"

namespace ccl {

class OpWork final : public Work, public ExecutorTask {
 public:
  OpWork(int64_t id, OpSpec spec, BoundOp op,
         std::vector<std::shared_ptr<Tensor>> tensors, TensorStore* store);

  // ExecutorTask.
  int64_t seq() const override { return spec().seq; }
  std::chrono::milliseconds timeout() const override { return op_.timeout; }
  bool involves_every_rank() const override {
    return op_.kind != OpKind::kSend && op_.kind != OpKind::kRecv &&
           op_.kind != OpKind::kNop;
  }
  void Start() override;
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(Communicator& comm) override;
  void Complete(absl::Status status, double device_us) override;

  // Ranks agree before the op runs, so they can drop it together.
  bool withdrawable() const override {
    return op_.agreement == Agreement::kCheck;
  }

  // What the backend runs (dtype and count matter to the flight recorder).
  const BoundOp& bound() const { return op_; }

 protected:
  // Its tensors stop being busy at once: a withdrawn op only takes part in
  // the agreement, which fails it on every rank before any data moves, so
  // its caller, told "withdrawn", may free or write them while it still
  // waits for its turn. Their memory stays alive (tensors_) until then,
  // outside the store's quota once freed.
  void OnWithdrawn() override;

 private:
  const BoundOp op_;
  TensorStore* const store_;

  std::mutex tensors_mutex_;
  std::vector<std::shared_ptr<Tensor>> tensors_;
  // The core holds the tensors before the work can start or be withdrawn
  // (WorkerCoreImpl::Admit), and drops a work whose hold it was refused
  // unseen; false once released, so a withdrawn work's Complete releases
  // nothing twice.
  bool held_ = true;
};

// What a rank runs at the seqs of a request it refused (RefusalStandIns):
// the request's agreement, in the one exchange its ops take on the ranks
// that accepted it (Communicator::Agree, as a plan's), which fails it on
// every rank. No Work: the refusal was already the caller's answer.
class RefusedTask final : public ExecutorTask {
 public:
  RefusedTask(int64_t seq, int64_t seq_count, std::vector<BoundOp> stand_ins);
  int64_t seq() const override { return seq_; }
  int64_t seq_count() const override { return seq_count_; }
  std::chrono::milliseconds timeout() const override;
  bool involves_every_rank() const override;
  void Start() override {}
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(Communicator& comm) override;
  void Complete(absl::Status, double) override {}

 private:
  const int64_t seq_;
  const int64_t seq_count_;
  const std::vector<BoundOp> stand_ins_;
};

}  // namespace ccl
