// What the coordinator, its workers and its clients say to each other about
// membership, in plain types: the worker's membership machine
// (server/core/membership.h) builds heartbeats and the coordinator's core
// (coordinator/coordinator_core.h) takes them; the core describes members
// and the client library (client/types.h) reads them. The proto mappings
// are in common/proto_convert.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/types.h"

namespace ccl {

// One member of the world as the coordinator describes it (World.members):
// the coordinator's snapshot and the client's view are this.
struct MemberInfo {
  int rank = 0;
  std::string address;  // host:port of the worker's gRPC server
  std::string host;
  // The host id the worker registered with (ccworker --host-id; empty: its
  // hostname is its host) and its GPU's PCI bus id (empty on CPU).
  std::string host_id;
  std::string device_bus_id;
  Device device;
  MemberState state = MemberState::kUnknown;
  int64_t last_seen_age_ms = 0;
  // A worker picks it once per process: tells a restart from a duplicate.
  std::string worker_id;
  // As of the worker's last heartbeat.
  int64_t tensor_count = 0;
  int64_t tensor_bytes = 0;
};

// The world as the coordinator describes it (World): its snapshot and the
// client's view are this.
struct WorldInfo {
  int64_t generation = 0;
  int world_size = 0;
  WorldState state = WorldState::kUnknown;
  // Sorted by rank; ranks nobody holds are absent.
  std::vector<MemberInfo> members;
  int64_t heartbeat_interval_ms = 0;
  int64_t heartbeat_timeout_ms = 0;
  // This generation is `shrunk_from_generation` without `excluded_ranks`
  // (ranks of that generation); 0 when it is not a shrink.
  int64_t shrunk_from_generation = 0;
  std::vector<int> excluded_ranks;
  // Non-empty while the generation is ending (a rank's communicator broke,
  // or it asked to re-form): why. No new op runs in it; the next generation
  // follows by itself.
  std::string reforming_reason;
  // The last generation's reforming_reason when this one began after it.
  std::string began_after;
};

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
