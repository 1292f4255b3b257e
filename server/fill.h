// Host-side fills of tensor memory, shared by Alloc and by Bench's result
// check. Deterministic for a given (fill, rank) so that every rank can
// recompute what any other rank holds.
#pragma once

#include <cstdint>

#include "common/types.h"
#include "server/worker_core.h"

namespace ccl {

// Value element `index` of a tensor filled with `fill` on `rank` gets (before
// rounding to the dtype). Uninitialized reads as 0.
double FillValue(const Fill& fill, int rank, int64_t index);

// Fills `numel` elements at `data`. Zeros and constants are written with a
// memset / replicated pattern, the rest element by element.
void FillBuffer(DType dtype, void* data, int64_t numel, const Fill& fill,
                int rank);

}  // namespace ccl
