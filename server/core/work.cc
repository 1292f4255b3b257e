#include "server/core/work.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/elapsed.h"

namespace ccl {
namespace {

bool IsDone(WorkState state) {
  return state == WorkState::kCompleted || state == WorkState::kFailed;
}

}  // namespace

std::string DescribeOp(const OpSpec& spec) {
  return absl::StrCat(std::string(OpKindName(spec.kind)), " seq ", spec.seq,
                      " of group ", spec.group);
}

Work::Work(int64_t id, OpSpec spec) : id_(id), spec_(std::move(spec)) {
  timing_.enqueued_unix_us =
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count();
}

std::string Work::Describe() const {
  return absl::StrCat(DescribeOp(spec_), " (work ", id_, ")");
}

WorkState Work::state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

absl::Status Work::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_;
}

OpTiming Work::timing() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timing_;
}

bool Work::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return IsDone(state_);
}

absl::Status Work::Wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_cv_.wait_for(lock, timeout, [&] { return callbacks_ran_; })) {
    return absl::DeadlineExceededError(
        absl::StrCat(Describe(), " is still ",
                     state_ == WorkState::kQueued ? "queued" : "running",
                     " after ", timeout.count(), "ms"));
  }
  return status_;
}

void Work::OnDone(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!IsDone(state_)) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

bool Work::TryWithdraw() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ != WorkState::kQueued) return false;
  cancel_requested_ = true;
  // Under the lock: the work cannot start (MarkRunning) meanwhile.
  if (!withdrawn_) OnWithdrawn();
  withdrawn_ = true;
  return true;
}

void Work::SetCallDeadline(std::chrono::steady_clock::time_point deadline) {
  call_deadline_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          deadline.time_since_epoch())
                          .count();
}

std::chrono::steady_clock::time_point Work::call_deadline() const {
  const int64_t ns = call_deadline_ns_;
  if (ns == INT64_MAX) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::nanoseconds(ns)));
}

void Work::MarkRunning() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_ != WorkState::kQueued) return;
  state_ = WorkState::kRunning;
  timing_.queue_us = MicrosSince(enqueued_);
}

void Work::Finish(absl::Status status, double device_us, bool annotate) {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (IsDone(state_)) return;
    if (!status.ok() && annotate) {
      status = absl::Status(
          status.code(),
          absl::StrCat(DescribeOp(spec_), ": ", std::string(status.message())));
    }
    status_ = std::move(status);
    state_ = status_.ok() ? WorkState::kCompleted : WorkState::kFailed;
    timing_.device_us = device_us;
    timing_.total_us = MicrosSince(enqueued_);
    callbacks.swap(callbacks_);
  }
  for (auto& callback : callbacks) callback();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    callbacks_ran_ = true;
  }
  done_cv_.notify_all();
}

}  // namespace ccl
