#include "server/comm/communicator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

// The handles of a batch launched op by op: complete when the last is.
class SequenceWork final : public CommWork {
 public:
  explicit SequenceWork(std::vector<std::unique_ptr<CommWork>> parts)
      : parts_(std::move(parts)) {}

  bool IsCompleted() override {
    return std::all_of(parts_.begin(), parts_.end(),
                       [](auto& part) { return part->IsCompleted(); });
  }
  absl::Status Wait(std::chrono::milliseconds timeout) override {
    const Clock::time_point deadline = Clock::now() + timeout;
    for (auto& part : parts_) {
      const auto left =
          std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                       deadline - Clock::now()),
                   std::chrono::milliseconds(0));
      if (absl::Status s = part->Wait(left); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  void Abort() override {
    for (auto& part : parts_) part->Abort();
  }
  double DeviceMicros() const override {
    double total = 0;
    for (const auto& part : parts_) total += part->DeviceMicros();
    return total;
  }

 private:
  std::vector<std::unique_ptr<CommWork>> parts_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CommWork>> Communicator::LaunchBatch(
    const std::vector<BoundOp>& ops, const BatchOptions& options) {
  if (options.aggregate) {
    return absl::UnimplementedError(absl::StrCat(
        "the ", name(), " backend cannot aggregate ops into one launch"));
  }
  if (options.graph_launches > 0) {
    return absl::UnimplementedError(
        absl::StrCat("the ", name(), " backend has no CUDA graphs"));
  }
  std::vector<std::unique_ptr<CommWork>> parts;
  parts.reserve(ops.size());
  for (const BoundOp& op : ops) {
    auto launched = Launch(op);
    if (!launched.ok()) {
      // What is in flight finishes (or times out) before the error returns,
      // so nothing still uses the buffers when the caller lets go of them.
      for (auto& part : parts) (void)part->Wait(op.timeout);
      return launched.status();
    }
    parts.push_back(*std::move(launched));
  }
  return std::unique_ptr<CommWork>(new SequenceWork(std::move(parts)));
}

}  // namespace ccl
