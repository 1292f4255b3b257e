// How the worker's heap gives memory back. A long-running worker allocates
// and frees tensors and message chunks of every size for as long as it runs;
// with glibc's defaults its RSS crept up under that churn (22.5 -> 26.3 MB
// over 27,000 alloc/write/read/free cycles in the notes, +7% over 20,000 in
// tests/chaos's churn probe) without any leak: heaptrack shows the same
// 121.8 KB still allocated at exit after 2,000 and after 10,000 cycles.
// The cause is glibc's dynamic mmap threshold: each time a large mmapped
// buffer is freed, the threshold rises to its size (up to 32 MiB), so later
// large buffers are carved from the arenas, whose freed space stays
// resident and fragments across gRPC's threads.
#pragma once

namespace ccl {

// Fixes the mmap threshold at 128 KiB (glibc's initial value), which also
// stops the dynamic adjustment: buffers that large are mapped on their own
// and unmapped when freed, so the RSS follows what is held. Costs a mapping
// and its page faults per large allocation, small beside filling or moving
// that many bytes. Call once, early in main.
void KeepLargeBuffersOutOfTheHeap();

}  // namespace ccl
