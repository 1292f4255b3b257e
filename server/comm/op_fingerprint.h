// What ranks compare before an op moves data, whatever the backend: Gloo
// trusts the sizes it is given (a peer sending more bytes than this rank
// posted ends the process from inside Gloo's transport thread) and NCCL
// hangs on ranks running different collectives, while dtypes of one size
// would silently mix on both. Fixed size, so that the exchange itself can
// never mismatch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/comm/communicator.h"

namespace ccl {

struct OpFingerprint {
  int32_t rank;  // of the op's group
  int32_t kind;
  int32_t dtype;
  int32_t reduce_op;  // -1 unless a reduction
  int64_t count;
  int32_t root;  // -1 unless rooted
  int32_t peer;
  // The host exchanges pair calls by their order on each rank, not by seq.
  // Ranks that skipped different seqs (one reached only some of them: its
  // client died mid-submit, or a rank refused it) would pair different ops
  // from then on; the seq shows it.
  int64_t seq;
  // BoundOp::withdrawn (1, or a bench's stop vote), or kRefusedVote for
  // BoundOp::refused.
  int32_t withdrawn;
  int32_t reserved;  // a bench's stop vote (bench_work.cc); 0 for ops
};
static_assert(sizeof(OpFingerprint) == 48);
// OpFingerprint::withdrawn of a rank that refused the op: negative, so a
// bench's stop votes (1 and up) never read as one.
inline constexpr int32_t kRefusedVote = -1;

OpFingerprint FingerprintOf(const BoundOp& op, int rank);
// "rank 1 runs all_reduce of 8 float32 (sum)".
std::string Describe(const OpFingerprint& f);

// FAILED_PRECONDITION naming the ranks that refused the op (BoundOp::
// refused), else CANCELLED naming those whose op was withdrawn
// (BoundOp::withdrawn), OK if none. Every rank sees the same fingerprints,
// so every rank drops the op alike.
absl::Status CheckWithdrawn(int64_t seq, const std::vector<OpFingerprint>& all);
// Only the first half: FAILED_PRECONDITION naming the ranks that refused the
// op, OK if none (a bench's checkpoint, whose own stop votes are not
// withdrawals of an op).
absl::Status CheckRefused(int64_t seq, const std::vector<OpFingerprint>& all);

// INVALID_ARGUMENT naming every rank that differs from rank 0 when the
// fingerprints of one collective (one per rank, in rank order) disagree.
// Every rank sees the same fingerprints, so every rank fails alike.
// ABORTED when they are of different seqs: the ranks are out of step, every
// later exchange would pair different ops too, and the caller must abort
// the communicator (IsOutOfStep) so that the group re-forms.
absl::Status CompareCollective(int64_t seq,
                               const std::vector<OpFingerprint>& all);
// INVALID_ARGUMENT unless `theirs` is the matching half of `mine` (a recv
// for a send, from this rank, of the same dtype and count); ABORTED, as
// above, when it is of another seq.
absl::Status ComparePointToPoint(int64_t seq, const OpFingerprint& mine,
                                 const OpFingerprint& theirs);
// Whether a Compare* error says the ranks are out of step.
bool IsOutOfStep(const absl::Status& status);

// Which withdrawals a judgement counts: an op's (refusals and withdrawals,
// CheckWithdrawn), a bench checkpoint's (refusals only: its stop votes are
// not withdrawals), or none (Gloo's own check of an op whose client asked
// for no agreement).
enum class Withdrawals { kOfAnOp, kRefusalsOnly, kNone };

// What every rank decides alike from one collective's fingerprints (one per
// rank, in rank order), in one order: ranks out of step abort `comm` (every
// later exchange would pair different ops) and fail ABORTED; then
// refusals and withdrawals, as `withdrawals` says; then a disagreement
// (INVALID_ARGUMENT). The one judgement behind ops' agreement
// (agreement.cc), Gloo's own check and a bench's checkpoints.
absl::Status JudgeCollective(Communicator& comm, int64_t seq,
                             const std::vector<OpFingerprint>& all,
                             Withdrawals withdrawals);
// The same for a send or recv (`mine`) and its peer's half (`theirs`).
absl::Status JudgePointToPoint(Communicator& comm, int64_t seq,
                               const OpFingerprint& mine,
                               const OpFingerprint& theirs,
                               Withdrawals withdrawals);

}  // namespace ccl
