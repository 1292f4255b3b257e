#include "client/ccctl/diagnose.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace ccl::ctl {
namespace {

using client::OpLog;
using client::OpRecord;
using client::WorkState;

OpRecord Record(int64_t seq, OpKind kind, WorkState state, int64_t count = 4,
                int peer = 0) {
  OpRecord record;
  record.seq = seq;
  record.kind = kind;
  record.state = state;
  record.dtype = DType::kFloat32;
  record.count = count;
  record.peer = peer;
  record.work_id = seq + 1;
  record.timing.enqueued_unix_us = 1000;
  return record;
}

OpLog Log(int rank, int64_t next_seq, std::vector<OpRecord> records) {
  OpLog log;
  log.rank = rank;
  log.next_seq = next_seq;
  log.now_unix_us = 2000000;
  log.records = std::move(records);
  return log;
}

bool Says(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& line) {
    return line.find(text) != std::string::npos;
  });
}

std::string Join(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& line : lines) all += line + "\n";
  return all;
}

TEST(DiagnoseTest, IdleWorld) {
  const auto lines = Diagnose(
      {Log(0, 2, {Record(1, OpKind::kAllReduce, WorkState::kCompleted)}),
       Log(1, 2, {Record(1, OpKind::kAllReduce, WorkState::kCompleted)})});
  EXPECT_TRUE(Says(lines, "all 2 ranks are idle, waiting for seq 2"))
      << Join(lines);
  EXPECT_TRUE(Says(lines, "last op was seq 1 all_reduce of 4 float32"))
      << Join(lines);
}

// The tutorial's trap: rank 1 receives from a rank 0 that ran nothing.
TEST(DiagnoseTest, RecvWithoutSendNamesTheMissingPartner) {
  const auto lines = Diagnose(
      {Log(0, 17, {Record(16, OpKind::kAllReduce, WorkState::kCompleted)}),
       Log(1, 17,
           {Record(16, OpKind::kAllReduce, WorkState::kCompleted),
            Record(17, OpKind::kRecv, WorkState::kRunning, 3, 0)})});
  EXPECT_TRUE(Says(lines, "rank 1 waits in seq 17 recv of 3 float32 from 0"))
      << Join(lines);
  EXPECT_TRUE(Says(lines, "rank 0 is idle at seq 17; its last op is seq 16"))
      << Join(lines);
  EXPECT_TRUE(Says(lines, "rank 0 posted no send at that seq")) << Join(lines);
}

TEST(DiagnoseTest, DifferentOpsAtOneSeqAndFailures) {
  OpRecord failed = Record(5, OpKind::kAllReduce, WorkState::kFailed, 8);
  failed.error = absl::InvalidArgumentError("ranks disagree");
  const auto lines =
      Diagnose({Log(0, 6, {Record(5, OpKind::kAllReduce, WorkState::kFailed)}),
                Log(1, 6, {failed})});
  EXPECT_TRUE(Says(lines, "ranks disagree at seq 5")) << Join(lines);
  EXPECT_TRUE(Says(lines, "rank 1 ran all_reduce of 8 float32")) << Join(lines);
  EXPECT_TRUE(Says(lines,
                   "rank 1: seq 5 all_reduce of 8 float32 failed: "
                   "INVALID_ARGUMENT: ranks disagree"))
      << Join(lines);
}

TEST(DiagnoseTest, PeersOfSubgroupsAreTranslatedToWorldRanks) {
  // Group [2, 0]: group rank 1 is world rank 0.
  const auto lines = Diagnose(
      {Log(2, 0, {Record(0, OpKind::kRecv, WorkState::kRunning, 3, 1)}),
       Log(0, 0, {})},
      {2, 0});
  EXPECT_TRUE(Says(lines, "rank 0 posted no send")) << Join(lines);
}

}  // namespace
}  // namespace ccl::ctl
