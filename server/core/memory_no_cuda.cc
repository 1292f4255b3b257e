#include "absl/strings/str_cat.h"
#include "server/core/memory.h"

namespace ccl {

absl::StatusOr<std::unique_ptr<Memory>> MakeMemory(Device device) {
  if (device.kind == DeviceKind::kCpu) return MakeHostMemory();
  return absl::UnimplementedError(absl::StrCat(
      "device ", DeviceName(device),
      ": this worker was built without CUDA/NCCL, so it has only the Gloo "
      "(cpu) backend; start it with device cpu"));
}

}  // namespace ccl
