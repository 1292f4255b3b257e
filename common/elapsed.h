// Elapsed-time conversions on the steady clock, written once: private copies
// in several files collided when a unity build (CI's sanitizer and image
// builds) put them in one translation unit.
#pragma once

#include <chrono>
#include <cstdint>

namespace ccl {

// Microseconds from `start` to now, fractional.
inline double MicrosSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now() - start)
      .count();
}

// A duration in whole milliseconds, truncated.
inline int64_t ToMillis(std::chrono::steady_clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

}  // namespace ccl
