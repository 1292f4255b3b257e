// The factory's NCCL half in a build without CUDA: no NCCL backend.
#include "absl/strings/str_cat.h"
#include "server/comm/factory_nccl.h"

namespace ccl {

absl::StatusOr<std::unique_ptr<Communicator>> MakeNcclCommunicator(
    const CommunicatorConfig& config, KvStore&) {
  return absl::UnimplementedError(
      absl::StrCat("device ", DeviceName(config.device),
                   ": this build has no NCCL backend"));
}

std::optional<int> NcclRanksPerRoot(const Device&) { return std::nullopt; }

absl::StatusOr<std::string> CudaBusId(int index) {
  return absl::UnimplementedError(absl::StrCat(
      "device cuda:", index, ": this build has no CUDA (no NCCL backend)"));
}

}  // namespace ccl
