// How the worker's heap gives memory back. A long-running worker allocates
// and frees tensors and message chunks of every size for as long as it runs.
//
// Large buffers: with glibc's defaults its RSS crept up under that churn
// (22.5 -> 26.3 MB over 27,000 alloc/write/read/free cycles in the notes,
// +7% over 20,000 in tests/chaos's churn probe) without any leak: heaptrack
// shows the same 121.8 KB still allocated at exit after 2,000 and after
// 10,000 cycles. The cause is glibc's dynamic mmap threshold: each time a
// large mmapped buffer is freed, the threshold rises to its size (up to
// 32 MiB), so later large buffers are carved from the arenas, whose freed
// space stays resident and fragments across gRPC's threads.
//
// Small buffers: fixing the mmap threshold also leaves the trim threshold at
// glibc's 128 KiB, and a tensor stream frees more than that at the top of
// an arena with every message (gRPC's read slices of each 1 MiB chunk), so
// each arena was given back to the kernel (madvise, a TLB shootdown across
// threads) and faulted in again, page by page, for the next chunk: a bare
// client wrote 64 MiB to a worker on loopback in 262-328 ms and read it in
// 40-260 ms, against 34-38 and 27-39 ms with a 32 MiB trim threshold (8 MiB
// was not enough: gRPC keeps a flow-control window of chunks in flight),
// bench/results/tensor_transfer_2026-12-04.md.
#pragma once

namespace ccl {

// Fixes the mmap threshold at 128 KiB (glibc's initial value), which also
// stops the dynamic adjustment: buffers that large are mapped on their own
// and unmapped when freed, so the RSS follows what is held. Allocations
// below it come from the arenas, which keep up to 32 MiB free at their top
// instead of 128 KiB: the high-water mark of small buffers in flight stays
// resident, at most that much per arena. Traffic-only chaos runs with and
// without it: about 1 MB more per worker, and neither grows after the
// warm-up (the results file above).
// Call once, early in main.
void ApplyWorkerHeapPolicy();

}  // namespace ccl
