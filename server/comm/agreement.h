// The cross-rank agreement check, once for every backend: before an op moves
// data, its ranks exchange a fingerprint of it (kind, dtype, count, root,
// peer) and compare. Different collectives at one seq would hang NCCL,
// mismatched sizes make Gloo's transport end the process, and dtypes of one
// size would silently mix; with the check they fail cleanly, on every rank,
// with a message naming what each rank ran. The check rides on the
// backend's host exchanges (Communicator::AllGatherHost / ExchangeHost).
#pragma once

#include <memory>
#include <vector>

#include "server/comm/communicator.h"

namespace ccl {

// Wraps `inner` (and every communicator split from it) so that Launch and
// LaunchBatch agree first when an op asks for it (Agreement::kCheck). A
// batch agrees on all of its ops in one exchange.
std::unique_ptr<Communicator> WithAgreement(
    std::unique_ptr<Communicator> inner);

}  // namespace ccl
