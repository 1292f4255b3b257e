#include "server/core/op_work.h"

#include <utility>

namespace ccl {

OpWork::OpWork(int64_t id, OpSpec spec, BoundOp op,
               std::vector<std::shared_ptr<Tensor>> tensors, TensorStore* store)
    : Work(id, std::move(spec)),
      op_(op),
      store_(store),
      tensors_(std::move(tensors)) {}

void OpWork::MarkHeld() {
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  held_ = true;
}

void OpWork::Start() {
  MarkRunning();
  std::vector<std::shared_ptr<Tensor>> tensors;
  {
    std::lock_guard<std::mutex> lock(tensors_mutex_);
    tensors = tensors_;
  }
  store_->WaitForHostAccess(tensors);
}

absl::StatusOr<std::unique_ptr<CommWork>> OpWork::Launch(Communicator& comm) {
  if (!cancel_requested() || !withdrawable()) return comm.Launch(op_);
  // Given up before its turn. The other ranks may not know yet (their
  // calls end a moment later, or not at all): the agreement tells them, and
  // every rank fails the op with CANCELLED before any data moves.
  BoundOp op = op_;
  op.withdrawn = true;
  return comm.Launch(op);
}

void OpWork::Complete(absl::Status status, double device_us) {
  {
    std::lock_guard<std::mutex> lock(tensors_mutex_);
    if (held_) store_->Release(tensors_, id());
    held_ = false;
    tensors_.clear();
  }
  Finish(std::move(status), device_us);
}

}  // namespace ccl
