// Spinning before a blocking wait (ccworker --busy-poll-us). A thread that
// sleeps until the next request or op is woken by the kernel, and on a VM a
// vCPU with nothing to run halts, so each wake costs a hypervisor round trip.
// A thread that spins for a while after its last event answers the next one
// without the wake, at the price of a core while it spins: on the GPU
// machine a 1000 us budget cut the worker's share of a client's 8-byte
// all_reduce from 80-110 us to 44-47 us p50
// (bench/results/latency_vcpu_idle_1gpu_2026-12-03.md). Off by default.
#pragma once

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ccl {

// Tells the core this is a spin loop (less power, and a sibling hyperthread
// runs on).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

// Calls `ready` until it returns true (then true) or `budget` has passed
// (then false). A zero budget returns false at once without calling it.
template <typename Ready>
bool SpinUntil(std::chrono::microseconds budget, Ready&& ready) {
  if (budget.count() <= 0) return false;
  const auto until = std::chrono::steady_clock::now() + budget;
  do {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      CpuRelax();
    }
  } while (std::chrono::steady_clock::now() < until);
  return ready();
}

}  // namespace ccl
