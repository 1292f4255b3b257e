#include "server/core/bench_work.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/elapsed.h"
#include "common/status_macros.h"
#include "server/check/bench_check.h"
#include "server/comm/op_fingerprint.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

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
// caller gave up, and ranks must stop it at the same instance: one that
// stopped alone would leave the others inside the next instance until its
// timeout, with a broken communicator after. So at checkpoints every rank
// says whether it wants to stop (its client went away, its call's deadline
// is near, it was withdrawn before it started) and how many units (an
// instance, a batch) it proposes until the next checkpoint (about kEvery of
// work); all stop if any wants to, and all take the smallest proposal, so
// every rank checks at the same units. A checkpoint is one small host
// exchange (the agreement's), every kEvery or so: nothing next to the
// bench's own time. A NOP rank (point to point benches) has no peer to
// agree with and stops on its own.
class BenchWork::StopPoints {
 public:
  StopPoints(BenchWork& bench, Communicator& comm)
      : bench_(bench), comm_(comm), last_(Clock::now()) {}

  // Starts a phase (warm-up, timed, checked) with a checkpoint.
  absl::Status Start(const char* phase) {
    phase_ = phase;
    done_ = 0;
    since_ = 0;
    until_next_ = 0;
    last_ = Clock::now();
    return Exchange();
  }

  // Instances every rank may run before the next checkpoint; a batch is cut
  // to it, so that all ranks reach the checkpoint at the same instance.
  int64_t until_next() const { return until_next_; }

  // `instances` more done; a checkpoint when the agreed count is reached.
  absl::Status After(int64_t instances) {
    done_ += instances;
    since_ += instances;
    until_next_ -= instances;
    if (until_next_ > 0) return absl::OkStatus();
    return Exchange();
  }

 private:
  static constexpr auto kEvery = std::chrono::milliseconds(250);
  static constexpr int64_t kMostBetween = int64_t{1} << 20;
  enum Reason : int32_t { kGoOn = 0, kWithdrawn, kCancelled, kDeadline };

  absl::Status Exchange() {
    const Clock::time_point now = Clock::now();
    // Instances per kEvery at the pace since the last checkpoint; one at
    // the start of a phase, when there is no pace yet.
    int64_t next = 1;
    Clock::duration ahead = kEvery;
    if (since_ > 0) {
      const Clock::duration per_instance = (now - last_) / since_;
      next = per_instance.count() <= 0
                 ? kMostBetween
                 : std::clamp<int64_t>(kEvery / per_instance, 1, kMostBetween);
      ahead = std::max<Clock::duration>(kEvery, per_instance * next);
    }
    Reason reason = kGoOn;
    if (bench_.cancel_requested()) {
      reason = started_ ? kCancelled : kWithdrawn;
    } else if (bench_.call_deadline() != Clock::time_point::max() &&
               now + ahead >= bench_.call_deadline()) {
      // The next checkpoint would come after the call's deadline.
      reason = kDeadline;
    }
    // The vote rides in the op's fingerprint, exchanged as the agreement
    // exchanges it: the same size whatever a peer runs at this seq (Gloo
    // ends the process on a peer's larger message), a peer's plain op reads
    // a stop as a withdrawal (OpFingerprint::withdrawn) and drops its op,
    // and a peer running another op is caught here.
    OpFingerprint mine = FingerprintOf(bench_.op_, comm_.rank());
    mine.withdrawn = reason;
    mine.reserved = static_cast<int32_t>(next);
    std::vector<OpFingerprint> all{mine};
    const OpKind kind = bench_.op_.kind;
    const int64_t seq = bench_.spec().seq;
    const auto deadline =
        now + std::max(bench_.op_.timeout, std::chrono::milliseconds(1));
    // A rank that refused the bench (a tensor it lacks) stands in for it
    // with one exchange, its vote kRefusedVote: the bench fails here,
    // naming that rank, before its op is compared with the bench's.
    if (kind == OpKind::kSend || kind == OpKind::kRecv) {
      all.resize(2);
      CCL_RETURN_IF_ERROR(comm_.ExchangeHost(bench_.op_.peer, &mine, &all[1],
                                             sizeof(OpFingerprint), deadline));
      CCL_RETURN_IF_ERROR(JudgePointToPoint(comm_, seq, mine, all[1],
                                            Withdrawals::kRefusalsOnly));
    } else if (kind != OpKind::kNop) {
      all.resize(static_cast<size_t>(comm_.size()));
      CCL_RETURN_IF_ERROR(comm_.AllGatherHost(&mine, all.data(),
                                              sizeof(OpFingerprint), deadline));
      CCL_RETURN_IF_ERROR(
          JudgeCollective(comm_, seq, all, Withdrawals::kRefusalsOnly));
    }
    started_ = true;
    last_ = now;
    since_ = 0;
    until_next_ = kMostBetween;
    const OpFingerprint* stopper = nullptr;
    int32_t stopper_reason = kGoOn;
    for (const OpFingerprint& vote : all) {
      // A peer's plain op (reserved 0) proposes nothing.
      if (vote.reserved > 0) {
        until_next_ = std::min<int64_t>(until_next_, vote.reserved);
      }
      // Any non-zero withdrawn stops; a plain op's withdrawal is kWithdrawn.
      const int32_t why =
          vote.withdrawn == 0
              ? kGoOn
              : std::clamp<int32_t>(vote.withdrawn, kWithdrawn, kDeadline);
      if (why != kGoOn && (stopper == nullptr || why > stopper_reason)) {
        stopper = &vote;
        stopper_reason = why;
      }
    }
    if (stopper == nullptr) return absl::OkStatus();
    const std::string where =
        absl::StrCat("stopped after ", done_, " ", phase_, " instance",
                     done_ == 1 ? "" : "s", ": ");
    const std::string together =
        "; every rank stopped at the same instance, so the group is free";
    switch (stopper_reason) {
      case kDeadline:
        return absl::DeadlineExceededError(
            absl::StrCat(where, "the call at rank ", stopper->rank,
                         " would have reached its deadline before the next "
                         "checkpoint",
                         together));
      case kWithdrawn:
        return absl::CancelledError(absl::StrCat(
            where, "rank ", stopper->rank,
            " gave it up before it started (its call ended)", together));
      default:
        return absl::CancelledError(absl::StrCat(where, "the client of rank ",
                                                 stopper->rank, " went away",
                                                 together));
    }
  }

