// Large buffers backed by transparent huge pages where the kernel offers
// them on request (transparent_hugepage/enabled = madvise, Debian's and most
// distributions' default). On a VM every first touch of a 4 KiB page is a
// fault that exits to the hypervisor: on the development VM, writing 64 MiB
// of fresh memory took 170-223 ms in 4 KiB pages and 10-12 ms in 2 MiB ones
// (bench/first_touch), and that first touch is what a tensor's allocation
// and fill, a client's read of a tensor and Gloo's staging of a large op pay
// (bench/results/huge_pages_2026-12-04.md). PyTorch's CPU allocator does the
// same for buffers of 2 MiB and more when THP_MEM_ALLOC_ENABLE is set (off
// by default there, for the memory a huge page can add past a buffer's end;
// here only a buffer's own whole huge pages are advised, so none is added).
#pragma once

#include <cstddef>

namespace ccl {

// Asks for huge pages for the 2 MiB-aligned interior of [data, data + bytes)
// if that holds at least one huge page. Call before the memory is first
// touched; only whole huge pages inside the buffer are advised, so no page
// beyond the buffer's own is made resident. A hint: where the kernel has no
// huge pages (disabled, or none free) the memory stays in small pages.
void AdviseHugePages(void* data, size_t bytes);

}  // namespace ccl
