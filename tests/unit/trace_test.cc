// BuildTrace and AlignClocks over hand-made flight recorders: slices, the
// failure marks, the arrows between ranks, and the clock rule.
#include "client/ccctl/trace.h"

#include <gtest/gtest.h>

namespace ccl::ctl {
namespace {

using client::OpLog;
using client::OpRecord;
using client::WorkState;
using Json = nlohmann::ordered_json;

OpRecord Record(int64_t seq, OpKind kind, int64_t enqueued_us, double queue_us,
                double total_us, WorkState state = WorkState::kCompleted) {
  OpRecord r;
  r.seq = seq;
  r.generation = 3;
  r.kind = kind;
  r.dtype = DType::kFloat32;
  r.reduce = ReduceOp::kSum;
  r.count = 4;
  r.state = state;
  r.timing.enqueued_unix_us = enqueued_us;
  r.timing.queue_us = queue_us;
  r.timing.total_us = total_us;
  r.timing.device_us = total_us - queue_us;
  return r;
}

std::vector<Json> Events(const Json& trace, const std::string& ph) {
  std::vector<Json> out;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == ph) out.push_back(e);
  }
  return out;
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Rank 0 starts the all_reduce at t=1000, rank 1 at t=1500 (it kept
    // rank 0 waiting); then 0 sends to 1; then 1 posts a lone recv that
    // times out while 0 takes the seq with a nop.
    OpLog log0, log1;
    log0.records.push_back(Record(0, OpKind::kAllReduce, 1000, 10, 700));
    log1.records.push_back(Record(0, OpKind::kAllReduce, 1500, 10, 200));
    auto send = Record(1, OpKind::kSend, 2000, 0, 100);
    send.peer = 1;
    log0.records.push_back(send);
    auto recv = Record(1, OpKind::kRecv, 2010, 0, 90);
    recv.peer = 0;
    log1.records.push_back(recv);
    log0.records.push_back(Record(2, OpKind::kNop, 3000, 0, 1));
    auto lone = Record(2, OpKind::kRecv, 3000, 0, 5000, WorkState::kFailed);
    lone.error = absl::DeadlineExceededError("rank 0 posted no matching send");
    log1.records.push_back(lone);
    // Refused before it was queued: no time, nothing to draw.
    log1.records.push_back(
        Record(3, OpKind::kBarrier, 0, 0, 0, WorkState::kFailed));
    log0.now_unix_us = 9000;
    log1.now_unix_us = 9000;
    logs_ = {{0, "world", log0}, {1, "world", log1}};
  }

  Json Build(std::map<int, RankClock> clocks = {}) {
    return BuildTrace(logs_, {{"world", {0, 1}}}, clocks,
                      {{0, "cpu @ a"}, {1, "cpu @ a"}}, "test", "c:1");
  }

  std::vector<TraceLog> logs_;
};

TEST_F(TraceTest, OneSlicePerTimedOpFromItsStart) {
  Json trace = Build();
  auto slices = Events(trace, "X");
  ASSERT_EQ(slices.size(), 5u);  // no nop, no untimed record
  // Time 0 is the first start (rank 0's all_reduce after its queue time).
  EXPECT_EQ(trace["otherData"]["time_base_unix_us"], 1010.0);
  EXPECT_EQ(slices[0]["name"], "all_reduce");
  EXPECT_EQ(slices[0]["pid"], 0);
  EXPECT_EQ(slices[0]["ts"], 0.0);
  EXPECT_EQ(slices[0]["dur"], 690.0);
  EXPECT_EQ(slices[1]["pid"], 1);
  EXPECT_EQ(slices[1]["ts"], 500.0);
  EXPECT_EQ(slices[0]["args"]["bytes"], 16);
  EXPECT_EQ(slices[0]["args"]["generation"], 3);
  EXPECT_EQ(slices[0]["args"]["reduce_op"], "sum");
  EXPECT_EQ(slices[0]["args"]["last_arrival"], 1);
}

