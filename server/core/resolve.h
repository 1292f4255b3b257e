// Binding an op to this rank's tensors: checks what the op names against
// the tensor store and the group (existence, dtypes, sizes, roots and peers)
// and resolves it to pointers and counts the backend runs (BoundOp). Every
// error here is the client's, reported before anything is queued.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/comm/communicator.h"
#include "server/core/tensor_store.h"
#include "server/core/types.h"

namespace ccl {

struct Resolved {
  BoundOp op;
  // The tensors the op reads or writes, each once.
  std::vector<std::shared_ptr<Tensor>> tensors;
};

// INVALID_ARGUMENT, NOT_FOUND or UNIMPLEMENTED (from comm.Supports) when the
// op cannot run on this rank. `default_timeout` is used when the spec has
// none.
absl::StatusOr<Resolved> Resolve(const OpSpec& spec, const Communicator& comm,
                                 TensorStore& store,
                                 std::chrono::milliseconds default_timeout);

// What this rank runs at the seq of an op it refused for its own tensors
// (BoundOp::refused): the op's agreement and nothing else, so that the
// ranks that accepted it fail it cleanly instead of running on out of
// step. Only for a request that is itself well formed (a known kind other
// than nop, its root or peer a rank of the group, the agreement on): a
// malformed one is refused alike everywhere, and its seq is given back.
std::optional<BoundOp> RefusalStandIn(
    const OpSpec& spec, const Communicator& comm,
    std::chrono::milliseconds default_timeout);

}  // namespace ccl
