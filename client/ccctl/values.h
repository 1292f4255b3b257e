// Tensor values as a person types and reads them on the command line. Every
// integer dtype round-trips exactly (an int64 never passes through a
// double); a value the dtype cannot hold is refused, never rounded or
// clamped quietly. Floats round to the nearest value of their type, as
// torch.tensor does; one beyond the type's largest finite value is refused.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ccctl/expression.h"
#include "common/types.h"

namespace ccl::ctl {

// "1,2,3" as the raw bytes of elements of `dtype`. INVALID_ARGUMENT names
// the value at fault and the range it must lie in.
absl::StatusOr<std::string> EncodeValues(DType dtype, std::string_view text);

// The values an experiment computed, stored as EncodeValues stores typed
// text: integers exact, refused where the dtype cannot hold them. No values:
// no bytes.
absl::StatusOr<std::string> EncodeNumbers(DType dtype,
                                          const std::vector<Number>& values);

// The elements in `bytes` as text: integers exactly, floats as FormatValue.
std::vector<std::string> DecodeValues(DType dtype, std::string_view bytes);

// Whether a double can carry every value of `dtype` exactly (what a
// tensor's summary travels as): all but int64.
bool DoubleHoldsEveryValue(DType dtype);

}  // namespace ccl::ctl
