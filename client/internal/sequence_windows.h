// Sequence numbers reserved ahead of use, per group, so that a steady
// stream of ops pays no coordinator round trip per op.
//
// A group's window starts at one number (a one-shot command reserves exactly
// what it uses and never gives anything back) and doubles each time the
// client comes back for more, up to a cap. Numbers nobody took for `linger`
// go back to the workers, and the window starts again at one: another
// client's later ops wait on our unused numbers for at most that long, never
// for the workers' gap timeout. Plain logic: the coordinator, the workers and
// the timer are injected, so the policy is unit-tested without gRPC. The
// Python client has the same policy (client/python/ccl/_seqs.py): both run
// the cases of tests/spec/sequence_windows.json.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace ccl::client::internal {

class SequenceWindows {
 public:
  using Clock = std::chrono::steady_clock;
  // The first of `count` fresh consecutive seqs of `group`.
  using ReserveFn = std::function<absl::StatusOr<int64_t>(
      const std::string& group, int64_t count)>;
  // Hands [begin, end) of `group` back to its workers. Must not block or
  // call back into SequenceWindows.
  using ReleaseFn =
      std::function<void(const std::string& group, int64_t begin, int64_t end)>;
  // Runs `callback` at about `when`, on another thread.
  using ScheduleFn =
      std::function<void(Clock::time_point when, std::function<void()>)>;

  struct Options {
    int64_t max_window = 256;
    std::chrono::milliseconds linger{20};
  };

  SequenceWindows(ReserveFn reserve, ReleaseFn release, ScheduleFn schedule,
                  Options options,
                  std::function<Clock::time_point()> now = Clock::now);
  // Whatever is held is released by ReleaseAll, which the owner calls while
  // the workers can still be reached.
  ~SequenceWindows() = default;

  // The first of `count` consecutive seqs of `group` for the caller alone.
  absl::StatusOr<int64_t> Take(const std::string& group, int64_t count);
  // Gives back every unused seq now.
  void ReleaseAll();
  // After a failed op: gives back what `group` holds and starts again at
  // one number, so that the next op asks the coordinator (and learns of a
  // re-form) instead of trusting seqs of a generation that may be ending.
  void Drop(const std::string& group);
  // The client moved to another generation: what it held belonged to the
  // old one, whose executors are gone, so nothing is given back.
  void ForgetAll();
  // The workers cannot take seqs back: from now on reserve only what each
  // Take uses, so there is never anything to give back.
  void StopReservingAhead();

  // The unused seqs of `group` held now, as [begin, end); for tests.
  std::pair<int64_t, int64_t> Held(const std::string& group) const;

 private:
  struct Window {
    int64_t next = 0;
    int64_t end = 0;
    int64_t size = 1;  // of the next reservation
    Clock::time_point last_use;
  };

  // Timer callback: releases windows idle for `linger`, re-arms for the rest.
  void OnTimer();
  void ArmTimerLocked(Clock::time_point when);
  void ReleaseLocked(const std::string& group, Window& window);

  const ReserveFn reserve_;
  const ReleaseFn release_;
  const ScheduleFn schedule_;
  const std::function<Clock::time_point()> now_;
  const std::chrono::milliseconds linger_;

  mutable std::mutex mutex_;
  int64_t max_window_;
  std::map<std::string, Window> windows_;
  // When the pending timer fires; unset when none is pending.
  std::optional<Clock::time_point> timer_at_;
};

}  // namespace ccl::client::internal
