#include "common/heap_policy.h"

#include <malloc.h>

namespace ccl {

void KeepLargeBuffersOutOfTheHeap() {
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
}

}  // namespace ccl
