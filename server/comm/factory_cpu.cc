// MakeCommunicator in a build without CUDA: Gloo only.
#include "absl/strings/str_cat.h"
#include "server/comm/agreement.h"
#include "server/comm/factory.h"
#include "server/comm/gloo/gloo_communicator.h"

namespace ccl {

absl::StatusOr<std::unique_ptr<Communicator>> MakeCommunicator(
    const CommunicatorConfig& config, KvStore& store) {
  if (config.device.kind != DeviceKind::kCpu) {
    return absl::UnimplementedError(
        absl::StrCat("device ", DeviceName(config.device),
                     ": this build has no NCCL backend"));
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

std::optional<int> NcclRanksPerRoot(const Device&) { return std::nullopt; }

}  // namespace ccl
