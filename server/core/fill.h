// Host-side fills of tensor memory, shared by Alloc and by Bench's result
// check. Deterministic for a given (fill, rank) so that every rank can
// recompute what any other rank holds.
#pragma once

#include <cstdint>
#include <optional>

#include "common/types.h"
#include "server/core/types.h"
#include "server/cuda/fill_math.h"

namespace ccl {

// Whether what `fill` writes differs from rank to rank (a request with such
// a fill must wait until this worker knows its rank).
bool DependsOnRank(const Fill& fill);

// Value element `index` of a tensor filled with `fill` on `rank` gets (before
// rounding to the dtype). Uninitialized reads as 0.
double FillValue(const Fill& fill, int rank, int64_t index);

// Fills `numel` elements at `data`. Zeros and constants are written with a
// memset / replicated pattern, the rest element by element.
void FillBuffer(DType dtype, void* data, int64_t numel, const Fill& fill,
                int rank);

// The element-wise fills (arange, arange + rank, affine, random) as
// parameters of ElementFillValue / the device fill kernel, which then give
// exactly FillValue + StoreElement's bytes. nullopt for the other kinds, and
// for affine fills whose arithmetic could overflow or meet a NaN over `numel`
// elements: a NaN's sign and payload differ between x86 and CUDA, so those
// stay on the host path.
std::optional<ElementFillParams> ElementFillFor(const Fill& fill, int rank,
                                                int64_t numel);

}  // namespace ccl
