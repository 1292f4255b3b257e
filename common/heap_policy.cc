#include "common/heap_policy.h"

#include <malloc.h>

namespace ccl {

void ApplyWorkerHeapPolicy() {
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
#ifdef M_TRIM_THRESHOLD
  mallopt(M_TRIM_THRESHOLD, 32 * 1024 * 1024);
#endif
}

}  // namespace ccl
