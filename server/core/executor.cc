#include "server/core/executor.h"

#include <algorithm>
#include <iostream>
#include <iterator>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/busy_poll.h"
#include "common/status_macros.h"

namespace ccl {
namespace {

std::string SecondsString(std::chrono::milliseconds ms) {
  if (ms.count() % 1000 == 0) return absl::StrCat(ms.count() / 1000, "s");
  return absl::StrCat(ms.count(), "ms");
}

}  // namespace

Executor::Executor(std::string group, int rank,
                   std::shared_ptr<Communicator> comm,
                   std::chrono::milliseconds gap_timeout, Diagnosis diagnose,
                   std::chrono::microseconds busy_poll, BreakListener on_break,
                   GapWatch gap_watch)
    : group_(std::move(group)),
      rank_(rank),
      comm_(std::move(comm)),
      gap_timeout_(gap_timeout),
      diagnose_(std::move(diagnose)),
      busy_poll_(busy_poll),
      on_break_(std::move(on_break)),
      gap_watch_(std::move(gap_watch)),
      skip_target_(std::make_shared<SkipTarget>()) {
  skip_target_->executor = this;
  launch_thread_ = std::thread([this] { LaunchLoop(); });
  completion_thread_ = std::thread([this] { CompletionLoop(); });
}

Executor::~Executor() {
  Stop(absl::CancelledError(
      absl::StrCat("group ", group_, " was shut down before the op ran")));
}

namespace {

// Takes a released range's seqs; a late op at one of them fails then.
class ReleasedSeqs final : public ExecutorTask {
 public:
  ReleasedSeqs(int64_t begin, int64_t end) : begin_(begin), end_(end) {}
  int64_t seq() const override { return begin_; }
  int64_t seq_count() const override { return end_ - begin_; }
  std::chrono::milliseconds timeout() const override {
    return std::chrono::milliseconds(0);
  }
  bool involves_every_rank() const override { return false; }
  void Start() override {}
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(Communicator&) override {
    return std::make_unique<CompletedWork>(absl::OkStatus(), 0);
  }
  void Complete(absl::Status, double) override {}

 private:
  const int64_t begin_;
  const int64_t end_;
};

}  // namespace

absl::Status Executor::Enqueue(std::shared_ptr<ExecutorTask> task) {
  std::lock_guard<std::mutex> lock(mutex_);
  return EnqueueLocked(std::move(task));
}

absl::Status Executor::EnqueueLocked(std::shared_ptr<ExecutorTask> task) {
  const int64_t seq = task->seq();
  const int64_t count = std::max<int64_t>(1, task->seq_count());
  if (stopping_) {
    return absl::AbortedError(absl::StrCat(
        "group ", group_, " is shut down; seq ", seq, " was not queued"));
  }
  if (seq < next_seq_) {
    auto it = lost_.upper_bound(seq);
    if (it != lost_.begin()) {
      --it;
      if (seq >= it->first && seq < it->second.first) {
        return it->second.second;
      }
    }
    return absl::AlreadyExistsError(absl::StrCat(
        "seq ", seq, " of group ", group_, " was already run at rank ", rank_,
        " (next seq is ", next_seq_, "); reserve a new one"));
  }
  if (seq - next_seq_ > kMaxSeqsAhead ||
      count > kMaxSeqsAhead - (seq - next_seq_)) {
    return absl::OutOfRangeError(absl::StrCat(
        "seq ", seq, (count > 1 ? absl::StrCat("..", seq + count - 1) : ""),
        " of group ", group_, " is more than ", kMaxSeqsAhead,
        " past the group's next seq ", next_seq_, " at rank ", rank_,
        "; reserve seqs from the coordinator (ReserveSequence)"));
  }
  // Overlaps: the task queued at or before `seq` may reach into it, and the
  // next one may start inside [seq, seq + count).
  auto next = pending_.lower_bound(seq);
  auto overlap = [&](int64_t other) {
    return absl::AlreadyExistsError(absl::StrCat(
        "seq ", other, " of group ", group_, " is already queued at rank ",
        rank_, "; each seq takes exactly one op"));
  };
  if (next != pending_.end() && next->first < seq + count) {
    return overlap(next->first);
  }
  if (next != pending_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second->seq_count() > seq) {
      return overlap(seq);
    }
  }
  pending_.emplace(seq, std::move(task));
  Notify(launch_cv_);
  return absl::OkStatus();
}

