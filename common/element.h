// Host-side element access for every dtype, through double. Used for fills,
// summaries and result checks; never on the data path of a collective.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace ccl {

// Reads element `index` of a buffer of `dtype` as a double.
double LoadElement(DType dtype, const void* data, size_t index);
// Writes `value` into element `index`, rounding to nearest even for the
// narrow float types and saturating (truncating toward zero) for integers.
void StoreElement(DType dtype, void* data, size_t index, double value);

// IEEE-style small floats, exposed for tests and the Gloo reduce functions.
uint16_t DoubleToHalf(double value);
double HalfToDouble(uint16_t bits);
uint16_t DoubleToBFloat16(double value);
double BFloat16ToDouble(uint16_t bits);
uint8_t DoubleToFp8E4M3(double value);
double Fp8E4M3ToDouble(uint8_t bits);
uint8_t DoubleToFp8E5M2(double value);
double Fp8E5M2ToDouble(uint8_t bits);

}  // namespace ccl
