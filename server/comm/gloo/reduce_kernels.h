// The arithmetic of the CPU backend's reductions: one kernel per dtype and
// reduce op over two arrays, premul_sum's scaling and avg's division.
//
// The rule, the same for every narrow float (float16, bfloat16, fp8 e4m3 and
// e5m2) and chosen to give what NCCL gives on a GPU: each step widens both
// operands to float, applies the op in float and rounds once to the dtype,
// to nearest even. Float holds every sum and product of two narrow values
// exactly or with at least 2p+2 bits, so this equals NCCL's bfloat16
// arithmetic (__hadd, __hmul) and its fp8 arithmetic (through half). fp8
// results past the largest finite value saturate to it, as NCCL's
// conversions (__NV_SATFINITE) do; float16 and bfloat16 overflow to inf.
// min and max of floating types ignore a NaN operand (fminf and fmaxf, as
// NCCL); integer sums and products wrap.
#pragma once

#include <cstddef>

#include "common/types.h"

namespace ccl {

// out[i] = a[i] op b[i] for n elements; out may be a or b.
using ReduceKernel = void (*)(void* out, const void* a, const void* b,
                              size_t n);

// The kernel for `dtype` and `op`; avg and premul_sum get the sum (they
// scale around it). nullptr when the CPU backend cannot reduce `dtype`.
ReduceKernel ReduceKernelFor(DType dtype, ReduceOp op);

// out[i] = in[i] * scale, with `scale` first rounded to `dtype` (NCCL's
// premul_sum takes its scalar in the op's dtype) and one rounding of each
// product. out may be in.
void ScaleElements(DType dtype, void* out, const void* in, size_t n,
                   double scale);

// data[i] / divisor, rounded once: avg's last step. Integers truncate
// toward zero, as NCCL's avg does.
void DivideElements(DType dtype, void* data, size_t n, int divisor);

}  // namespace ccl
