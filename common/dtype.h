// The element types and reduce ops, alone in a header with no dependency, so
// that CUDA kernels (compiled by nvcc, which the rest of common/ would drag
// abseil into) use the same enums as the host code instead of mirroring
// them. Names, sizes and conversions are in common/types.h.
#pragma once

namespace ccl {

enum class DType : int {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kFp8E4M3,
  kFp8E5M2,
};

enum class ReduceOp : int { kSum, kProd, kMin, kMax, kAvg, kPremulSum };

}  // namespace ccl
