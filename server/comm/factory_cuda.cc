// MakeCommunicator in a build with CUDA: NCCL for CUDA devices, Gloo for
// the CPU.
#include "server/comm/agreement.h"
#include "server/comm/factory.h"
#include "server/comm/gloo/gloo_communicator.h"
#include "server/comm/nccl/nccl_communicator.h"
#include "server/comm/nccl/nccl_host.h"

namespace ccl {

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(
    const CommunicatorConfig& config, KvStore& store) {
  if (config.device.kind == DeviceKind::kCuda) {
    auto nccl =
        NcclCommunicator::Create(config.rank, config.size, config.device.index,
                                 config.prefix, store, config.timeout);
    if (!nccl.ok()) return nccl.status();
    return WithAgreement(*std::move(nccl));
  }
  auto gloo =
      GlooCommunicator::Create(config.rank, config.size, config.data_host,
                               config.prefix, store, config.timeout);
  if (!gloo.ok()) return gloo.status();
  return WithAgreement(*std::move(gloo));
}

std::string BackendFor(const Device& device) {
  return device.kind == DeviceKind::kCuda ? "nccl" : "gloo";
}

std::optional<int> NcclRanksPerRoot(const Device& device) {
  if (device.kind != DeviceKind::kCuda) return std::nullopt;
  absl::StatusOr<int> ranks_per_root = nccl::RanksPerRootFromEnv();
  if (!ranks_per_root.ok()) return std::nullopt;
  return *ranks_per_root;
}

}  // namespace ccl
