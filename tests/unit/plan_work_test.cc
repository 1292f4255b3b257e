// A plan's ops each keep their own outcome: PlanWork's per-op results, and
// the flight recorder's records of a failed plan (`ccctl debug ops`), which
// must say which op failed, which completed before it and which never ran,
// not the plan's one status for all of them. The integration tests cannot
// tell these apart (a refused plan gives every op the same reason), so a
// communicator scripted here fails op 1 of 3 at run time.
#include "server/core/plan_work.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/comm/communicator.h"
#include "server/core/flight_recorder.h"
#include "server/core/memory.h"
#include "server/core/tensor_store.h"

namespace ccl {
namespace {

using ::testing::HasSubstr;

// Each launch's op finishes at once with the status its position in
// `outcomes` gives (OK past the end) and 10 µs of "device" time, unless
// RefuseLaunch made that launch itself fail.
class ScriptedCommunicator final : public Communicator {
 public:
  explicit ScriptedCommunicator(std::vector<absl::Status> outcomes)
      : outcomes_(std::move(outcomes)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "scripted"; }
  absl::Status Supports(OpKind, DType, ReduceOp) const override {
    return absl::OkStatus();
  }
  absl::Status Health() const override { return absl::OkStatus(); }
  void Abort(const absl::Status&) override {}
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(const BoundOp&) override {
    const size_t index = launched_++;
    if (index == refused_launch_) return refusal_;
    absl::Status outcome =
        index < outcomes_.size() ? outcomes_[index] : absl::OkStatus();
    return std::unique_ptr<CommWork>(
        new CompletedWork(std::move(outcome), /*device_us=*/10));
  }
  absl::Status AllGatherHost(const void*, void*, size_t,
                             std::chrono::steady_clock::time_point) override {
    return absl::UnimplementedError("not used by plans");
  }
  absl::Status ExchangeHost(int, const void*, void*, size_t,
                            std::chrono::steady_clock::time_point) override {
    return absl::UnimplementedError("not used by plans");
  }
  absl::StatusOr<std::unique_ptr<Communicator>> Split(
      const std::vector<int>&, const std::string&,
      std::chrono::milliseconds) override {
    return absl::UnimplementedError("not used by plans");
  }

  void RefuseLaunch(size_t index, absl::Status why) {
    refused_launch_ = index;
    refusal_ = std::move(why);
  }
  size_t launched() const { return launched_; }

 private:
  const std::vector<absl::Status> outcomes_;
  size_t launched_ = 0;
  size_t refused_launch_ = static_cast<size_t>(-1);
  absl::Status refusal_;
};

OpSpec AllReduceSpec(const std::string& input, int64_t seq) {
  OpSpec spec;
  spec.kind = OpKind::kAllReduce;
  spec.input = input;
  spec.seq = seq;
  return spec;
}

// A plan of three all_reduces at seqs 5, 6, 7 (no tensors: the scripted
// communicator moves no data).
std::shared_ptr<PlanWork> ThreeOpPlan(TensorStore* store) {
  std::vector<OpSpec> specs = {AllReduceSpec("a", 5), AllReduceSpec("b", 6),
                               AllReduceSpec("c", 7)};
  std::vector<BoundOp> ops(specs.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    ops[i].kind = OpKind::kAllReduce;
    ops[i].count = 4;
    ops[i].seq = specs[i].seq;
    ops[i].timeout = std::chrono::milliseconds(1000);
  }
  OpSpec whole = specs.front();
  return std::make_shared<PlanWork>(
      /*id=*/42, std::move(whole), std::move(specs), std::move(ops),
      /*aggregate=*/false, std::vector<std::shared_ptr<Tensor>>{}, store);
}

// Runs `plan` on `comm` as the executor would.
absl::Status RunPlan(PlanWork& plan, Communicator& comm) {
  plan.Start();
  auto handle = plan.Launch(comm);
  if (!handle.ok()) {
    plan.Complete(handle.status(), 0);
    return handle.status();
  }
  absl::Status status = (*handle)->Wait(plan.timeout());
  plan.Complete(status, (*handle)->DeviceMicros());
  return status;
}

FlightEntry EntryFor(const std::shared_ptr<PlanWork>& plan, int index) {
  FlightEntry entry;
  entry.spec = plan->op_specs()[static_cast<size_t>(index)];
  entry.count = 4;
  entry.work = plan;
  entry.plan_index = index;
  return entry;
}

class PlanWorkTest : public ::testing::Test {
 protected:
  TensorStore store_{Device{}, 0, MakeHostMemory()};
};

TEST_F(PlanWorkTest, AnOpThatFailsAtRunTimeIsNamedAndTheOnesAfterItDidNotRun) {
  auto plan = ThreeOpPlan(&store_);
  ScriptedCommunicator comm(
      {absl::OkStatus(), absl::InternalError("peer 1 closed the connection")});
  const absl::Status status = RunPlan(*plan, comm);

  EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(status.message()), HasSubstr("op 1 of the plan"));
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("peer 1 closed the connection"));
  EXPECT_EQ(plan->state(), WorkState::kFailed);

  const std::vector<PlanOpResult> results = plan->results();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].status.ok()) << results[0].status;
  EXPECT_EQ(results[0].device_us, 10);
  EXPECT_EQ(results[1].status.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(results[2].status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(results[2].status.message()),
              HasSubstr("not run: op 1 of the plan"));
  ASSERT_TRUE(plan->result(1).has_value());
  EXPECT_EQ(plan->result(1)->status, results[1].status);
  EXPECT_FALSE(plan->result(3).has_value());
}

