#include "server/core/op_work.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace ccl {

OpWork::OpWork(int64_t id, OpSpec spec, BoundOp op,
               std::vector<std::shared_ptr<Tensor>> tensors, TensorStore* store)
    : Work(id, std::move(spec)),
      op_(op),
      store_(store),
      tensors_(std::move(tensors)) {}

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

void OpWork::OnWithdrawn() {
  std::lock_guard<std::mutex> lock(tensors_mutex_);
  if (held_) store_->Release(tensors_, id());
  held_ = false;
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

RefusedTask::RefusedTask(int64_t seq, int64_t seq_count,
                         std::vector<BoundOp> stand_ins)
    : seq_(seq), seq_count_(seq_count), stand_ins_(std::move(stand_ins)) {}

std::chrono::milliseconds RefusedTask::timeout() const {
  std::chrono::milliseconds total{0};
  for (const BoundOp& op : stand_ins_) total += op.timeout;
  return total;
}

bool RefusedTask::involves_every_rank() const {
  for (const BoundOp& op : stand_ins_) {
    if (op.kind != OpKind::kSend && op.kind != OpKind::kRecv) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<CommWork>> RefusedTask::Launch(
    Communicator& comm) {
  absl::Status agreed = comm.Agree(stand_ins_);
  // A refused vote fails every agreement it takes part in; this only
  // guards against running an op this rank holds no buffers for.
  if (agreed.ok()) {
    agreed = absl::InternalError(absl::StrCat("the agreement at seq ", seq_,
                                              " passed a refused op; not run"));
  }
  return agreed;
}

}  // namespace ccl
