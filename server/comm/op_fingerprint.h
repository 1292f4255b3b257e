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
  int32_t withdrawn;  // BoundOp::withdrawn
  int32_t reserved;
};
static_assert(sizeof(OpFingerprint) == 40);

OpFingerprint FingerprintOf(const BoundOp& op, int rank);
// "rank 1 runs all_reduce of 8 float32 (sum)".
std::string Describe(const OpFingerprint& f);

// CANCELLED naming the ranks whose op was withdrawn (BoundOp::withdrawn),
// OK if none was. Every rank sees the same fingerprints, so every rank drops
// the op alike.
absl::Status CheckWithdrawn(int64_t seq, const std::vector<OpFingerprint>& all);

// INVALID_ARGUMENT naming every rank that differs from rank 0 when the
// fingerprints of one collective (one per rank, in rank order) disagree.
// Every rank sees the same fingerprints, so every rank fails alike.
absl::Status CompareCollective(int64_t seq,
                               const std::vector<OpFingerprint>& all);
// INVALID_ARGUMENT unless `theirs` is the matching half of `mine` (a recv
// for a send, from this rank, of the same dtype and count).
absl::Status ComparePointToPoint(int64_t seq, const OpFingerprint& mine,
                                 const OpFingerprint& theirs);

}  // namespace ccl