TEST_F(TraceTest, FailedOpIsMarked) {
  Json trace = Build();
  auto slices = Events(trace, "X");
  const Json& lone = slices.back();
  EXPECT_EQ(lone["name"], "recv FAILED");
  EXPECT_EQ(lone["cname"], "terrible");
  EXPECT_EQ(lone["args"]["error"],
            "DEADLINE_EXCEEDED: rank 0 posted no matching send");
  auto marks = Events(trace, "i");
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(marks[0]["name"], "recv failed: DEADLINE_EXCEEDED");
  EXPECT_EQ(marks[0]["pid"], 1);
  EXPECT_DOUBLE_EQ(marks[0]["ts"].get<double>(),
                   lone["ts"].get<double>() + lone["dur"].get<double>());
}

TEST_F(TraceTest, ArrowsFromTheLastArrivalAndFromSendToRecv) {
  Json trace = Build();
  auto starts = Events(trace, "s");
  auto finishes = Events(trace, "f");
  ASSERT_EQ(starts.size(), 2u);  // all_reduce and send; the lone recv none
  ASSERT_EQ(finishes.size(), 2u);
  EXPECT_EQ(starts[0]["name"], "world seq 0");
  EXPECT_EQ(starts[0]["pid"], 1);  // rank 1 came last
  EXPECT_EQ(finishes[0]["pid"], 0);
  EXPECT_EQ(finishes[0]["bp"], "e");
  EXPECT_EQ(starts[1]["name"], "world seq 1");
  EXPECT_EQ(starts[1]["pid"], 0);    // send
  EXPECT_EQ(finishes[1]["pid"], 1);  // recv
  EXPECT_EQ(starts[1]["id"], finishes[1]["id"]);
}

TEST_F(TraceTest, ProcessAndThreadNames) {
  Json trace = Build();
  auto meta = Events(trace, "M");
  ASSERT_FALSE(meta.empty());
  EXPECT_EQ(meta[0]["name"], "process_name");
  EXPECT_EQ(meta[0]["args"]["name"], "rank 0 (cpu @ a)");
  bool thread = false;
  for (const auto& m : meta) {
    thread = thread ||
             (m["name"] == "thread_name" && m["args"]["name"] == "group world");
  }
  EXPECT_TRUE(thread);
}

TEST_F(TraceTest, AppliedOffsetMovesTheRank) {
  std::map<int, RankClock> clocks;
  clocks[1] = {"b", 400.0, 50.0, true};
  Json trace = Build(clocks);
  auto slices = Events(trace, "X");
  // Rank 1's all_reduce started at 1510 on its clock, 1110 on the client's.
  EXPECT_EQ(slices[1]["pid"], 1);
  EXPECT_EQ(slices[1]["ts"], 100.0);
  EXPECT_EQ(trace["otherData"]["clocks"]["1"]["applied"], true);
}

TEST(AlignClocksTest, HostsShareTheirBestReadingAndSmallOffsetsStay) {
  std::map<int, ClockSample> samples = {
      {0, {30.0, 200.0}},    // host a, noisy
      {1, {-20.0, 100.0}},   // host a, better: |offset| <= rtt/2 -> not applied
      {2, {5000.0, 300.0}},  // host b: far off -> applied
  };
  auto clocks = AlignClocks(samples, {{0, "a"}, {1, "a"}, {2, "b"}});
  EXPECT_EQ(clocks[0].offset_us, -20.0);
  EXPECT_EQ(clocks[1].offset_us, -20.0);
  EXPECT_FALSE(clocks[0].applied);
  EXPECT_EQ(clocks[0].uncertainty_us, 50.0);
  EXPECT_TRUE(clocks[2].applied);
  EXPECT_EQ(clocks[2].offset_us, 5000.0);
  EXPECT_EQ(clocks[2].host, "b");
}

}  // namespace
}  // namespace ccl::ctl
