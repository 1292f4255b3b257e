// Creating a subgroup, as work of the world's executor.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/comm/communicator.h"
#include "server/core/executor.h"
#include "server/core/work.h"

namespace ccl {

// CreateGroup runs on the world executor at a world seq, so every rank splits
// at the same point of the world's op sequence. `make` builds this rank's
// communicator of the group (null on a non-member) within the time it is
// given, and `done` registers it, both on the world's launch thread.
//
// The split is bounded by its call's deadline (Work::call_deadline), not
// only by the timeout it was created with: a split that waited behind
// earlier world seqs (a rank stopped mid-op, a seq its client never sent)
// must not then spend the whole timeout again waiting for peers, or the
// call is never answered (chaos seed 353322721: queued 2 s behind a seq
// held by a SIGSTOPped rank, then 6.4 s in the rendezvous, past the 8 s
// deadline). A failed split is diagnosed (ArrivalCheck) before it is
// answered, so the split stops `diagnosis` before that deadline.
// Withdrawable: a rank whose call's deadline comes while it is
// still queued does not split; the ranks that do split stop at that same
// deadline, so nobody waits for it longer than its caller does.

class GroupTask final : public Work, public ExecutorTask {
 public:
  using Make = std::function<absl::StatusOr<std::shared_ptr<Communicator>>(
      Communicator& world, std::chrono::milliseconds timeout)>;
  using Done = std::function<absl::Status(
      absl::StatusOr<std::shared_ptr<Communicator>>)>;

  GroupTask(int64_t id, std::string name, int64_t world_seq,
            std::chrono::milliseconds timeout,
            std::chrono::milliseconds diagnosis, Make make, Done done)
      : Work(id, SpecOf(world_seq, timeout)),
        name_(std::move(name)),
        diagnosis_(diagnosis),
        make_(std::move(make)),
        done_(std::move(done)) {}

  std::string Describe() const override {
    return absl::StrCat("creating group '", name_, "' at world seq ",
                        spec().seq);
  }

  bool withdrawable() const override { return true; }

  // ExecutorTask.
  int64_t seq() const override { return spec().seq; }
  std::chrono::milliseconds timeout() const override { return spec().timeout; }
  void Start() override { MarkRunning(); }
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      Communicator& world) override {
    const Clock::time_point start = Clock::now();
    absl::Status status = done_(Split(world, start));
    ran_ = true;
    return std::make_unique<CompletedWork>(
        std::move(status),
        std::chrono::duration<double, std::micro>(Clock::now() - start)
            .count());
  }
  void Complete(absl::Status status, double device_us) override {
    // Not launched (cancelled, or the world is broken): the name is freed.
    if (!ran_) (void)done_(status);
    if (!status.ok()) {
      status = absl::Status(status.code(),
                            absl::StrCat(Describe(), ": ", status.message()));
    }
    Finish(std::move(status), device_us, /*annotate=*/false);
  }

 private:
  absl::StatusOr<std::shared_ptr<Communicator>> Split(Communicator& world,
                                                      Clock::time_point now) {
    if (cancel_requested()) {
      return absl::CancelledError(
          "withdrawn: its call was given up (its deadline came, or it was "
          "cancelled) before its turn, so this rank did not split");
    }
    std::chrono::milliseconds budget = spec().timeout;
    const Clock::time_point deadline = call_deadline();
    if (deadline != Clock::time_point::max()) {
      budget = std::min(budget,
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - now) -
                            diagnosis_);
    }
    if (budget.count() <= 0) {
      return absl::DeadlineExceededError(
          "its call's deadline was too near (it waited behind earlier world "
          "seqs) to wait for its peers, so this rank did not split");
    }
    return make_(world, budget);
  }

  static OpSpec SpecOf(int64_t world_seq, std::chrono::milliseconds timeout) {
    OpSpec spec;
    spec.group = kWorldGroup;
    spec.seq = world_seq;
    spec.kind = OpKind::kNop;
    spec.timeout = timeout;
    return spec;
  }

  const std::string name_;
  const std::chrono::milliseconds diagnosis_;
  const Make make_;
  const Done done_;
  // Launch thread only (Complete runs after Launch, or instead of it).
  std::atomic<bool> ran_{false};
};

}  // namespace ccl
