// One thread for the host work a request can cause that takes time in
// proportion to a tensor (filling a new tensor, summarising one), so that no
// gRPC thread does it. Tasks run in the order posted.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ccl {

class HostWorkQueue {
 public:
  HostWorkQueue();
  // Runs what is queued, then joins.
  ~HostWorkQueue();
  HostWorkQueue(const HostWorkQueue&) = delete;
  HostWorkQueue& operator=(const HostWorkQueue&) = delete;

  void Post(std::function<void()> task);

 private:
  void Loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace ccl
