#include "common/timer_queue.h"

namespace ccl {

TimerQueue::TimerQueue() : thread_([this] { Run(); }) {}

TimerQueue::~TimerQueue() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

TimerQueue::TimerId TimerQueue::Schedule(Clock::time_point deadline,
                                         std::function<void()> callback) {
  TimerId id;
  bool earliest;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_id_++;
    auto it = timers_.emplace(std::make_pair(deadline, id), std::move(callback))
                  .first;
    deadlines_.emplace(id, deadline);
    earliest = it == timers_.begin();
  }
  // The thread sleeps until the earliest deadline; a later one cannot change
  // that. Waking it for each of thousands of parked calls (a world
  // registering) would cost two context switches apiece.
  if (earliest) wake_.notify_all();
  return id;
}

bool TimerQueue::Cancel(TimerId id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = deadlines_.find(id);
  if (it == deadlines_.end()) return false;
  timers_.erase(std::make_pair(it->second, id));
  deadlines_.erase(it);
  return true;
}

void TimerQueue::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (timers_.empty()) {
      wake_.wait(lock);
      continue;
    }
    auto first = timers_.begin();
    if (first->first.first > Clock::now()) {
      // A copy: wait_until reads the deadline again after it wakes, when a
      // Cancel may have erased the node it lives in.
      const Clock::time_point deadline = first->first.first;
      wake_.wait_until(lock, deadline);
      continue;
    }
    std::function<void()> callback = std::move(first->second);
    deadlines_.erase(first->first.second);
    timers_.erase(first);
    lock.unlock();
    callback();
    lock.lock();
  }
}

}  // namespace ccl
