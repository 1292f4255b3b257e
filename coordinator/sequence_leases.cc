#include "coordinator/sequence_leases.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/kv_space.h"

namespace ccl::coordinator {
namespace {

std::string SeqsString(int64_t begin, int64_t end) {
  return end - begin == 1 ? absl::StrCat("seq ", begin)
                          : absl::StrCat("seqs ", begin, "..", end - 1);
}

}  // namespace

SequenceLeases::SequenceLeases(TimerQueue& timers,
                               std::function<void(WaitId)> on_deadline)
    : timers_(timers), on_deadline_(std::move(on_deadline)) {}

absl::Status SequenceLeases::Open(const std::string& lease,
                                  std::string holder) {
  if (lease.empty() || lease.size() > kMaxLeaseBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("hold lease: the lease id must be 1 to ", kMaxLeaseBytes,
                     " bytes, got ", lease.size()));
  }
  if (open_.contains(lease)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "hold lease: lease '", lease,
        "' is held by another stream; each client picks a fresh id"));
  }
  if (open_.size() >= kMaxOpenLeases) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "hold lease: ", open_.size(),
        " clients hold leases already; reservations of this client are "
        "skipped by the workers' gap timeout if it dies holding them"));
  }
  auto entry = std::make_shared<Lease>();
  entry->holder = std::move(holder);
  open_.emplace(lease, std::move(entry));
  return absl::OkStatus();
}

SequenceHolder SequenceLeases::ReleasedBy(int64_t generation, int64_t begin,
                                          int64_t end,
                                          const Lease& lease) const {
  SequenceHolder result;
  result.generation = generation;
  result.released = true;
  result.begin = begin;
  result.end = end;
  result.reason = absl::StrCat(
      SeqsString(begin, end), " were reserved by the client at ",
      lease.holder.empty() ? std::string("an unknown address") : lease.holder,
      ", which went away before it sent them (its lease ended)");
  return result;
}

void SequenceLeases::Close(const std::string& lease, Deferred& deferred) {
  auto it = open_.find(lease);
  if (it == open_.end()) return;
  std::shared_ptr<Lease> entry = std::move(it->second);
  open_.erase(it);
  entry->open = false;
  for (WaitId id : entry->waiters) {
    auto w = waiters_.find(id);
    if (w == waiters_.end()) continue;
    timers_.Cancel(w->second.timer);
    deferred.push_back(
        [done = std::move(w->second.done),
         result = ReleasedBy(w->second.generation, w->second.begin,
                             w->second.end, *entry)]() mutable {
          done(std::move(result));
        });
    waiters_.erase(w);
  }
  entry->waiters.clear();
}

bool SequenceLeases::Record(int64_t generation, const std::string& group,
                            int64_t first, int64_t count,
                            const std::string& lease) {
  if (lease.empty() || count <= 0) return false;
  auto it = open_.find(lease);
  if (it == open_.end()) return false;
  Ranges& ranges = ranges_[{generation, SequenceGroupName(group)}];
  ranges[first] = Range{first + count, it->second};
  if (ranges.size() > kMaxRangesPerGroup) ranges.erase(ranges.begin());
  return true;
}

void SequenceLeases::Await(WaitId id, int64_t generation,
                           const std::string& group, int64_t seq,
                           std::chrono::milliseconds timeout,
                           Callback<SequenceHolder> done, Deferred& deferred) {
  const std::string name = SequenceGroupName(group);
  const Range* range = nullptr;
  int64_t begin = 0;
  if (auto ranges = ranges_.find({generation, name}); ranges != ranges_.end()) {
    auto it = ranges->second.upper_bound(seq);
    if (it != ranges->second.begin()) {
      --it;
      if (seq < it->second.end) {
        range = &it->second;
        begin = it->first;
      }
    }
  }
  if (range == nullptr) {
    SequenceHolder unknown;
    unknown.generation = generation;
    unknown.reason = absl::StrCat(
        "no client holds seq ", seq, " of group ", name, " in generation ",
        generation,
        " under a lease (reserved without one, or before the coordinator "
        "started)");
    deferred.push_back(
        [done = std::move(done), unknown = std::move(unknown)]() mutable {
          done(std::move(unknown));
        });
    return;
  }
  if (!range->lease->open) {
    deferred.push_back([done = std::move(done),
                        result = ReleasedBy(generation, begin, range->end,
                                            *range->lease)]() mutable {
      done(std::move(result));
    });
    return;
  }
  Waiter& waiter = waiters_[id];
  waiter.generation = generation;
  waiter.group = name;
  waiter.seq = seq;
  waiter.begin = begin;
  waiter.end = range->end;
  waiter.lease = range->lease;
  waiter.done = std::move(done);
  waiter.timeout = timeout;
  waiter.timer = timers_.ScheduleAfter(
      timeout, [on_deadline = on_deadline_, id] { on_deadline(id); });
  range->lease->waiters.insert(id);
}

void SequenceLeases::Keep(int64_t current, int64_t previous,
                          const absl::Status& why, Deferred& deferred) {
  std::erase_if(ranges_, [&](const auto& entry) {
    return entry.first.first != current && entry.first.first != previous;
  });
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    Waiter& waiter = it->second;
    if (waiter.generation == current || waiter.generation == previous) {
      ++it;
      continue;
    }
    timers_.Cancel(waiter.timer);
    waiter.lease->waiters.erase(it->first);
    deferred.push_back([done = std::move(waiter.done), why] { done(why); });
    it = waiters_.erase(it);
  }
}

std::function<void()> SequenceLeases::Expire(WaitId id) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return nullptr;
  Waiter waiter = std::move(it->second);
  waiters_.erase(it);
  waiter.lease->waiters.erase(id);
  SequenceHolder held;
  held.generation = waiter.generation;
  held.begin = waiter.begin;
  held.end = waiter.end;
  held.reason = absl::StrCat("seq ", waiter.seq, " of group ", waiter.group,
                             " is held by the client at ", waiter.lease->holder,
                             ", which is still connected after ",
                             waiter.timeout.count(), " ms");
  return [done = std::move(waiter.done), held = std::move(held)]() mutable {
    done(std::move(held));
  };
}

std::function<void()> SequenceLeases::Cancel(WaitId id,
                                             const absl::Status& why) {
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return nullptr;
  timers_.Cancel(it->second.timer);
  it->second.lease->waiters.erase(id);
  auto done = std::move(it->second.done);
  waiters_.erase(it);
  return [done = std::move(done), why] { done(why); };
}

void SequenceLeases::FailAll(const absl::Status& why, Deferred& deferred) {
  for (auto& [id, waiter] : waiters_) {
    timers_.Cancel(waiter.timer);
    waiter.lease->waiters.erase(id);
    deferred.push_back([done = std::move(waiter.done), why] { done(why); });
  }
  waiters_.clear();
}

}  // namespace ccl::coordinator
