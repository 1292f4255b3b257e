// Kernels of the device-side bench check (check_kernels.cu), nccl-tests'
// approach: inputs are filled with the per-rank pattern on the device and
// the output is compared on the device, so only a count of wrong elements
// crosses to the host. The pattern and the expected values follow
// worker_core.cc's host check exactly (PatternValue, Reduced, Tolerance).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace ccl::cuda {

// What output element k of a rank should hold:
//   reduced:  the reduction over `world` ranks of element idx_base + k;
//   chunked:  rank k / chunk's pattern at idx_base + k % chunk;
//   else:     rank `src`'s pattern at idx_base + k.
struct CheckSpec {
  DType type = DType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  double premul_scale = 1.0;
  int world = 1;
  int64_t count = 0;
  bool reduced = false;
  bool chunked = false;
  int src = 0;
  int64_t idx_base = 0;
  int64_t chunk = 1;
  // Floating types divide avg exactly; integers truncate.
  bool floating = true;
  // Allowed error relative to max(1, |expected|); 0 for integers.
  double tolerance = 0;
};

// data[i] = pattern(rank, i) for i < n, on `stream`.
cudaError_t LaunchFillPattern(void* data, int64_t n, DType type, bool prod,
                              int rank, cudaStream_t stream);

// Adds the number of wrong elements of `output` to *wrong (device memory).
cudaError_t LaunchCountWrong(const void* output, const CheckSpec& spec,
                             unsigned long long* wrong, cudaStream_t stream);

}  // namespace ccl::cuda
