// KV keys of a generation that the coordinator and the workers both know.
// Header-only and free of gRPC: the coordinator's logic, the worker's core
// and the rendezvous benchmark include it.
#pragma once

#include <string>

#include "absl/strings/str_cat.h"

namespace ccl {

// A world rank's worker address (host:port of its gRPC server), which a
// rank's failure diagnosis connects to (server/core/arrival_check.h). The
// coordinator sets it for every member when a generation starts, from the
// address each registered with (RegisterResponse.peer_addresses_published);
// a worker whose coordinator predates that sets its own.
inline std::string PeerAddressKey(int world_rank) {
  return absl::StrCat("addr/", world_rank);
}

// How far a world rank got in `group`: every op below the seq it holds has
// ended there, as its last heartbeat said (HeartbeatRequest.finished_below;
// the coordinator sets it). A failed op's arrival diagnosis reads it for the
// ranks that left no mark: one past the op finished it, so it must not be
// named as never having reached it.
inline std::string ProgressKey(const std::string& group, int world_rank) {
  return absl::StrCat("progress/", group, "/", world_rank);
}

}  // namespace ccl
