// A plan: consecutive ops of one group that each rank runs back to back at
// the seqs [seq, seq + n), agreed across ranks in one exchange and, unless
// aggregated into one NCCL group, launched one after the other without a
// host round trip between them. Each op has its own result; after the first
// failure the rest are not run.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "server/comm/communicator.h"
#include "server/core/executor.h"
#include "server/core/tensor_store.h"
#include "server/core/work.h"

namespace ccl {

struct PlanOpResult {
  absl::Status status;
  double device_us = 0;
};

class PlanWork final : public Work, public ExecutorTask {
 public:
  // `spec` describes the plan as a whole (group, first seq, generation);
  // `specs` and `ops` are its ops in order, `tensors` every tensor they use.
  PlanWork(int64_t id, OpSpec spec, std::vector<OpSpec> specs,
           std::vector<BoundOp> ops, bool aggregate,
           std::vector<std::shared_ptr<Tensor>> tensors, TensorStore* store);

  const std::vector<OpSpec>& op_specs() const { return specs_; }
  const std::vector<BoundOp>& bound_ops() const { return ops_; }
  // One per op; valid once the work completed.
  std::vector<PlanOpResult> results() const;
  // Op `index`'s result (empty before the work completed).
  std::optional<PlanOpResult> result(size_t index) const;

  // ExecutorTask.
  int64_t seq() const override { return spec().seq; }
  int64_t seq_count() const override {
    return static_cast<int64_t>(ops_.size());
  }
  // The ops' timeouts together: each op waits for its own in turn.
  std::chrono::milliseconds timeout() const override;
  void Start() override;
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(Communicator& comm) override;
  void Complete(absl::Status status, double device_us) override;

 private:
  class Completion;

  const std::vector<OpSpec> specs_;
  const std::vector<BoundOp> ops_;
  const bool aggregate_;
  TensorStore* const store_;
  std::vector<std::shared_ptr<Tensor>> tensors_;

  mutable std::mutex results_mutex_;
  std::vector<PlanOpResult> results_;
};

}  // namespace ccl
