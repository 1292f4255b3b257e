#include "server/core/fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/element.h"

namespace ccl {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool IsConstant(FillKind kind) {
  return kind == FillKind::kOnes || kind == FillKind::kConstant ||
         kind == FillKind::kRank || kind == FillKind::kRankPlusOne;
}

}  // namespace

bool DependsOnRank(const Fill& fill) {
  switch (fill.kind) {
    case FillKind::kRank:
    case FillKind::kRankPlusOne:
    case FillKind::kArangePlusRank:
    case FillKind::kRandom:
      return true;
    case FillKind::kAffine:
      return fill.rank_scale != 0;
    default:
      return false;
  }
}

double FillValue(const Fill& fill, int rank, int64_t index) {
  const double i = static_cast<double>(index);
  switch (fill.kind) {
    case FillKind::kZeros:
    case FillKind::kUninitialized:
      return 0;
    case FillKind::kOnes:
      return 1;
    case FillKind::kConstant:
      return fill.value;
    case FillKind::kRank:
      return rank;
    case FillKind::kRankPlusOne:
      return rank + 1;
    case FillKind::kArange:
      return i;
    case FillKind::kArangePlusRank:
      return i + rank;
    case FillKind::kRandom: {
      // Counter-based so any element can be recomputed on its own.
      const uint64_t stream =
          SplitMix64(fill.seed ^ SplitMix64(static_cast<uint64_t>(rank)));
      const uint64_t bits = SplitMix64(stream + static_cast<uint64_t>(index));
      return static_cast<double>(bits >> 11) * 0x1.0p-53;
    }
    case FillKind::kAffine:
      return fill.value + rank * fill.rank_scale + i * fill.step;
  }
  return 0;
}

void FillBuffer(DType dtype, void* data, int64_t numel, const Fill& fill,
                int rank) {
  if (numel <= 0 || fill.kind == FillKind::kUninitialized) return;
  const size_t esize = DTypeSize(dtype);
  const size_t bytes = static_cast<size_t>(numel) * esize;
  if (fill.kind == FillKind::kZeros) {
    std::memset(data, 0, bytes);
    return;
  }
  if (IsConstant(fill.kind)) {
    StoreElement(dtype, data, 0, FillValue(fill, rank, 0));
    // Doubling copies replicate the encoded element in O(log n) memcpys.
    auto* bytes_ptr = static_cast<std::byte*>(data);
    size_t filled = esize;
    while (filled < bytes) {
      const size_t n = std::min(filled, bytes - filled);
      std::memcpy(bytes_ptr + filled, bytes_ptr, n);
      filled += n;
    }
    return;
  }
  for (int64_t i = 0; i < numel; ++i) {
    StoreElement(dtype, data, static_cast<size_t>(i), FillValue(fill, rank, i));
  }
}

std::optional<ElementFillParams> ElementFillFor(const Fill& fill, int rank,
                                                int64_t numel) {
  ElementFillParams p;
  p.rank = rank;
  switch (fill.kind) {
    case FillKind::kArange:
      p.kind = ElementFillKind::kArange;
      return p;
    case FillKind::kArangePlusRank:
      p.kind = ElementFillKind::kArangePlusRank;
      return p;
    case FillKind::kRandom:
      p.kind = ElementFillKind::kRandom;
      p.random_stream =
          SplitMix64(fill.seed ^ SplitMix64(static_cast<uint64_t>(rank)));
      return p;
    case FillKind::kAffine: {
      // Every intermediate of value + rank * rank_scale + i * step is at most
      // this bound (rounding is monotonic), so with headroom no infinity and
      // hence no NaN can appear; NaN / inf inputs fail the check.
      const double bound =
          std::fabs(fill.value) +
          std::fabs(static_cast<double>(rank)) * std::fabs(fill.rank_scale) +
          std::fabs(static_cast<double>(numel)) * std::fabs(fill.step);
      if (!(bound <= DBL_MAX / 4)) return std::nullopt;
      p.kind = ElementFillKind::kAffine;
      p.value = fill.value;
      p.rank_scale = fill.rank_scale;
      p.step = fill.step;
      return p;
    }
    default:
      return std::nullopt;
  }
}

}  // namespace ccl
