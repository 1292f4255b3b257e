// Kernels of the tensor store's device fills (fill_kernels.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace ccl::cuda {

// Writes `bytes` bytes at `dst` as repetitions of the `esize`-byte
// `pattern` (esize 1, 2, 4 or 8; bytes a multiple of esize).
cudaError_t LaunchReplicate(void* dst, size_t bytes, const void* pattern,
                            int esize, cudaStream_t stream);

}  // namespace ccl::cuda
