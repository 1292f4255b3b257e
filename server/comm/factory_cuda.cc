// The factory's NCCL half in a build with CUDA.
#include "server/comm/factory_nccl.h"
#include "server/comm/nccl/nccl_communicator.h"
#include "server/comm/nccl/nccl_host.h"
#include "server/cuda/device_memory.h"

namespace ccl {

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    const CommunicatorConfig& config, KvStore& store) {
  auto nccl =
      NcclCommunicator::Create(config.rank, config.size, config.device.index,
                               config.prefix, store, config.timeout);
  if (!nccl.ok()) return nccl.status();
  return std::unique_ptr<Communicator>(*std::move(nccl));
}

std::optional<int> NcclRanksPerRoot(const Device& device) {
  if (device.kind != DeviceKind::kCuda) return std::nullopt;
  absl::StatusOr<int> ranks_per_root = nccl::RanksPerRootFromEnv();
  if (!ranks_per_root.ok()) return std::nullopt;
  return *ranks_per_root;
}

absl::StatusOr<std::string> CudaBusId(int index) {
  return cuda::PciBusId(index);
}

}  // namespace ccl
