#include "client/internal/sequence_windows.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ccl::client::internal {

SequenceWindows::SequenceWindows(ReserveFn reserve, ReleaseFn release,
                                 ScheduleFn schedule, Options options,
                                 std::function<Clock::time_point()> now)
    : reserve_(std::move(reserve)),
      release_(std::move(release)),
      schedule_(std::move(schedule)),
      now_(std::move(now)),
      linger_(options.linger),
      max_window_(std::max<int64_t>(1, options.max_window)) {}

absl::StatusOr<int64_t> SequenceWindows::Take(const std::string& group,
                                              int64_t count) {
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot take ", count, " sequence numbers"));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Window& window = windows_[group];
  if (window.end - window.next < count) {
    // Reserving under the lock keeps the group's numbers in the order the
    // callers asked for them.
    const int64_t want = std::max(count, window.size);
    absl::StatusOr<int64_t> start = reserve_(group, want);
    if (!start.ok()) return start.status();
    if (window.next < window.end && *start == window.end) {
      // Nobody reserved in between: the new range extends the old one.
      window.end += want;
    } else {
      ReleaseLocked(group, window);
      window.next = *start;
      window.end = *start + want;
    }
    window.size = std::min(window.size * 2, max_window_);
  }
  const int64_t first = window.next;
  window.next += count;
  window.last_use = now_();
  if (window.next < window.end && !timer_at_) {
    ArmTimerLocked(window.last_use + linger_);
  }
  return first;
}

void SequenceWindows::ReleaseAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [group, window] : windows_) {
    ReleaseLocked(group, window);
    window.size = 1;
  }
}

void SequenceWindows::Drop(const std::string& group) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = windows_.find(group);
  if (it == windows_.end()) return;
  ReleaseLocked(group, it->second);
  it->second.size = 1;
}

void SequenceWindows::ForgetAll() {
  std::lock_guard<std::mutex> lock(mutex_);
  windows_.clear();
}

void SequenceWindows::StopReservingAhead() {
  std::lock_guard<std::mutex> lock(mutex_);
  max_window_ = 1;
  for (auto& [group, window] : windows_) window.size = 1;
}

std::pair<int64_t, int64_t> SequenceWindows::Held(
    const std::string& group) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = windows_.find(group);
  if (it == windows_.end()) return {0, 0};
  return {it->second.next, it->second.end};
}

void SequenceWindows::OnTimer() {
  std::lock_guard<std::mutex> lock(mutex_);
  timer_at_.reset();
  const Clock::time_point now = now_();
  std::optional<Clock::time_point> next_check;
  for (auto& [group, window] : windows_) {
    if (window.next >= window.end) continue;
    const Clock::time_point idle_at = window.last_use + linger_;
    if (idle_at <= now) {
      ReleaseLocked(group, window);
      // An idle client is not in a loop: its next op reserves one number.
      window.size = 1;
    } else if (!next_check || idle_at < *next_check) {
      next_check = idle_at;
    }
  }
  if (next_check) ArmTimerLocked(*next_check);
}

void SequenceWindows::ArmTimerLocked(Clock::time_point when) {
  timer_at_ = when;
  schedule_(when, [this] { OnTimer(); });
}

void SequenceWindows::ReleaseLocked(const std::string& group, Window& window) {
  if (window.next < window.end) release_(group, window.next, window.end);
  window.next = window.end;
}

}  // namespace ccl::client::internal
