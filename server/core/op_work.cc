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
  // Its client went away before its turn: the peers' clients went away
  // too (the client cancels every rank's call), so none of them runs it.
  if (cancel_requested()) {
    return absl::CancelledError(
        "the client cancelled the op before it started; it was not run");
  }
  return comm.Launch(op_);
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
