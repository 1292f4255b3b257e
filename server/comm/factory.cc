// MakeCommunicator: Gloo for the CPU in every build; CUDA devices go to the
// build's NCCL half (factory_cuda.cc, or factory_cpu.cc's refusal in a build
// without CUDA), so the core never names a backend.
#include "server/comm/factory.h"

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

std::string BackendFor(const Device& device) {
  return device.kind == DeviceKind::kCuda ? "nccl" : "gloo";
}

}  // namespace ccl
