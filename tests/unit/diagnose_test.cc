#include "client/ccctl/diagnose.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace ccl::ctl {
namespace {

v1::OpRecord Record(int64_t seq, v1::OpKind kind, v1::WorkState state,
                    int64_t count = 4, int peer = 0) {
  v1::OpRecord record;
  record.set_seq(seq);
  record.set_kind(kind);
  record.set_state(state);
  record.set_dtype(v1::DTYPE_FLOAT32);
  record.set_count(count);
  record.set_peer(peer);
  record.set_work_id(seq + 1);
  record.mutable_timing()->set_enqueued_unix_us(1000);
  return record;
}

v1::OpLog Log(int rank, int64_t next_seq, std::vector<v1::OpRecord> records) {
  v1::OpLog log;
  log.set_rank(rank);
  log.set_next_seq(next_seq);
  log.set_now_unix_us(2000000);
  for (auto& record : records) *log.add_records() = record;
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
      {Log(0, 2, {Record(1, v1::OP_KIND_ALL_REDUCE, v1::WORK_STATE_COMPLETED)}),
       Log(1, 2,
           {Record(1, v1::OP_KIND_ALL_REDUCE, v1::WORK_STATE_COMPLETED)})});
  EXPECT_TRUE(Says(lines, "all 2 ranks are idle, waiting for seq 2"))
      << Join(lines);
  EXPECT_TRUE(Says(lines, "last op was seq 1 all_reduce of 4 float32"))
      << Join(lines);
}

// The tutorial's trap: rank 1 receives from a rank 0 that ran nothing.
TEST(DiagnoseTest, RecvWithoutSendNamesTheMissingPartner) {
  const auto lines = Diagnose(
      {Log(0, 17,
           {Record(16, v1::OP_KIND_ALL_REDUCE, v1::WORK_STATE_COMPLETED)}),
       Log(1, 17,
           {Record(16, v1::OP_KIND_ALL_REDUCE, v1::WORK_STATE_COMPLETED),
            Record(17, v1::OP_KIND_RECV, v1::WORK_STATE_RUNNING, 3, 0)})});
  EXPECT_TRUE(Says(lines, "rank 1 waits in seq 17 recv of 3 float32 from 0"))
      << Join(lines);
  EXPECT_TRUE(Says(lines, "rank 0 is idle at seq 17; its last op is seq 16"))
      << Join(lines);
  EXPECT_TRUE(Says(lines, "rank 0 posted no send at that seq")) << Join(lines);
}

TEST(DiagnoseTest, DifferentOpsAtOneSeqAndFailures) {
  v1::OpRecord failed =
      Record(5, v1::OP_KIND_ALL_REDUCE, v1::WORK_STATE_FAILED, 8);
  failed.set_error_code(3);
  failed.set_error_message("ranks disagree");
  const auto lines = Diagnose(
      {Log(0, 6, {Record(5, v1::OP_KIND_ALL_REDUCE, v1::WORK_STATE_FAILED)}),
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
      {Log(2, 0, {Record(0, v1::OP_KIND_RECV, v1::WORK_STATE_RUNNING, 3, 1)}),
       Log(0, 0, {})},
      {2, 0});
  EXPECT_TRUE(Says(lines, "rank 0 posted no send")) << Join(lines);
}

}  // namespace
}  // namespace ccl::ctl
