// How often the members of a world heartbeat, and how long a silent member
// has before it is declared lost. Header-only: the worker's membership loop
// uses HeartbeatPhase without linking the coordinator.
//
// One coordinator answers every heartbeat of the world, so it is their total
// rate that costs it CPU: at a 1 s interval, 16,384 ranks send 16,384 RPCs a
// second. The coordinator therefore stretches the configured interval just
// enough to keep the world's heartbeats at or under `max_rate` a second.
// The timeout grows by as much as the interval did, so a member may still be
// as late as the operator allowed (timeout - interval), and never by less
// than two whole missed beats (3 intervals). A rank that stops is declared
// lost at most timeout + one sweep period after its last beat.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace ccl::coordinator {

struct HeartbeatTiming {
  std::chrono::milliseconds interval{0};
  std::chrono::milliseconds timeout{0};
};

// `max_rate` <= 0 turns the adaptation off.
inline HeartbeatTiming AdaptHeartbeat(std::chrono::milliseconds interval,
                                      std::chrono::milliseconds timeout,
                                      int64_t max_rate, int world_size) {
  HeartbeatTiming timing{interval, timeout};
  if (max_rate <= 0 || world_size <= 0 || interval.count() <= 0) return timing;
  // The interval at which `world_size` beats a second add up to `max_rate`,
  // rounded up to the millisecond.
  const int64_t needed_ms =
      (int64_t{world_size} * 1000 + max_rate - 1) / max_rate;
  if (needed_ms <= interval.count()) return timing;
  timing.interval = std::chrono::milliseconds(needed_ms);
  timing.timeout =
      std::max(timeout + (timing.interval - interval), 3 * timing.interval);
  return timing;
}

// When rank `rank` of `world_size` sends its first beat, as a delay from the
// moment it joined. Members join together (every Register returns when the
// world forms), so beating in step would hit the coordinator with the whole
// world's beats in one burst per interval; staggering the first beat by rank
// over one interval keeps the load flat, and each member then keeps its own
// period. The result is in (0, interval].
inline std::chrono::milliseconds HeartbeatPhase(
    std::chrono::milliseconds interval, int rank, int world_size) {
  if (world_size <= 1 || rank < 0 || rank >= world_size) return interval;
  return std::chrono::milliseconds(
      std::max<int64_t>(1, interval.count() * (rank + 1) / world_size));
}

}  // namespace ccl::coordinator
