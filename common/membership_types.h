// What a worker and the coordinator say to each other about membership, in
// plain types: the worker's membership machine (server/core/membership.h)
// builds these and the coordinator's core (coordinator/coordinator_core.h)
// takes them; each side's gRPC adapter maps them to ccl.v1 messages.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace ccl {

// A heartbeat, or a seal: a beat with a seal reason.
struct HeartbeatRequest {
  int rank = 0;
  int64_t generation = 0;
  // The worker's id for the life of its process; the worker's gRPC adapter
  // fills it in.
  std::string worker_id;
  int64_t tensor_count = 0;
  int64_t tensor_bytes = 0;
  // Non-empty: the worker's world communicator is broken; asks for a new
  // generation (granted when every member is ready).
  std::string reform_reason;
  // The secret the coordinator issued at registration.
  std::string secret;
  // Per group the worker is a member of in `generation`: every op below
  // this seq has ended there (HeartbeatRequest.finished_below); published
  // as the generation's ProgressKey.
  std::map<std::string, int64_t> finished_below;
  // Non-empty: a communicator of the worker broke just now; the generation
  // takes no new ops (HeartbeatRequest.seal_reason). reform_reason follows.
  std::string seal_reason;
};

}  // namespace ccl