absl::Status Executor::Release(int64_t begin, int64_t end,
                               absl::Status reason) {
  // Only the parts of [begin, end) neither run nor queued: a range whose
  // holder died may hold ops it sent before it died. Under one lock, so
  // that no skip or late op gets between the split and the queueing.
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t at = std::max(begin, next_seq_);
  auto it = pending_.upper_bound(at);
  if (it != pending_.begin()) {
    auto previous = std::prev(it);
    at = std::max(at, previous->first +
                          std::max<int64_t>(1, previous->second->seq_count()));
  }
  std::vector<std::pair<int64_t, int64_t>> unused;
  for (; it != pending_.end() && it->first < end; ++it) {
    if (it->first > at) unused.emplace_back(at, it->first);
    at =
        std::max(at, it->first + std::max<int64_t>(1, it->second->seq_count()));
  }
  if (at < end) unused.emplace_back(at, end);
  for (const auto& [from, to] : unused) {
    // Recorded first: a late op at one of them fails with `reason`.
    lost_.emplace(from, std::make_pair(to, reason));
    CCL_RETURN_IF_ERROR(
        EnqueueLocked(std::make_shared<ReleasedSeqs>(from, to)));
  }
  return absl::OkStatus();
}

int64_t Executor::next_seq() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_seq_;
}

int64_t Executor::finished_below() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return finished_below_;
}

std::string Executor::state() const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return "stopped";
  }
  return comm_->Health().ok() ? "ready" : "broken";
}

bool Executor::settling() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return OpsUnderWayLocked();
}

bool Executor::OpsUnderWayLocked() const {
  return launching_ >= 0 || !in_flight_.empty() || finishing_ > 0;
}

std::string Executor::WhyWaiting(int64_t seq) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (launching_ >= 0) {
    return absl::StrCat("seq ", launching_, " of group ", group_,
                        " was still running at rank ", rank_);
  }
  if (!in_flight_.empty()) {
    return absl::StrCat("seq ", in_flight_.front().task->seq(), " of group ",
                        group_, " was still running at rank ", rank_);
  }
  if (seq > next_seq_ && pending_.count(next_seq_) == 0) {
    const auto waited =
        gap_since_ ? std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - *gap_since_)
                   : std::chrono::milliseconds(0);
    return absl::StrCat("it waits behind seq ", next_seq_, " of group ", group_,
                        ", which has not arrived at rank ", rank_, " after ",
                        SecondsString(waited),
                        " (the client that reserved it may have died; ",
                        "the worker skips it ", SecondsString(gap_timeout_),
                        " after it went missing: --seq-gap-timeout-ms)");
  }
  return absl::StrCat("seq ", next_seq_, " of group ", group_,
                      " was next at rank ", rank_);
}

