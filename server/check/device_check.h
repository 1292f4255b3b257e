// The device half of bench_check: patterns written and outputs counted by
// kernels on the tensors' GPU (only the count comes back), or through host
// copies for dtypes the kernels do not cover (fp8). Without CUDA in the build
// this is UNIMPLEMENTED (device_check_none.cc).
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/check/bench_check.h"

namespace ccl::check {

absl::StatusOr<int64_t> RunCheckedOnDevice(
    const BoundOp& op, int rank, int world, const std::vector<Buffer>& buffers,
    const std::function<absl::Status()>& run);

}  // namespace ccl::check
