// Vocabulary shared by the coordinator's logic: member and world states, and
// the plumbing of parked calls (ids, callbacks, and closures deferred until
// the core's lock is released).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ccl::coordinator {

enum class MemberState { kJoining, kReady, kLost, kLeft };
enum class WorldState { kForming, kComplete, kDegraded };

std::string_view MemberStateName(MemberState state);
std::string_view WorldStateName(WorldState state);

// Identifies a parked call so that its caller can cancel it (the client went
// away).
using WaitId = uint64_t;

template <typename T>
using Callback = std::function<void(absl::StatusOr<T>)>;

// Closures collected under the core's lock and run after it is released, so
// that no callback ever runs with the lock held.
using Deferred = std::vector<std::function<void()>>;

}  // namespace ccl::coordinator
