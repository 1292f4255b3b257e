#include "server/core/plan_work.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ccl {

// The plan's handle: waits for each op in order and records its result.
class PlanWork::Completion final : public CommWork {
 public:
  Completion(PlanWork* plan, std::vector<std::unique_ptr<CommWork>> parts,
             absl::Status launch_error)
      : plan_(plan),
        parts_(std::move(parts)),
        launch_error_(std::move(launch_error)) {}

  bool IsCompleted() override {
    // The last op first: while it runs the plan does, and once it is done
    // a backend that runs a group's ops in order (NCCL's stream) knows the
    // others are without asking each.
    if (!parts_.empty() && !parts_.back()->IsCompleted()) return false;
    return std::all_of(parts_.begin(), parts_.end(),
                       [](auto& part) { return part->IsCompleted(); });
  }

  absl::Status Wait(std::chrono::milliseconds) override {
    if (waited_) return status_;
    waited_ = true;
    std::vector<PlanOpResult> results(plan_->ops_.size());
    size_t failed_at = results.size();
    for (size_t i = 0; i < parts_.size(); ++i) {
      if (failed_at < results.size()) {
        // Launched behind a failed op: bounded by the backend's abort.
        (void)parts_[i]->Wait(plan_->ops_[i].timeout);
        results[i].status = NotRun(failed_at);
        continue;
      }
      results[i].status = parts_[i]->Wait(plan_->ops_[i].timeout);
      results[i].device_us = parts_[i]->DeviceMicros();
      device_us_ += results[i].device_us;
      if (!results[i].status.ok()) failed_at = i;
    }
    if (parts_.size() < results.size() && failed_at == results.size()) {
      // Op parts_.size() was refused at launch.
      failed_at = parts_.size();
      results[failed_at].status = launch_error_;
    }
    for (size_t i = std::min(failed_at + 1, results.size()); i < results.size();
         ++i) {
      if (i >= parts_.size()) results[i].status = NotRun(failed_at);
    }
    if (failed_at < results.size()) {
      status_ = absl::Status(
          results[failed_at].status.code(),
          absl::StrCat("op ", failed_at, " of the plan (",
                       DescribeOp(plan_->specs_[failed_at]),
                       ") failed: ", results[failed_at].status.message()));
    }
    std::lock_guard<std::mutex> lock(plan_->results_mutex_);
    plan_->results_ = std::move(results);
    return status_;
  }

  void Abort() override {
    for (auto& part : parts_) part->Abort();
  }
  double DeviceMicros() const override { return device_us_; }

 private:
  absl::Status NotRun(size_t failed_at) const {
    return absl::FailedPreconditionError(absl::StrCat(
        "not run: op ", failed_at, " of the plan (",
        DescribeOp(plan_->specs_[failed_at]), ") failed before it"));
  }

  PlanWork* const plan_;
  std::vector<std::unique_ptr<CommWork>> parts_;
  const absl::Status launch_error_;
  bool waited_ = false;
  absl::Status status_;
  double device_us_ = 0;
};

PlanWork::PlanWork(int64_t id, OpSpec spec, std::vector<OpSpec> specs,
                   std::vector<BoundOp> ops, bool aggregate,
                   std::vector<std::shared_ptr<Tensor>> tensors,
                   TensorStore* store)
    : Work(id, std::move(spec)),
      specs_(std::move(specs)),
      ops_(std::move(ops)),
      aggregate_(aggregate),
      store_(store),
      tensors_(std::move(tensors)) {}

std::vector<PlanOpResult> PlanWork::results() const {
  std::lock_guard<std::mutex> lock(results_mutex_);
  return results_;
}

std::optional<PlanOpResult> PlanWork::result(size_t index) const {
  std::lock_guard<std::mutex> lock(results_mutex_);
  if (index >= results_.size()) return std::nullopt;
  return results_[index];
}

std::chrono::milliseconds PlanWork::timeout() const {
  std::chrono::milliseconds total{0};
  for (const BoundOp& op : ops_) total += op.timeout;
  return total;
}

void PlanWork::Start() {
  MarkRunning();
  store_->WaitForHostAccess(tensors_);
}

absl::StatusOr<std::unique_ptr<CommWork>> PlanWork::Launch(Communicator& comm) {
  // One agreement for the whole plan.
  if (absl::Status agreed = comm.Agree(ops_); !agreed.ok()) return agreed;
  std::vector<BoundOp> ops = ops_;
  for (BoundOp& op : ops) {
    if (op.agreement == Agreement::kCheck) op.agreement = Agreement::kAgreed;
  }
  if (aggregate_) {
    BatchOptions options;
    options.aggregate = true;
    auto batch = comm.LaunchBatch(ops, options);
    if (!batch.ok()) return batch.status();
    // One launch: every op shares its outcome.
    std::vector<PlanOpResult> results(ops.size());
    absl::Status status = (*batch)->Wait(timeout());
    for (auto& result : results) result.status = status;
    {
      std::lock_guard<std::mutex> lock(results_mutex_);
      results_ = results;
    }
    return std::unique_ptr<CommWork>(
        new CompletedWork(status, (*batch)->DeviceMicros()));
  }
  std::vector<std::unique_ptr<CommWork>> parts;
  absl::Status launch_error;
  for (const BoundOp& op : ops) {
    auto handle = comm.Launch(op);
    if (!handle.ok()) {
      launch_error = handle.status();
      break;
    }
    parts.push_back(*std::move(handle));
  }
  if (parts.empty() && !launch_error.ok()) return launch_error;
  return std::unique_ptr<CommWork>(
      new Completion(this, std::move(parts), std::move(launch_error)));
}

void PlanWork::Complete(absl::Status status, double device_us) {
  {
    std::lock_guard<std::mutex> lock(results_mutex_);
    // Refused or cancelled before anything ran: every op shares the reason.
    if (results_.empty()) {
      results_.resize(ops_.size());
      for (auto& result : results_) result.status = status;
    }
  }
  store_->Release(tensors_, id());
  tensors_.clear();
  Finish(std::move(status), device_us, /*annotate=*/false);
}

}  // namespace ccl
