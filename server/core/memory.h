// Where a worker's tensors live: host memory, or one CUDA device's. The
// tensor store and the worker core speak only to this interface, so nothing
// above it names CUDA; which implementations exist is the build's choice
// (memory_cuda.cc joins the build with CUDA).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/types.h"
#include "server/core/types.h"

namespace ccl {

class Memory {
 public:
  virtual ~Memory() = default;
  // Whether the host may read and write the bytes in place.
  virtual bool host_accessible() const = 0;
  // RESOURCE_EXHAUSTED when out of memory.
  virtual absl::StatusOr<std::byte*> Allocate(size_t bytes) = 0;
  virtual void Free(std::byte* data) = 0;
  // Complete when they return; any thread may call.
  virtual absl::Status CopyFromHost(std::byte* dst, const std::byte* src,
                                    size_t bytes) = 0;
  virtual absl::Status CopyToHost(std::byte* dst, const std::byte* src,
                                  size_t bytes) = 0;
  // The same bytes as FillBuffer (fill.h) on the host.
  virtual absl::Status Fill(std::byte* data, DType dtype, int64_t numel,
                            const ccl::Fill& fill, int rank) = 0;
};

std::unique_ptr<Memory> MakeHostMemory();

// The memory of `device`: INVALID_ARGUMENT for a device that does not exist,
// UNIMPLEMENTED for a CUDA device when the build or the machine has none.
absl::StatusOr<std::unique_ptr<Memory>> MakeMemory(Device device);

}  // namespace ccl
