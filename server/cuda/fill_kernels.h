// Kernels of the tensor store's device fills (fill_kernels.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "server/cuda/fill_math.h"

namespace ccl::cuda {

// Writes `bytes` bytes at `dst` as repetitions of the `esize`-byte
// `pattern` (esize 1, 2, 4 or 8; bytes a multiple of esize).
cudaError_t LaunchReplicate(void* dst, size_t bytes, const void* pattern,
                            int esize, cudaStream_t stream);

// Writes element i of the `numel`-element `dtype` tensor at `dst` as
// StoreFillElement<dtype>(ElementFillValue(params, i)) (fill_math.h), for
// i in [0, numel).
cudaError_t LaunchElementFill(DType dtype, void* dst, int64_t numel,
                              const ElementFillParams& params,
                              cudaStream_t stream);

}  // namespace ccl::cuda
