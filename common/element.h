// Host-side element access for every dtype, through double. Used for fills,
// summaries and result checks; never on the data path of a collective.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace ccl {

// Reads element `index` of a buffer of `dtype` as a double.
double LoadElement(DType dtype, const void* data, size_t index);
// Writes `value` into element `index`, rounding to nearest even for the
// narrow float types and saturating (truncating toward zero) for integers.
void StoreElement(DType dtype, void* data, size_t index, double value);

// The narrow float dtypes (float16, bfloat16, fp8_e4m3, fp8_e5m2) as bits:
// the bits of `dtype` nearest `value` (round to nearest even, inf past the
// largest finite value where the format has inf, NaN where it has not), and
// the value of `bits`. Exposed for tests; 0 for any other dtype.
uint32_t EncodeNarrowFloat(DType dtype, double value);
double DecodeNarrowFloat(DType dtype, uint32_t bits);

// `value` as an element of `dtype` holds it (StoreElement then LoadElement).
double RoundToDType(DType dtype, double value);

// The expected result of reducing `world` ranks' element values with
// `reduce_op`, computed in double and rounded to `dtype` once at the end:
// the reference both the bench's result check and the conformance suite
// compare a backend against (the backends reduce on their own code paths,
// so a bug here fails those checks rather than hiding one). `contribution`
// gives rank r's value, premul_sum's scale already applied; avg divides
// the sum, truncating toward zero for integers as NCCL does.
template <typename Contribution>
double ReferenceReduce(DType dtype, ReduceOp reduce_op, int world,
                       Contribution contribution) {
  double acc = contribution(0);
  for (int r = 1; r < world; ++r) {
    const double v = contribution(r);
    switch (reduce_op) {
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = acc < v ? acc : v;
        break;
      case ReduceOp::kMax:
        acc = acc > v ? acc : v;
        break;
      default:  // sum, avg, premul_sum
        acc += v;
        break;
    }
  }
  if (reduce_op == ReduceOp::kAvg) {
    acc = IsFloatingPoint(dtype) ? acc / world : std::trunc(acc / world);
  }
  return RoundToDType(dtype, acc);
}

}  // namespace ccl
