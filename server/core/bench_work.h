// A benchmark at one seq: warm-up instances, then `iters` timed instances of
// one op back to back (nccl-tests' method), optionally captured in a CUDA
// graph, then optionally one checked instance. Occupies its group's executor
// for the whole run, as one op would.
#pragma once

#include <memory>
#include <vector>

#include "server/comm/communicator.h"
#include "server/core/executor.h"
#include "server/core/tensor_store.h"
#include "server/core/work.h"

namespace ccl {

struct BenchOptions {
  int warmup = 5;
  int iters = 20;
  bool check = false;
  // nccl-tests' -G: capture the timed instances in a CUDA graph and launch
  // it this many times; 0: no graph.
  int graph_launches = 0;
};

class BenchWork final : public Work, public ExecutorTask {
 public:
  BenchWork(int64_t id, OpSpec spec, BoundOp op,
            std::vector<std::shared_ptr<Tensor>> tensors, BenchOptions options,
            TensorStore* store);

  // Valid once the work completed.
  BenchResult result() const;

  // Ranks agree at checkpoints whether to go on (StopPoints in the .cc), so
  // a bench given up by one rank's caller stops on every rank at the same
  // instance and the group is free at once.
  bool withdrawable() const override { return true; }

  // ExecutorTask.
  int64_t seq() const override { return spec().seq; }
  std::chrono::milliseconds timeout() const override { return op_.timeout; }
  void Start() override;
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(Communicator& comm) override;
  void Complete(absl::Status status, double device_us) override;

 protected:
  // Its tensors stop being busy at once: a withdrawn bench stops at its
  // first checkpoint, on every rank, before any instance touches them.
  void OnWithdrawn() override;

 private:
  class StopPoints;

  absl::Status RunTimed(Communicator& comm, StopPoints& stops);
  absl::Status RunGraph(Communicator& comm);
  absl::Status RunChecked(Communicator& comm);
  absl::Status RunOnce(Communicator& comm, Agreement agreement);
  // What the instances after the first agreed one use: already agreed, or
  // (when the client skipped the check) still skipped.
  Agreement Repeated() const;

  const BoundOp op_;
  const BenchOptions options_;
  TensorStore* const store_;
  std::vector<std::shared_ptr<Tensor>> tensors_;
  // Launch thread only until Complete.
  BenchResult result_;
};

}  // namespace ccl
