// The one judgement every agreement makes (server/comm/op_fingerprint.h):
// ops, Gloo's own check and a bench's checkpoints all decide through
// JudgeCollective / JudgePointToPoint, in one order.
#include <optional>
#include <vector>

#include "gtest/gtest.h"
#include "server/comm/op_fingerprint.h"

namespace ccl {
namespace {

// Records the abort; nothing else is called by a judgement.
class AbortRecorder final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "judged"; }
  absl::Status Supports(OpKind, DType, ReduceOp) const override {
    return absl::OkStatus();
  }
  absl::Status Health() const override { return absl::OkStatus(); }
  void Abort(const absl::Status& why) override { aborted = why; }
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(const BoundOp&) override {
    return absl::UnimplementedError("not in a judgement");
  }
  absl::Status AllGatherHost(const void*, void*, size_t,
                             std::chrono::steady_clock::time_point) override {
    return absl::UnimplementedError("not in a judgement");
  }
  absl::Status ExchangeHost(int, const void*, void*, size_t,
                            std::chrono::steady_clock::time_point) override {
    return absl::UnimplementedError("not in a judgement");
  }
  absl::StatusOr<std::unique_ptr<Communicator>> Split(
      const std::vector<int>&, const std::string&,
      std::chrono::milliseconds) override {
    return absl::UnimplementedError("not in a judgement");
  }

  std::optional<absl::Status> aborted;
};

std::vector<OpFingerprint> AllReduceOnEveryRank(int64_t seq) {
  BoundOp op;
  op.kind = OpKind::kAllReduce;
  op.dtype = DType::kFloat32;
  op.count = 8;
  op.seq = seq;
  return {FingerprintOf(op, 0), FingerprintOf(op, 1)};
}

constexpr Withdrawals kEvery[] = {
    Withdrawals::kOfAnOp, Withdrawals::kRefusalsOnly, Withdrawals::kNone};

TEST(AgreementJudge, TheSameOpEverywhereIsAgreed) {
  for (Withdrawals w : kEvery) {
    AbortRecorder comm;
    EXPECT_TRUE(JudgeCollective(comm, 5, AllReduceOnEveryRank(5), w).ok());
    EXPECT_FALSE(comm.aborted.has_value());
  }
}

TEST(AgreementJudge, OutOfStepAbortsFirstWhateverElseTheRanksSaid) {
  for (Withdrawals w : kEvery) {
    AbortRecorder comm;
    std::vector<OpFingerprint> all = AllReduceOnEveryRank(5);
    all[1].seq = 6;
    all[1].withdrawn = kRefusedVote;  // says nothing about seq 5
    const absl::Status judged = JudgeCollective(comm, 5, all, w);
    EXPECT_TRUE(IsOutOfStep(judged)) << judged;
    ASSERT_TRUE(comm.aborted.has_value());
    EXPECT_EQ(*comm.aborted, judged);
  }
}

TEST(AgreementJudge, RefusalsCountUnlessTheCheckIsGlooOwn) {
  std::vector<OpFingerprint> all = AllReduceOnEveryRank(5);
  all[1].withdrawn = kRefusedVote;
  for (Withdrawals w : {Withdrawals::kOfAnOp, Withdrawals::kRefusalsOnly}) {
    AbortRecorder comm;
    const absl::Status judged = JudgeCollective(comm, 5, all, w);
    EXPECT_EQ(judged.code(), absl::StatusCode::kFailedPrecondition) << judged;
    EXPECT_NE(judged.message().find("rank 1"), std::string::npos) << judged;
    EXPECT_FALSE(comm.aborted.has_value());
  }
  AbortRecorder comm;
  EXPECT_TRUE(JudgeCollective(comm, 5, all, Withdrawals::kNone).ok());
}

TEST(AgreementJudge, AWithdrawalCountsForAnOpNotForABenchsStopVote) {
  std::vector<OpFingerprint> all = AllReduceOnEveryRank(5);
  all[0].withdrawn = 1;
  AbortRecorder comm;
  EXPECT_EQ(JudgeCollective(comm, 5, all, Withdrawals::kOfAnOp).code(),
            absl::StatusCode::kCancelled);
  EXPECT_TRUE(JudgeCollective(comm, 5, all, Withdrawals::kRefusalsOnly).ok());
  EXPECT_FALSE(comm.aborted.has_value());
}

TEST(AgreementJudge, ADisagreementNamesTheRankAndKeepsTheCommunicator) {
  std::vector<OpFingerprint> all = AllReduceOnEveryRank(5);
  all[1].count = 9;
  AbortRecorder comm;
  const absl::Status judged =
      JudgeCollective(comm, 5, all, Withdrawals::kOfAnOp);
  EXPECT_EQ(judged.code(), absl::StatusCode::kInvalidArgument) << judged;
  EXPECT_NE(judged.message().find("rank 1"), std::string::npos) << judged;
  EXPECT_FALSE(comm.aborted.has_value());
}

TEST(AgreementJudge, PointToPointHalvesTheSameWay) {
  BoundOp send;
  send.kind = OpKind::kSend;
  send.dtype = DType::kFloat32;
  send.count = 4;
  send.peer = 1;
  send.seq = 3;
  BoundOp recv = send;
  recv.kind = OpKind::kRecv;
  recv.peer = 0;
  AbortRecorder comm;
  EXPECT_TRUE(JudgePointToPoint(comm, 3, FingerprintOf(send, 0),
                                FingerprintOf(recv, 1), Withdrawals::kOfAnOp)
                  .ok());
  OpFingerprint late = FingerprintOf(recv, 1);
  late.seq = 4;
  const absl::Status judged = JudgePointToPoint(
      comm, 3, FingerprintOf(send, 0), late, Withdrawals::kRefusalsOnly);
  EXPECT_TRUE(IsOutOfStep(judged)) << judged;
  EXPECT_TRUE(comm.aborted.has_value());
}

}  // namespace
}  // namespace ccl