  BenchWork& bench_;
  Communicator& comm_;
  Clock::time_point last_;
  int64_t since_ = 0;
  int64_t until_next_ = 0;
  int64_t done_ = 0;
  bool started_ = false;
  const char* phase_ = "warm-up";
};

absl::StatusOr<std::unique_ptr<CommWork>> BenchWork::Launch(
    Communicator& comm) {
  const Clock::time_point start = Clock::now();
  StopPoints stops(*this, comm);
  // Ranks agree on the op once; the timed instances are the op alone.
  CCL_RETURN_IF_ERROR(stops.Start("warm-up"));
  for (int i = 0; i < options_.warmup; ++i) {
    CCL_RETURN_IF_ERROR(RunOnce(comm, i == 0 ? op_.agreement : Repeated()));
    if (i + 1 < options_.warmup) CCL_RETURN_IF_ERROR(stops.After(1));
  }
  if (options_.graph_launches > 0) {
    // A graph runs as one launch (NCCL): it is not stopped inside.
    CCL_RETURN_IF_ERROR(stops.Start("timed"));
    CCL_RETURN_IF_ERROR(RunGraph(comm));
  } else {
    CCL_RETURN_IF_ERROR(RunTimed(comm, stops));
  }
  if (options_.check) {
    CCL_RETURN_IF_ERROR(stops.Start("checked"));
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
absl::Status BenchWork::RunTimed(Communicator& comm, StopPoints& stops) {
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
  auto drain = [&] {
    while (!in_flight.empty()) (void)retire();
  };
  CCL_RETURN_IF_ERROR(stops.Start("timed"));
  const Clock::time_point t0 = Clock::now();
  for (int launched = 0; launched < options_.iters;) {
    const int n = static_cast<int>(std::min<int64_t>(
        {kBatch, options_.iters - launched, stops.until_next()}));
    std::vector<BoundOp> ops(static_cast<size_t>(n), op_);
    for (int i = 0; i < n; ++i) {
      ops[i].agreement = options_.warmup == 0 && launched + i == 0
                             ? op_.agreement
                             : Repeated();
    }
    auto handle = comm.LaunchBatch(ops, BatchOptions());
    if (!handle.ok()) {
      drain();
      return handle.status();
    }
    in_flight.push_back({*std::move(handle), n});
    launched += n;
    if (in_flight.size() >= kBatchesInFlight) CCL_RETURN_IF_ERROR(retire());
    if (launched < options_.iters) {
      // A checkpoint paces the next one by the time since the last, which
      // must be the device's: on NCCL a launch returns at once, so with
      // batches still in flight the pace looked hundreds of times too fast
      // and the next checkpoint came long after the call's deadline (a
      // 256 KiB all_reduce on four simulated hosts). The batches finish
      // first; one pause per checkpoint (about 250 ms) costs nothing.
      if (n >= stops.until_next()) {
        while (!in_flight.empty()) CCL_RETURN_IF_ERROR(retire());
      }
      if (absl::Status s = stops.After(n); !s.ok()) {
        drain();
        return s;
      }
    }
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

void BenchWork::OnWithdrawn() { store_->Release(tensors_, id()); }

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
