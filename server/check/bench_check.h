// Result checks of benchmark runs (`ccctl bench -c`, nccl-tests' -c): each
// rank fills its inputs with a pattern whose reductions stay exact in every
// dtype for small worlds, runs the op once, and counts the output elements
// that differ from what it should hold. Host memory is checked on the host;
// CUDA memory on the device, where only the count comes back (device_check).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/types.h"
#include "server/comm/communicator.h"

namespace ccl::check {

// A tensor the op's pointers lie in.
struct Buffer {
  std::byte* data = nullptr;
  int64_t bytes = 0;
  Device device;
};

// Prepares `op`'s buffers (zeroed outputs, patterned inputs), calls `run`
// (which runs `op` once on every rank), and returns how many output elements
// of this rank are wrong. `buffers` are the tensors op.input and op.output
// point into.
absl::StatusOr<int64_t> RunChecked(const BoundOp& op, int rank, int world,
                                   const std::vector<Buffer>& buffers,
                                   const std::function<absl::Status()>& run);

}  // namespace ccl::check