void Executor::LaunchLoop() {
  using Clock = std::chrono::steady_clock;
  std::optional<Clock::time_point>& gap_since = gap_since_;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    if (stopping_) break;
    if (stop_watch_ && watched_seq_ < next_seq_) {
      // The seq asked about arrived or was skipped.
      std::function<void()> stop = std::move(stop_watch_);
      stop_watch_ = nullptr;
      lock.unlock();
      stop();
      lock.lock();
      continue;
    }
    if (pending_.empty()) {
      gap_since.reset();
      if (!SpinForChange(lock) && pending_.empty() && !stopping_) {
        launch_cv_.wait(lock);
      }
      continue;
    }
    auto first = pending_.begin();
    if (first->first != next_seq_) {
      // Later ops are queued but next_seq_ is missing.
      const Clock::time_point now = Clock::now();
      if (!gap_since) gap_since = now;
      // Not asked when the gap timeout itself comes as soon.
      const bool unasked = gap_watch_ && watched_seq_ != next_seq_ &&
                           gap_timeout_ > kGapWatchAfter;
      if (unasked && now - *gap_since >= kGapWatchAfter) {
        // Asked once per missing seq: its holder may be gone.
        const int64_t seq = next_seq_;
        watched_seq_ = seq;
        std::function<void()> stop_previous = std::move(stop_watch_);
        stop_watch_ = nullptr;
        lock.unlock();
        if (stop_previous) stop_previous();
        std::function<void()> stop =
            gap_watch_(seq, [target = skip_target_](int64_t begin, int64_t end,
                                                    absl::Status reason) {
              std::lock_guard<std::mutex> guard(target->mutex);
              if (target->executor == nullptr) return;
              absl::Status released =
                  target->executor->Release(begin, end, std::move(reason));
              if (!released.ok()) {
                std::cerr << "[ccl executor] skipping seqs " << begin << ".."
                          << end - 1
                          << " of a client that is gone: " << released.message()
                          << std::endl;
              }
            });
        lock.lock();
        stop_watch_ = std::move(stop);
        continue;
      }
      if (now - *gap_since < gap_timeout_) {
        launch_cv_.wait_until(lock, unasked ? *gap_since + kGapWatchAfter
                                            : *gap_since + gap_timeout_);
        continue;
      }
      const int64_t begin = next_seq_;
      const int64_t end = first->first;
      std::string reason =
          end - begin == 1
              ? absl::StrCat("seq ", begin, " of group ", group_,
                             " never arrived at rank ", rank_, " within ",
                             SecondsString(gap_timeout_), " (seq ", end,
                             " was waiting behind it); the "
                             "client that reserved it may have died, so it "
                             "was skipped")
              : absl::StrCat("seqs ", begin, "..", end - 1, " of group ",
                             group_, " never arrived at rank ", rank_,
                             " within ", SecondsString(gap_timeout_), " (seq ",
                             end,
                             " was waiting behind them); the "
                             "client that reserved them may have died, so "
                             "they were skipped");
      std::cerr << "[ccl executor] " << reason << std::endl;
      lost_.emplace(begin,
                    std::make_pair(end, absl::DeadlineExceededError(reason)));
      next_seq_ = end;
      gap_since.reset();
      continue;
    }
    gap_since.reset();
    if (in_flight_.size() >= kMaxInFlight) {
      retired_cv_.wait(
          lock, [&] { return stopping_ || in_flight_.size() < kMaxInFlight; });
      continue;
    }
    std::shared_ptr<ExecutorTask> task = std::move(first->second);
    pending_.erase(first);
    next_seq_ += std::max<int64_t>(1, task->seq_count());
    launching_ = task->seq();
    lock.unlock();

    task->Start();
    absl::StatusOr<std::unique_ptr<CommWork>> handle;
    if (absl::Status health = comm_->Health(); !health.ok()) {
      // UNAVAILABLE, as the peers' transport errors are: one code on every
      // rank for an op caught by a failure, the cause named first.
      absl::Status cause;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        cause = broke_with_;
      }
      if (cause.ok()) cause = health;
      handle = absl::UnavailableError(absl::StrCat(
          "seq ", task->seq(), " was not run: ", cause.message(), " (",
          absl::StatusCodeToString(cause.code()), "; it broke the ",
          comm_->name(), " communicator of group ", group_,
          "); the world re-forms into a new generation and the next op runs "
          "there"));
    } else {
      handle = task->Launch(*comm_);
    }

    lock.lock();
    launching_ = -1;
    if (!handle.ok()) {
      // Keep completions in seq order behind anything still in flight.
      in_flight_.push_back(
          {task, std::make_unique<CompletedWork>(handle.status(), 0)});
      Notify(completion_cv_);
    } else if (in_flight_.empty() && (*handle)->IsCompleted()) {
      ++finishing_;
      lock.unlock();
      Finish(std::move(task), *std::move(handle));
      lock.lock();
      --finishing_;
      ended_cv_.notify_all();
    } else {
      in_flight_.push_back({task, *std::move(handle)});
      Notify(completion_cv_);
    }
  }
  // Stopping: nothing queued runs any more.
  stopped_ = true;
  Notify(completion_cv_);
}

