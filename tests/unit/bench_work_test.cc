// A bench far longer than its call stops before the call's deadline on a
// backend whose launches return at once and whose ops run later, as NCCL's
// do on the device. The bench paces its checkpoints by the time its
// instances take; counting launches that had not run yet, it once judged
// them hundreds of times faster than they were and planned its next
// checkpoint long after the deadline (seen on NCCL with four simulated
// hosts: every rank answered with gRPC's bare "Deadline Exceeded"). The
// integration suites cannot show it on CPU: Gloo's ops finish inside their
// launch.
#include "server/core/bench_work.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/communicator.h"
#include "server/core/memory.h"
#include "server/core/tensor_store.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

// One rank whose "device" runs the launched ops one after another, each
// kOpTime long, after Launch has returned.
class QueuedDeviceCommunicator final : public Communicator {
 public:
  static constexpr auto kOpTime = std::chrono::milliseconds(2);

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "queued device"; }
  absl::Status Supports(OpKind, DType, ReduceOp) const override {
    return absl::OkStatus();
  }
  absl::Status Health() const override { return absl::OkStatus(); }
  void Abort(const absl::Status&) override {}
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(const BoundOp&) override {
    device_free_ = std::max(device_free_, Clock::now()) + kOpTime;
    ++launched_;
    return std::unique_ptr<CommWork>(new QueuedWork(device_free_));
  }
  absl::Status AllGatherHost(const void* mine, void* all, size_t bytes,
                             Clock::time_point) override {
    std::memcpy(all, mine, bytes);
    return absl::OkStatus();
  }
  absl::Status ExchangeHost(int, const void*, void*, size_t,
                            Clock::time_point) override {
    return absl::UnimplementedError("one rank has no peer");
  }
  absl::StatusOr<std::unique_ptr<Communicator>> Split(
      const std::vector<int>&, const std::string&,
      std::chrono::milliseconds) override {
    return absl::UnimplementedError("not used by benches");
  }

  int64_t launched() const { return launched_; }

 private:
  class QueuedWork final : public CommWork {
   public:
    explicit QueuedWork(Clock::time_point done) : done_(done) {}
    bool IsCompleted() override { return Clock::now() >= done_; }
    absl::Status Wait(std::chrono::milliseconds) override {
      std::this_thread::sleep_until(done_);
      return absl::OkStatus();
    }
    void Abort() override {}
    double DeviceMicros() const override {
      return std::chrono::duration<double, std::micro>(kOpTime).count();
    }

   private:
    const Clock::time_point done_;
  };

  Clock::time_point device_free_;
  int64_t launched_ = 0;
};

TEST(BenchWorkTest, ABenchOnAQueuedDeviceStopsBeforeItsCallsDeadline) {
  TensorStore store(Device{}, 0, MakeHostMemory());
  OpSpec spec;
  spec.kind = OpKind::kAllReduce;
  spec.seq = 1;
  BoundOp op;
  op.kind = OpKind::kAllReduce;
  op.count = 4;
  op.seq = 1;
  op.timeout = std::chrono::milliseconds(1000);
  BenchOptions options;
  options.warmup = 1;
  // 3000 instances are 6 s of device time: far past the 1 s call.
  options.iters = 3000;
  auto bench = std::make_shared<BenchWork>(
      /*id=*/7, spec, op, std::vector<std::shared_ptr<Tensor>>{}, options,
      &store);
  bench->SetCallDeadline(Clock::now() + std::chrono::seconds(1));
  QueuedDeviceCommunicator comm;
  bench->Start();
  auto handle = bench->Launch(comm);
  const absl::Status status =
      handle.ok() ? (*handle)->Wait(op.timeout) : handle.status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("every rank stopped at the same instance"));
  EXPECT_LT(comm.launched(), 1 + options.iters);
}

}  // namespace
}  // namespace ccl
