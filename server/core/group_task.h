// Creating a subgroup, as work of the world's executor.
#pragma once

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
// communicator of the group (null on a non-member) and `done` registers it,
// both on the world's launch thread.

class GroupTask final : public Work, public ExecutorTask {
 public:
  using Make = std::function<absl::StatusOr<std::shared_ptr<Communicator>>(
      Communicator& world)>;
  using Done = std::function<absl::Status(
      absl::StatusOr<std::shared_ptr<Communicator>>)>;

  GroupTask(int64_t id, std::string name, int64_t world_seq,
            std::chrono::milliseconds timeout, Make make, Done done)
      : Work(id, SpecOf(world_seq, timeout)),
        name_(std::move(name)),
        make_(std::move(make)),
        done_(std::move(done)) {}

  std::string Describe() const override {
    return absl::StrCat("creating group '", name_, "' at world seq ",
                        spec().seq);
  }

  // ExecutorTask.
  int64_t seq() const override { return spec().seq; }
  std::chrono::milliseconds timeout() const override { return spec().timeout; }
  void Start() override { MarkRunning(); }
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      Communicator& world) override {
    const Clock::time_point start = Clock::now();
    absl::Status status = done_(make_(world));
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
  static OpSpec SpecOf(int64_t world_seq, std::chrono::milliseconds timeout) {
    OpSpec spec;
    spec.group = kWorldGroup;
    spec.seq = world_seq;
    spec.kind = OpKind::kNop;
    spec.timeout = timeout;
    return spec;
  }

  const std::string name_;
  const Make make_;
  const Done done_;
  // Launch thread only (Complete runs after Launch, or instead of it).
  std::atomic<bool> ran_{false};
};

}  // namespace ccl