void Executor::Finish(std::shared_ptr<ExecutorTask> task,
                      std::unique_ptr<CommWork> handle) {
  absl::Status status = handle->Wait(task->timeout());
  if (absl::IsDeadlineExceeded(status) && !handle->IsCompleted()) {
    handle->Abort();
  }
  if (diagnose_ &&
      (absl::IsDeadlineExceeded(status) || absl::IsUnavailable(status))) {
    Arrival arrival = Arrival::kNever;
    if (task->involves_every_rank()) {
      arrival = absl::IsDeadlineExceeded(status) ? Arrival::kAfterTimeout
                                                 : Arrival::kIfAPeerTimedOut;
    }
    Diagnosed diagnosed = diagnose_(task->seq(), arrival);
    // A peer's abort at its deadline reaches this rank as a lost
    // connection; the op failed of the same timeout, so it says so, as the
    // ranks that timed out themselves do.
    const absl::StatusCode code = diagnosed.peer_timed_out
                                      ? absl::StatusCode::kDeadlineExceeded
                                      : status.code();
    if (!diagnosed.why.empty()) {
      status = absl::Status(
          code, absl::StrCat(status.message(), "; ", diagnosed.why));
    } else if (code != status.code()) {
      status = absl::Status(code, status.message());
    }
  }
  if (!status.ok() && !comm_->Health().ok() && !break_told_.exchange(true)) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      broke_with_ = status;
    }
    if (on_break_) on_break_(status);
  }
  {
    // Before Complete, so that whoever Complete wakes sees it counted.
    std::lock_guard<std::mutex> lock(mutex_);
    finished_below_ = std::max(
        finished_below_, task->seq() + std::max<int64_t>(1, task->seq_count()));
  }
  task->Complete(std::move(status), handle->DeviceMicros());
}

void Executor::Notify(std::condition_variable& cv) {
  changes_.fetch_add(1, std::memory_order_release);
  cv.notify_all();
}

bool Executor::SpinForChange(std::unique_lock<std::mutex>& lock) {
  if (busy_poll_.count() <= 0) return false;
  const uint64_t seen = changes_.load(std::memory_order_acquire);
  lock.unlock();
  const bool changed = SpinUntil(busy_poll_, [&] {
    return changes_.load(std::memory_order_acquire) != seen;
  });
  lock.lock();
  return changed;
}

void Executor::CompletionLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    const auto has_work = [&] { return !in_flight_.empty() || stopped_; };
    // Spins again after a change that brought nothing to complete: the
    // Enqueue that precedes each launch bumps the same counter, and sleeping
    // then would leave the launch that follows to wake this thread.
    while (!has_work() && SpinForChange(lock)) {
    }
    completion_cv_.wait(lock, has_work);
    if (in_flight_.empty()) break;  // stopped and drained
    InFlight item = std::move(in_flight_.front());
    in_flight_.pop_front();
    ++finishing_;
    retired_cv_.notify_all();
    lock.unlock();
    Finish(std::move(item.task), std::move(item.handle));
    lock.lock();
    --finishing_;
    ended_cv_.notify_all();
  }
}

void Executor::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  std::chrono::milliseconds longest{0};
  for (const auto& [seq, task] : pending_) {
    longest = std::max(longest, task->timeout());
  }
  for (const InFlight& item : in_flight_) {
    longest = std::max(longest, item.task->timeout());
  }
  const auto deadline =
      std::chrono::steady_clock::now() + gap_timeout_ + longest;
  ended_cv_.wait_until(lock, deadline, [&] {
    return stopping_ || drain_cancelled_ ||
           (pending_.empty() && !OpsUnderWayLocked());
  });
}

void Executor::CancelDrain() {
  std::lock_guard<std::mutex> lock(mutex_);
  drain_cancelled_ = true;
  ended_cv_.notify_all();
}

void Executor::Stop(absl::Status reason) {
  {
    // A question about a missing seq answered from now on skips nothing.
    std::lock_guard<std::mutex> guard(skip_target_->mutex);
    skip_target_->executor = nullptr;
  }
  std::map<int64_t, std::shared_ptr<ExecutorTask>> cancelled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    ended_cv_.notify_all();
    cancelled.swap(pending_);
    Notify(launch_cv_);
    retired_cv_.notify_all();
  }
  for (auto& [seq, task] : cancelled) task->Complete(reason, 0);
  if (launch_thread_.joinable()) launch_thread_.join();
  if (completion_thread_.joinable()) completion_thread_.join();
  std::function<void()> stop_watch;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_watch = std::move(stop_watch_);
    stop_watch_ = nullptr;
  }
  if (stop_watch) stop_watch();
}

}  // namespace ccl