TEST_F(PlanWorkTest, FlightRecordsOfAFailedPlanCarryEachOpsOwnOutcome) {
  auto plan = ThreeOpPlan(&store_);
  ScriptedCommunicator comm(
      {absl::OkStatus(), absl::InternalError("peer 1 closed the connection")});
  (void)RunPlan(*plan, comm);

  const OpRecord first = FlightRecorder::ToRecord(EntryFor(plan, 0));
  const OpRecord second = FlightRecorder::ToRecord(EntryFor(plan, 1));
  const OpRecord third = FlightRecorder::ToRecord(EntryFor(plan, 2));

  EXPECT_EQ(first.state, WorkState::kCompleted);
  EXPECT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(second.state, WorkState::kFailed);
  EXPECT_EQ(second.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(second.status.message()),
              HasSubstr("peer 1 closed the connection"));
  EXPECT_EQ(third.state, WorkState::kFailed);
  EXPECT_THAT(std::string(third.status.message()), HasSubstr("not run"));
  for (const OpRecord* record : {&first, &second, &third}) {
    EXPECT_EQ(record->work_id, 42);
  }
  EXPECT_EQ(first.spec.seq, 5);
  EXPECT_EQ(third.spec.input, "c");

  // The completion callback's forms (work held by pointer only; a plan's
  // op read from the plan itself) agree.
  FlightEntry by_pointer = EntryFor(plan, 0);
  by_pointer.work.reset();
  EXPECT_EQ(FlightRecorder::ToRecord(by_pointer, plan.get()).state,
            WorkState::kCompleted);
  for (size_t i = 0; i < 3; ++i) {
    const OpRecord from_plan = FlightRecorder::ToRecord(*plan, i);
    const OpRecord from_entry =
        FlightRecorder::ToRecord(EntryFor(plan, static_cast<int>(i)));
    EXPECT_EQ(from_plan.state, from_entry.state) << "op " << i;
    EXPECT_EQ(from_plan.status, from_entry.status) << "op " << i;
    EXPECT_EQ(from_plan.spec.seq, from_entry.spec.seq) << "op " << i;
    EXPECT_EQ(from_plan.count, 4) << "op " << i;
    EXPECT_EQ(from_plan.work_id, 42) << "op " << i;
  }
}

TEST_F(PlanWorkTest, TheRecorderKeepsAPlansLastOpsWithTheirOwnOutcomes) {
  auto plan = ThreeOpPlan(&store_);
  ScriptedCommunicator comm({absl::OkStatus(), absl::OkStatus(),
                             absl::InternalError("peer 1 went away")});
  (void)RunPlan(*plan, comm);
  FlightRecorder recorder(/*per_group=*/2);
  recorder.RecordPlan(plan, absl::OkStatus());
  const std::vector<OpRecord> records = recorder.Last(kWorldGroup, 0);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].spec.seq, 6);
  EXPECT_EQ(records[0].state, WorkState::kCompleted);
  EXPECT_EQ(records[1].spec.seq, 7);
  EXPECT_EQ(records[1].state, WorkState::kFailed);
  EXPECT_THAT(std::string(records[1].status.message()),
              HasSubstr("peer 1 went away"));

  // A plan refused at the queue: every op kept says why.
  FlightRecorder refusals(/*per_group=*/8);
  refusals.RecordPlan(ThreeOpPlan(&store_),
                      absl::UnavailableError("the worker is shutting down"));
  const std::vector<OpRecord> refused = refusals.Last(kWorldGroup, 0);
  ASSERT_EQ(refused.size(), 3u);
  for (const OpRecord& record : refused) {
    EXPECT_EQ(record.state, WorkState::kFailed);
    EXPECT_EQ(record.status.code(), absl::StatusCode::kUnavailable);
  }
}

TEST_F(PlanWorkTest, AnOpRefusedAtLaunchFailsThereAndTheRestDidNotRun) {
  // Op 1 cannot even be launched (an error from Launch itself).
  ScriptedCommunicator comm({});
  comm.RefuseLaunch(1, absl::UnavailableError("communicator aborted"));
  auto plan = ThreeOpPlan(&store_);
  const absl::Status status = RunPlan(*plan, comm);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("op 1 of the plan"));
  const std::vector<PlanOpResult> results = plan->results();
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].status.ok()) << results[0].status;
  EXPECT_EQ(results[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(results[2].status.message()), HasSubstr("not run"));
  EXPECT_EQ(FlightRecorder::ToRecord(EntryFor(plan, 0)).state,
            WorkState::kCompleted);
}

TEST_F(PlanWorkTest, ASucceedingPlanCompletesEveryOp) {
  auto plan = ThreeOpPlan(&store_);
  ScriptedCommunicator comm({});
  ASSERT_TRUE(RunPlan(*plan, comm).ok());
  EXPECT_EQ(comm.launched(), 3u);
  EXPECT_EQ(plan->state(), WorkState::kCompleted);
  for (int i = 0; i < 3; ++i) {
    const OpRecord record = FlightRecorder::ToRecord(EntryFor(plan, i));
    EXPECT_EQ(record.state, WorkState::kCompleted) << "op " << i;
    EXPECT_TRUE(record.status.ok()) << record.status;
  }
  double device_us = 0;
  for (const PlanOpResult& result : plan->results()) {
    device_us += result.device_us;
  }
  EXPECT_EQ(device_us, 30);
}

}  // namespace
}  // namespace ccl
