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

// What this rank runs at the seqs of a request it refused for its own
// tensors (BoundOp::refused): the agreement of each of its ops that has
// one, and nothing else, so that the ranks that accepted the request fail
// it cleanly instead of running on out of step. `specs`: the op, or a
// plan's ops in order. nullopt for a request that is itself malformed (an
// unknown kind, a root or peer outside the group...): every rank refuses
// that alike, and its seqs are given back. Empty when no op has an
// agreement to stand in for (nops, or every op skips it).
std::optional<std::vector<BoundOp>> RefusalStandIns(
    const std::vector<OpSpec>& specs, const Communicator& comm,
    std::chrono::milliseconds default_timeout);

}  // namespace ccl
