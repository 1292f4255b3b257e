// Runs callbacks at deadlines on one background thread. Parked RPCs (a KV
// wait, a Register waiting for the world, an async Wait) use it to time
// out without holding a thread of their own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace ccl {

class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using TimerId = uint64_t;

  TimerQueue();
  // Drops pending timers without running them.
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  // `callback` runs on the queue's thread, so it must be short and must not
  // call Cancel on the same queue while holding a lock the callback takes.
  TimerId Schedule(Clock::time_point deadline, std::function<void()> callback);
  TimerId ScheduleAfter(Clock::duration delay, std::function<void()> callback) {
    return Schedule(Clock::now() + delay, std::move(callback));
  }
  // True if the timer had not fired yet (and now never will).
  bool Cancel(TimerId id);

 private:
  void Run();

  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  TimerId next_id_ = 1;
  // Ordered by (deadline, id) so that equal deadlines keep their order.
  std::map<std::pair<Clock::time_point, TimerId>, std::function<void()>>
      timers_;
  std::map<TimerId, Clock::time_point> deadlines_;
  std::thread thread_;
};

}  // namespace ccl
