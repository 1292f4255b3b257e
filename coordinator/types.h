// Vocabulary shared by the coordinator's logic: member and world states, and
// the plumbing of parked calls (ids, callbacks, and closures deferred until
// the core's lock is released).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/types.h"

namespace ccl::coordinator {

// The states are common/types.h's, shared with the worker and the client.
using ::ccl::MemberState;
using ::ccl::MemberStateName;
using ::ccl::WorldState;
using ::ccl::WorldStateName;

// Where a worker runs, as it registers it and as its roster entry keeps it.
struct WorkerPlace {
  std::string address;  // host:port of its gRPC server
  std::string host;
  // The host and GPU NCCL takes the worker to be (the proto's
  // RegisterRequest says how): a registration that claims the GPU of a
  // live member on the same host is refused, since NCCL would refuse the
  // world. Empty device_bus_id: not a GPU.
  std::string host_id;
  std::string boot_id;
  std::string device_bus_id;
  Device device;

  WorkerPlace& place() { return *this; }
  const WorkerPlace& place() const { return *this; }
};

// Identifies a parked call so that its caller can cancel it (the client went
// away).
using WaitId = uint64_t;

template <typename T>
using Callback = std::function<void(absl::StatusOr<T>)>;

// Closures collected under the core's lock and run after it is released, so
// that no callback ever runs with the lock held.
using Deferred = std::vector<std::function<void()>>;

}  // namespace ccl::coordinator
