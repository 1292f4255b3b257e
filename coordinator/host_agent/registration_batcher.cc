#include "coordinator/host_agent/registration_batcher.h"

#include <algorithm>
#include <utility>

namespace ccl::coordinator {

RegistrationBatcher::RegistrationBatcher(int expected,
                                         std::chrono::milliseconds window,
                                         Send send)
    : expected_(expected), window_(window), send_(std::move(send)) {}

std::vector<RegistrationBatcher::CallId> RegistrationBatcher::TakeLocked(
    const std::string& credential, uint64_t batch) {
  auto it = waiting_.find(credential);
  if (it == waiting_.end() || it->second.batch != batch) return {};
  Waiting& waiting = it->second;
  std::vector<CallId> calls = std::move(waiting.calls);
  waiting.calls.clear();
  waiting.batch = 0;  // a timer still pending for it finds nothing
  for (CallId call : calls) credential_of_.erase(call);
  waiting.sent_in_round += static_cast<int>(calls.size());
  if (expected_ <= 0 || waiting.sent_in_round >= expected_) {
    waiting.sent_in_round = 0;
  }
  return calls;
}

void RegistrationBatcher::Add(CallId call, const std::string& credential) {
  std::vector<CallId> full;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Waiting& waiting = waiting_[credential];
    credential_of_[call] = credential;
    waiting.calls.push_back(call);
    if (waiting.calls.size() == 1) {
      waiting.batch = next_batch_++;
      timers_.ScheduleAfter(window_, [this, credential, batch = waiting.batch] {
        std::vector<CallId> due;
        {
          std::lock_guard<std::mutex> timer_lock(mutex_);
          due = TakeLocked(credential, batch);
        }
        if (!due.empty()) send_(std::move(due));
      });
    }
    // The host's workers not yet registered in this round are all here.
    if (expected_ > 0 &&
        waiting.sent_in_round + static_cast<int>(waiting.calls.size()) >=
            expected_) {
      full = TakeLocked(credential, waiting.batch);
    }
  }
  if (!full.empty()) send_(std::move(full));
}

bool RegistrationBatcher::Remove(CallId call) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = credential_of_.find(call);
  if (found == credential_of_.end()) return false;
  auto it = waiting_.find(found->second);
  credential_of_.erase(found);
  if (it == waiting_.end()) return false;
  std::vector<CallId>& calls = it->second.calls;
  calls.erase(std::remove(calls.begin(), calls.end(), call), calls.end());
  // An emptied batch keeps its entry: its timer takes it, finds nothing.
  return true;
}

}  // namespace ccl::coordinator
