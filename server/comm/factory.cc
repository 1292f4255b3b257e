// MakeCommunicator: Gloo for the CPU in every build; CUDA devices go to the
// build's NCCL half (factory_cuda.cc, or factory_cpu.cc's refusal in a build
// without CUDA), so the core never names a backend.
#include "server/comm/factory.h"

#include <cstdlib>
#include <fstream>

#include "server/comm/agreement.h"
#include "server/comm/factory_nccl.h"
#include "server/comm/gloo/gloo_communicator.h"

namespace ccl {

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(
    const CommunicatorConfig& config, KvStore& store) {
  if (config.device.kind == DeviceKind::kCuda) {
    auto nccl = MakeNcclCommunicator(config, store);
    if (!nccl.ok()) return nccl.status();
    return WithAgreement(*std::move(nccl));
  }
  auto gloo =
      GlooCommunicator::Create(config.rank, config.size, config.data_host,
                               config.prefix, store, config.timeout);
  if (!gloo.ok()) return gloo.status();
  return WithAgreement(*std::move(gloo));
}

absl::StatusOr<GpuClaim> GpuClaimOf(const Device& device) {
  GpuClaim claim;
  // Reported on every device (ccctl status groups ranks by host); only a
  // GPU's claim is checked.
  if (const char* id = std::getenv("NCCL_HOSTID"); id != nullptr) {
    claim.host_id = id;
  }
  if (device.kind != DeviceKind::kCuda) return claim;
  // As NCCL reads it: the first word of the file; none on a system without
  // it, where NCCL hashes the hostname alone.
  std::ifstream boot_id("/proc/sys/kernel/random/boot_id");
  boot_id >> claim.boot_id;
  absl::StatusOr<std::string> bus_id = CudaBusId(device.index);
  if (!bus_id.ok()) return bus_id.status();
  claim.bus_id = *std::move(bus_id);
  return claim;
}

std::string BackendFor(const Device& device) {
  return device.kind == DeviceKind::kCuda ? "nccl" : "gloo";
}

}  // namespace ccl
