// The CUDA side of Memory (built only with CUDA): device memory of one GPU,
// copies staged through its pinned buffer, fills on the device where the
// kernels give the host's exact bytes.
#include <algorithm>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/element.h"
#include "server/core/fill.h"
#include "server/core/memory.h"
#include "server/cuda/device_memory.h"

namespace ccl {
namespace {

// Host fills (the few element-wise fills not done by a kernel) are computed
// in chunks of this size and then copied through the pinned buffer.
constexpr size_t kStagingBytes = 4 << 20;

bool IsConstant(FillKind kind) {
  return kind == FillKind::kOnes || kind == FillKind::kConstant ||
         kind == FillKind::kRank || kind == FillKind::kRankPlusOne;
}

class CudaMemory final : public Memory {
 public:
  explicit CudaMemory(int device) : device_(device) {}

  bool host_accessible() const override { return false; }
  absl::StatusOr<std::byte*> Allocate(size_t bytes) override {
    return cuda::Malloc(device_, bytes);
  }
  void Free(std::byte* data) override { cuda::Free(device_, data); }
  absl::Status CopyFromHost(std::byte* dst, const std::byte* src,
                            size_t bytes) override {
    return cuda::CopyToDevice(device_, dst, src, bytes);
  }
  absl::Status CopyToHost(std::byte* dst, const std::byte* src,
                          size_t bytes) override {
    return cuda::CopyToHost(device_, dst, src, bytes);
  }

  absl::Status Fill(std::byte* data, DType dtype, int64_t numel,
                    const ccl::Fill& fill, int rank) override {
    if (numel <= 0 || fill.kind == FillKind::kUninitialized) {
      return absl::OkStatus();
    }
    const size_t esize = DTypeSize(dtype);
    const size_t bytes = static_cast<size_t>(numel) * esize;
    if (fill.kind == FillKind::kZeros) {
      return cuda::FillZeros(device_, data, bytes);
    }
    if (IsConstant(fill.kind)) {
      alignas(8) unsigned char pattern[8] = {};
      StoreElement(dtype, pattern, 0, FillValue(fill, rank, 0));
      return cuda::FillRepeated(device_, data, bytes, pattern,
                                static_cast<int>(esize));
    }
    // Element-wise fills: by a kernel running the same code as the host
    // (fill_math.h), where that is bit-identical to FillBuffer.
    if (auto params = ElementFillFor(fill, rank, numel); params.has_value()) {
      return cuda::FillElements(device_, dtype, data, numel, *params);
    }
    // The rest (affine fills that could overflow or meet a NaN): computed on
    // the host (exactly FillBuffer's values and rounding) in chunks and
    // copied through the pinned staging buffer.
    std::vector<std::byte> staging;
    try {
      staging.resize(std::min(kStagingBytes, bytes));
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          "out of host memory for fill staging");
    }
    const int64_t per_chunk = static_cast<int64_t>(staging.size() / esize);
    for (int64_t begin = 0; begin < numel; begin += per_chunk) {
      const int64_t n = std::min(per_chunk, numel - begin);
      for (int64_t i = 0; i < n; ++i) {
        StoreElement(dtype, staging.data(), static_cast<size_t>(i),
                     FillValue(fill, rank, begin + i));
      }
      if (absl::Status s =
              cuda::CopyToDevice(device_, data + begin * esize, staging.data(),
                                 static_cast<size_t>(n) * esize);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  const int device_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Memory>> MakeMemory(Device device) {
  if (device.kind == DeviceKind::kCpu) return MakeHostMemory();
  const int count = cuda::DeviceCount();
  if (count == 0) {
    // Same code as a build without CUDA: nothing here can run on a GPU.
    return absl::UnimplementedError(absl::StrCat(
        "device ", DeviceName(device),
        ": no CUDA device is visible to this worker (NCCL backend built, "
        "but cudaGetDeviceCount found none); start it with device cpu"));
  }
  if (device.index < 0 || device.index >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("device ", DeviceName(device), " does not exist: ", count,
                     " CUDA device(s) are visible"));
  }
  if (absl::Status s = cuda::SetDevice(device.index); !s.ok()) return s;
  return std::unique_ptr<Memory>(std::make_unique<CudaMemory>(device.index));
}

}  // namespace ccl
