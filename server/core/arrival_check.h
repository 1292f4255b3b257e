// The arrival diagnosis of a failed op: which ranks never reached it.
#pragma once

#include <string>
#include <vector>

#include "server/comm/kv_store.h"
#include "server/core/executor.h"

namespace ccl {

// When an op of a group times out or loses a peer, each rank that got that
// far leaves a mark in the generation's KV store and looks for the others'
// marks for a moment: the ranks without one never reached the op (dead,
// stopped, or still behind on an earlier one), which is what a person
// debugging a hang wants named. Costs nothing until an op fails.
Executor::Diagnosis ArrivalCheck(KvStore* kv, std::string group, int group_rank,
                                 std::vector<int> world_ranks);

}  // namespace ccl
