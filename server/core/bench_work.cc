#include "server/core/bench_work.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/check/bench_check.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start)
      .count();
}

}  // namespace

BenchWork::BenchWork(int64_t id, OpSpec spec, BoundOp op,
                     std::vector<std::shared_ptr<Tensor>> tensors,
                     BenchOptions options, TensorStore* store)
    : Work(id, std::move(spec)),
      op_(op),
      options_(options),
      store_(store),
      tensors_(std::move(tensors)) {}

BenchResult BenchWork::result() const { return result_; }

void BenchWork::Start() {
  MarkRunning();
  store_->WaitForHostAccess(tensors_);
}

Agreement BenchWork::Repeated() const {
  return op_.agreement == Agreement::kSkip ? Agreement::kSkip
                                           : Agreement::kAgreed;
}

// A bench of 10^6 iterations must not hold its group for hours after its
// client gave up.
absl::Status BenchWork::CheckCancelled() const {
  if (!cancel_requested()) return absl::OkStatus();
  return absl::CancelledError(
      "the client went away; the rest of the bench was not run");
}

absl::StatusOr<std::unique_ptr<CommWork>> BenchWork::Launch(
    Communicator& comm) {
  const Clock::time_point start = Clock::now();
  // Ranks agree on the op once; the timed instances are the op alone.
  for (int i = 0; i < options_.warmup; ++i) {
    CCL_RETURN_IF_ERROR(CheckCancelled());
    CCL_RETURN_IF_ERROR(RunOnce(comm, i == 0 ? op_.agreement : Repeated()));
  }
  CCL_RETURN_IF_ERROR(options_.graph_launches > 0 ? RunGraph(comm)
                                                  : RunTimed(comm));
  if (options_.check) {
    CCL_RETURN_IF_ERROR(CheckCancelled());
    CCL_RETURN_IF_ERROR(RunChecked(comm));
  }
  return std::make_unique<CompletedWork>(absl::OkStatus(), MicrosSince(start));
}

// The timed instances go back to back, as nccl-tests runs them: launched
// in batches of kBatch (one launch call and one pair of events per batch on
// NCCL, so the host never adds to a small op's time), at most two batches
// in flight. `time_us` is nccl-tests' figure (wall time / iters); avg, min
// and max are over the batches' own per-op times (device time on NCCL, the
// ops' host time on Gloo), so min <= avg <= max whatever the load.
absl::Status BenchWork::RunTimed(Communicator& comm) {
  constexpr int kBatch = 64;
  constexpr size_t kBatchesInFlight = 2;
  struct InFlight {
    std::unique_ptr<CommWork> handle;
    int ops = 0;
  };
  std::deque<InFlight> in_flight;
  int completed = 0;
  double total_us = 0;
  auto retire = [&]() -> absl::Status {
    InFlight batch = std::move(in_flight.front());
    in_flight.pop_front();
    CCL_RETURN_IF_ERROR(batch.handle->Wait(op_.timeout * batch.ops));
    const double us = batch.handle->DeviceMicros();
    const double per_op = us / batch.ops;
    if (completed == 0 || per_op < result_.min_us) result_.min_us = per_op;
    if (completed == 0 || per_op > result_.max_us) result_.max_us = per_op;
    total_us += us;
    completed += batch.ops;
    return absl::OkStatus();
  };
  const Clock::time_point t0 = Clock::now();
  for (int launched = 0; launched < options_.iters;) {
    if (absl::Status s = CheckCancelled(); !s.ok()) {
      while (!in_flight.empty()) (void)retire();
      return s;
    }
    const int n = std::min(kBatch, options_.iters - launched);
    std::vector<BoundOp> ops(static_cast<size_t>(n), op_);
    for (int i = 0; i < n; ++i) {
      ops[i].agreement = options_.warmup == 0 && launched + i == 0
                             ? op_.agreement
                             : Repeated();
    }
    auto handle = comm.LaunchBatch(ops, BatchOptions());
    if (!handle.ok()) {
      while (!in_flight.empty()) (void)retire();
      return handle.status();
    }
    in_flight.push_back({*std::move(handle), n});
    launched += n;
    if (in_flight.size() >= kBatchesInFlight) CCL_RETURN_IF_ERROR(retire());
  }
  while (!in_flight.empty()) CCL_RETURN_IF_ERROR(retire());
  if (completed > 0) {
    result_.time_us = MicrosSince(t0) / completed;
    result_.avg_us = total_us / completed;
  }
  return absl::OkStatus();
}

// One graph of `iters` instances, launched graph_launches times; only the
// total is known, so min = avg = max = time.
absl::Status BenchWork::RunGraph(Communicator& comm) {
  if (options_.iters <= 0) return absl::OkStatus();
  if (options_.warmup == 0) {
    CCL_RETURN_IF_ERROR(RunOnce(comm, op_.agreement));
  }
  std::vector<BoundOp> ops(static_cast<size_t>(options_.iters), op_);
  for (BoundOp& op : ops) op.agreement = Repeated();
  BatchOptions batch;
  batch.graph_launches = options_.graph_launches;
  auto handle = comm.LaunchBatch(ops, batch);
  if (!handle.ok()) return handle.status();
  const auto timeout = op_.timeout * std::max(1, options_.graph_launches);
  CCL_RETURN_IF_ERROR((*handle)->Wait(timeout));
  const double per_op =
      (*handle)->DeviceMicros() /
      (static_cast<double>(options_.iters) * options_.graph_launches);
  result_.time_us = result_.avg_us = result_.min_us = result_.max_us = per_op;
  return absl::OkStatus();
}

absl::Status BenchWork::RunChecked(Communicator& comm) {
  std::vector<check::Buffer> buffers;
  for (const auto& tensor : tensors_) {
    buffers.push_back({tensor->data(), tensor->bytes(), tensor->meta().device});
  }
  auto wrong = check::RunChecked(op_, comm.rank(), comm.size(), buffers,
                                 [&] { return RunOnce(comm, Repeated()); });
  if (!wrong.ok()) return wrong.status();
  result_.wrong = *wrong;
  return absl::OkStatus();
}

absl::Status BenchWork::RunOnce(Communicator& comm, Agreement agreement) {
  BoundOp op = op_;
  op.agreement = agreement;
  auto handle = comm.Launch(op);
  if (!handle.ok()) return handle.status();
  return (*handle)->Wait(op_.timeout);
}

void BenchWork::Complete(absl::Status status, double device_us) {
  store_->Release(tensors_, id());
  tensors_.clear();
  if (!status.ok()) {
    status = absl::Status(
        status.code(),
        absl::StrCat("bench of ", DescribeOp(spec()), ": ", status.message()));
  }
  Finish(std::move(status), device_us, /*annotate=*/false);
}

}  // namespace ccl
