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

  // Called by Submit once Hold succeeded, so Complete releases the hold.
  void MarkHeld();
  // What the backend runs (dtype and count matter to the flight recorder).
  const BoundOp& bound() const { return op_; }

 private:
  const BoundOp op_;
  TensorStore* const store_;

  std::mutex tensors_mutex_;
  std::vector<std::shared_ptr<Tensor>> tensors_;
  bool held_ = false;
};

// What a rank runs at the seq of an op it refused (RefusalStandIn): the
// op's agreement, which fails it on every rank. No Work: the refusal was
// already the caller's answer.
class RefusedOpTask final : public ExecutorTask {
 public:
  explicit RefusedOpTask(BoundOp stand_in) : op_(stand_in) {}
  int64_t seq() const override { return op_.seq; }
  std::chrono::milliseconds timeout() const override { return op_.timeout; }
  bool involves_every_rank() const override {
    return op_.kind != OpKind::kSend && op_.kind != OpKind::kRecv;
  }
  void Start() override {}
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      Communicator& comm) override {
    return comm.Launch(op_);
  }
  void Complete(absl::Status, double) override {}

 private:
  const BoundOp op_;
};

}  // namespace ccl
