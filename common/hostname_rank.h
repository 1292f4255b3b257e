// Rank from a Kubernetes StatefulSet pod name: "ccworker-3" is ordinal 3.
// Works on every Kubernetes version (the apps.kubernetes.io/pod-index label
// needs 1.28) and needs no entrypoint script.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace ccl {

// The decimal suffix after the last '-'. INVALID_ARGUMENT when there is
// none, so that a misconfigured pod fails at start instead of joining with
// a rank the coordinator picks.
absl::StatusOr<int> RankFromHostname(const std::string& hostname);

}  // namespace ccl
