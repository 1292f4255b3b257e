// The arrival diagnosis of a failed op: which ranks never reached it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/world_keys.h"  // PeerAddressKey, ProgressKey
#include "server/comm/kv_store.h"
#include "server/core/executor.h"

namespace ccl {

// When an op of a group times out or loses a peer, each rank that got that
// far leaves a mark in the generation's KV store and looks for the others'
// marks for a moment: the ranks without one never reached the op (dead,
// stopped, or still behind on an earlier one), which is what a person
// debugging a hang wants named. Costs nothing until an op fails.
//
// It also tries a TCP connection to every peer's worker address (the
// "addr/<world rank>" keys of its generation's store, PeerAddressKey) and
// names those it cannot reach: a link that drops or
// rejects packets between two workers shows as "rank 1 (10.0.0.2:4100) is
// unreachable from here: connect timed out after 500 ms", where the backend
// only saw a timeout or a reset. Each rank's mark carries the peers it
// could not reach, so every rank of the group can say who cannot reach whom.
//
// It takes at most kArrivalCheckTime besides its KV round trips (the probe,
// then the window for the others' marks): work that must be answered by a
// deadline stops that much before it to leave the diagnosis its time.
inline constexpr std::chrono::milliseconds kArrivalCheckTime{1500};
Executor::Diagnosis ArrivalCheck(KvStore* kv, std::string group, int group_rank,
                                 std::vector<int> world_ranks);

}  // namespace ccl
