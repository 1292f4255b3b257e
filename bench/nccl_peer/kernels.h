// Device-side data check of nccl_peer_bench: every rank fills its input
// with a pattern that depends on (rank, element index, seed), and after one
// op each rank counts, on its GPU, the output elements that differ from what
// the op must produce from the other ranks' patterns. Nothing is copied to
// the host but the count.
//
// The values are small integers, exactly representable in every dtype
// (fp8 included), chosen per reduce op so that sums, products, minima and
// maxima over the ranks stay exact and the check needs no tolerance except
// for avg (a division).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ccl::peer {

// kMove: an op that moves data without reducing it.
inline constexpr int kMove = -1;

struct Pattern {
  int dtype = 7;  // ncclDataType_t (DType in core.h)
  int redop = 0;  // ncclRedOp_t (RedOp in core.h), or kMove
  int nranks = 1;
  uint32_t seed = 0;
};

// What one rank's output window must hold; k is the index in the window.
struct Expectation {
  enum Kind : int {
    kReduced = 0,  // redop over every rank q of value(q, offset + k)
    kFrom = 1,     // value(source, offset + k)
    kBlocks = 2,   // value(k / block, offset + k % block)
  };
  Kind kind = kReduced;
  int source = 0;
  size_t offset = 0;
  size_t block = 1;
};

// buf[k] = value(rank, first + k) for k < count.
cudaError_t LaunchFill(void* buf, size_t count, size_t first, int rank,
                       const Pattern& pattern, cudaStream_t stream);
// Adds to *wrong (device memory) the number of buf[0 .. count) that differ
// from `expect`.
cudaError_t LaunchCheck(const void* buf, size_t count, const Pattern& pattern,
                        const Expectation& expect, unsigned long long* wrong,
                        cudaStream_t stream);

}  // namespace ccl::peer
