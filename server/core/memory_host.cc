#include <cstdlib>
#include <cstring>

#include "common/huge_pages.h"
#include "server/core/fill.h"
#include "server/core/memory.h"

namespace ccl {
namespace {

// Aligned for vectorised reductions (Gloo) and any dtype.
constexpr size_t kHostAlignment = 64;

class HostMemory final : public Memory {
 public:
  bool host_accessible() const override { return true; }
  absl::StatusOr<std::byte*> Allocate(size_t bytes) override {
    const size_t rounded =
        std::max<size_t>(kHostAlignment, (bytes + kHostAlignment - 1) /
                                             kHostAlignment * kHostAlignment);
    auto* data =
        static_cast<std::byte*>(std::aligned_alloc(kHostAlignment, rounded));
    if (data == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("out of host memory allocating ", bytes, " bytes"));
    }
    // Before the fill touches it: a large tensor's first touch in 4 KiB
    // pages is most of its allocation's time (common/huge_pages.h).
    AdviseHugePages(data, rounded);
    return data;
  }
  void Free(std::byte* data) override { std::free(data); }
  absl::Status CopyFromHost(std::byte* dst, const std::byte* src,
                            size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(std::byte* dst, const std::byte* src,
                          size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Fill(std::byte* data, DType dtype, int64_t numel,
                    const ccl::Fill& fill, int rank) override {
    FillBuffer(dtype, data, numel, fill, rank);
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<Memory> MakeHostMemory() {
  return std::make_unique<HostMemory>();
}

}  // namespace ccl
