#include "server/comm/op_fingerprint.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace ccl {
namespace {

bool SameCollective(const OpFingerprint& a, const OpFingerprint& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.count == b.count && a.root == b.root;
}

constexpr char kOutOfStep[] = "ranks are out of step";

absl::Status OutOfStep(int64_t seq, const std::string& where) {
  return absl::AbortedError(absl::StrCat(
      kOutOfStep, " at seq ", seq, ": ", where,
      ". A seq reached only some ranks (its client died while sending it, or "
      "a rank refused it) and the others went on without it; nothing was "
      "sent, and the communicator was aborted so that the group re-forms"));
}

}  // namespace

bool IsOutOfStep(const absl::Status& status) {
  return absl::IsAborted(status) &&
         absl::StrContains(status.message(), kOutOfStep);
}

OpFingerprint FingerprintOf(const BoundOp& op, int rank) {
  const bool reduction = IsReduction(op.kind);
  const bool rooted = HasRoot(op.kind);
  return OpFingerprint{rank,
                       static_cast<int32_t>(op.kind),
                       static_cast<int32_t>(op.dtype),
                       reduction ? static_cast<int32_t>(op.reduce_op) : -1,
                       op.count,
                       rooted ? op.root : -1,
                       op.peer,
                       op.seq,
                       op.refused     ? kRefusedVote
                       : op.withdrawn ? 1
                                      : 0,
                       0};
}

absl::Status CheckRefused(int64_t seq, const std::vector<OpFingerprint>& all) {
  std::vector<int32_t> refused;
  for (const OpFingerprint& f : all) {
    if (f.withdrawn == kRefusedVote) refused.push_back(f.rank);
  }
  if (refused.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "seq ", seq, " was refused at ", refused.size() == 1 ? "rank " : "ranks ",
      absl::StrJoin(refused, ", "),
      " (its caller there was told why: a tensor that rank does not hold, "
      "one that is busy, or one that does not fit the op), so no rank ran "
      "it and nothing was sent"));
}

absl::Status CheckWithdrawn(int64_t seq,
                            const std::vector<OpFingerprint>& all) {
  CCL_RETURN_IF_ERROR(CheckRefused(seq, all));
  std::vector<int32_t> ranks;
  for (const OpFingerprint& f : all) {
    if (f.withdrawn != 0) ranks.push_back(f.rank);
  }
  if (ranks.empty()) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat(
      "seq ", seq, " was withdrawn before its turn at ",
      ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "),
      " (the call there ended: its deadline came, or its client went away), "
      "so no rank ran it and nothing was sent"));
}

std::string Describe(const OpFingerprint& f) {
  const auto kind = static_cast<OpKind>(f.kind);
  std::string text =
      absl::StrCat("rank ", f.rank, " runs ", std::string(OpKindName(kind)));
  if (kind == OpKind::kBarrier || kind == OpKind::kNop) return text;
  if (kind == OpKind::kSend) absl::StrAppend(&text, " to rank ", f.peer);
  if (kind == OpKind::kRecv) absl::StrAppend(&text, " from rank ", f.peer);
  absl::StrAppend(&text, " of ", f.count, " ",
                  std::string(DTypeName(static_cast<DType>(f.dtype))));
  if (f.reduce_op >= 0) {
    absl::StrAppend(
        &text, " (",
        std::string(ReduceOpName(static_cast<ReduceOp>(f.reduce_op))), ")");
  }
  if (f.root >= 0) absl::StrAppend(&text, " with root ", f.root);
  return text;
}

absl::Status CompareCollective(int64_t seq,
                               const std::vector<OpFingerprint>& all) {
  if (all.empty()) return absl::OkStatus();
  std::map<int64_t, std::vector<int32_t>> at_seq;
  for (const OpFingerprint& f : all) at_seq[f.seq].push_back(f.rank);
  if (at_seq.size() > 1) {
    std::vector<std::string> where;
    for (const auto& [s, ranks] : at_seq) {
      where.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                                   absl::StrJoin(ranks, ", "), " at seq ", s));
    }
    return OutOfStep(seq, absl::StrJoin(where, "; "));
  }
  std::vector<std::string> differing;
  for (const OpFingerprint& other : all) {
    if (!SameCollective(other, all[0])) differing.push_back(Describe(other));
  }
  if (differing.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "ranks disagree on seq ", seq, ": ", Describe(all[0]), "; ",
      absl::StrJoin(differing, "; "),
      ". Nothing was sent; check the shapes and dtypes of the tensors on each "
      "rank"));
}

absl::Status ComparePointToPoint(int64_t seq, const OpFingerprint& mine,
                                 const OpFingerprint& theirs) {
  if (theirs.seq != mine.seq) {
    return OutOfStep(
        seq, absl::StrCat("rank ", mine.rank, " at seq ", mine.seq, "; rank ",
                          theirs.rank, " at seq ", theirs.seq));
  }
  const OpKind expected = static_cast<OpKind>(mine.kind) == OpKind::kSend
                              ? OpKind::kRecv
                              : OpKind::kSend;
  if (static_cast<OpKind>(theirs.kind) != expected ||
      theirs.peer != mine.rank || theirs.dtype != mine.dtype ||
      theirs.count != mine.count) {
    return absl::InvalidArgumentError(absl::StrCat(
        "send and recv do not match at seq ", seq, ": ", Describe(mine),
        " but ", Describe(theirs), ". Nothing was sent"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status Judge(Communicator& comm, absl::Status compared, int64_t seq,
                   const std::vector<OpFingerprint>& all,
                   Withdrawals withdrawals) {
  // Out of step first: fingerprints of different seqs say nothing about
  // this op, withdrawn or not, and the communicator must go.
  if (IsOutOfStep(compared)) {
    comm.Abort(compared);
    return compared;
  }
  switch (withdrawals) {
    case Withdrawals::kOfAnOp:
      CCL_RETURN_IF_ERROR(CheckWithdrawn(seq, all));
      break;
    case Withdrawals::kRefusalsOnly:
      CCL_RETURN_IF_ERROR(CheckRefused(seq, all));
      break;
    case Withdrawals::kNone:
      break;
  }
  return compared;
}

}  // namespace

absl::Status JudgeCollective(Communicator& comm, int64_t seq,
                             const std::vector<OpFingerprint>& all,
                             Withdrawals withdrawals) {
  return Judge(comm, CompareCollective(seq, all), seq, all, withdrawals);
}

absl::Status JudgePointToPoint(Communicator& comm, int64_t seq,
                               const OpFingerprint& mine,
                               const OpFingerprint& theirs,
                               Withdrawals withdrawals) {
  return Judge(comm, ComparePointToPoint(seq, mine, theirs), seq,
               {mine, theirs}, withdrawals);
}

}  // namespace ccl
