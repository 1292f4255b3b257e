// Makes the world communicator of a generation for the worker's device: the
// one place that names a backend (NCCL for CUDA devices, Gloo for the CPU),
// as c10d picks a backend by the tensor's device. Subgroups come from
// Communicator::Split.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/types.h"
#include "server/comm/communicator.h"
#include "server/comm/kv_store.h"

namespace ccl {

struct CommunicatorConfig {
  Device device;
  int rank = 0;
  int size = 1;
  // Rendezvous keys go under this ("gen3/world").
  std::string prefix;
  // Address Gloo's TCP transport binds to.
  std::string data_host = "127.0.0.1";
  // Bounds the rendezvous; also the backend's default op timeout.
  std::chrono::milliseconds timeout{60000};
};

// Blocks until every rank joined or the timeout passed. `store` must
// outlive the communicator and every communicator split from it.
absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(
    const CommunicatorConfig& config, KvStore& store);

// "nccl" or "gloo": what MakeCommunicator gives `device`.
std::string BackendFor(const Device& device);

// The ranks per NCCL unique id the world communicator of `device` will plan
// with (common/unique_id_plan.h), so that the worker can ask the coordinator
// to hand the ids over with its registration; nullopt when the world is not
// NCCL's, or when $CCL_NCCL_RANKS_PER_ROOT is malformed (the communicator
// reports that itself, and a worker that does not ask reads the ids itself).
std::optional<int> NcclRanksPerRoot(const Device& device);

// Which GPU of which host NCCL takes a worker on `device` to be: NCCL tells
// hosts apart by $NCCL_HOSTID when it is set, else by the hostname and the
// kernel's boot id, and GPUs by PCI bus id; it refuses a communicator in
// which two ranks of one host share a GPU ("Duplicate GPU detected"). The
// worker registers with this, so that the coordinator refuses the second
// claim with a message rather than letting every init fail.
struct GpuClaim {
  std::string host_id;  // $NCCL_HOSTID (any device); empty when unset
  std::string boot_id;  // /proc/sys/kernel/random/boot_id; empty on CPU
  std::string bus_id;   // empty for a CPU device
};
// UNIMPLEMENTED for a CUDA device in a build without CUDA; the device's
// error (e.g. no such device) from CUDA.
absl::StatusOr<GpuClaim> GpuClaimOf(const Device& device);

}  // namespace ccl
