#include "coordinator/kv_space.h"

#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ccl::coordinator {
std::string SequenceGroupName(const std::string& group) {
  return group.empty() ? std::string("world") : group;
}

KvSpace::KvSpace(TimerQueue& timers, std::function<void(WaitId)> on_deadline)
    : timers_(timers), on_deadline_(std::move(on_deadline)) {}

const KvSpace::Generation* KvSpace::Find(int64_t generation) const {
  auto it = generations_.find(generation);
  return it == generations_.end() ? nullptr : &it->second;
}

absl::StatusOr<int64_t> KvSpace::Resolve(int64_t generation) const {
  if (generation < 0 || generation > current_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown generation ", generation, " (current is ", current_, ")"));
  }
  if (generation == 0) return current_;
  if (generation != current_ && generation != previous_) {
    return absl::FailedPreconditionError(
        absl::StrCat("generation ", generation, " is over (current is ",
                     current_, ") and its keys were dropped; re-register"));
  }
  return generation;
}

TimerQueue::TimerId KvSpace::Arm(WaitId id, std::chrono::milliseconds timeout) {
  return timers_.ScheduleAfter(
      timeout, [on_deadline = on_deadline_, id] { on_deadline(id); });
}

void KvSpace::Advance(int64_t generation, const absl::Status& why,
                      Deferred& deferred) {
  if (generation == current_) return;
  for (auto& [g, data] : generations_) {
    if (g < generation) AbortWaits(g, why, deferred);
  }
  previous_ = current_;
  current_ = generation;
  std::erase_if(generations_, [this](const auto& entry) {
    return entry.first != current_ && entry.first != previous_;
  });
}

void KvSpace::AbortWaits(int64_t generation, const absl::Status& why,
                         Deferred& deferred) {
  auto it = generations_.find(generation);
  if (it == generations_.end()) return;
  std::unordered_set<WaitId> parked = std::move(it->second.parked);
  it->second.parked.clear();
  for (WaitId id : parked) {
    if (auto w = kv_waiters_.find(id); w != kv_waiters_.end()) {
      timers_.Cancel(w->second.timer);
      Unhook(id, w->second);
      deferred.push_back(
          [done = std::move(w->second.done), why] { done(why); });
      kv_waiters_.erase(w);
    } else if (auto u = id_waiters_.find(id); u != id_waiters_.end()) {
      timers_.Cancel(u->second.timer);
      Unhook(id, u->second);
      deferred.push_back(
          [done = std::move(u->second.done), why] { done(why); });
      id_waiters_.erase(u);
    }
  }
}

void KvSpace::Unhook(WaitId id, const KvWaiter& waiter) {
  auto it = generations_.find(waiter.generation);
  if (it == generations_.end()) return;
  Generation& data = it->second;
  for (const std::string& key : waiter.missing) {
    auto list = data.kv_waits.find(key);
    if (list == data.kv_waits.end()) continue;
    list->second.erase(id);
    if (list->second.empty()) data.kv_waits.erase(list);
  }
  data.parked.erase(id);
}

void KvSpace::Unhook(WaitId id, const IdWaiter& waiter) {
  auto it = generations_.find(waiter.generation);
  if (it == generations_.end()) return;
  Generation& data = it->second;
  if (auto list = data.id_waits.find(waiter.group);
      list != data.id_waits.end()) {
    list->second.erase(id);
    if (list->second.empty()) data.id_waits.erase(list);
  }
  data.parked.erase(id);
}

KvWaitResult KvSpace::ResultOf(const KvWaiter& waiter) const {
  KvWaitResult result{waiter.generation, {}};
  if (!waiter.with_values) return result;
  const Generation* data = Find(waiter.generation);
  result.values.reserve(waiter.keys.size());
  for (const std::string& key : waiter.keys) {
    auto it = data->kv.find(key);
    result.values.push_back(it->second);
  }
  return result;
}

void KvSpace::Put(int64_t generation, const std::string& key, Value value,
                  Deferred& deferred) {
  Generation& data = At(generation);
  auto [it, inserted] = data.kv.try_emplace(key);
  if (inserted) {
    data.bytes += static_cast<int64_t>(key.size());
  } else {
    data.bytes -= static_cast<int64_t>(it->second->size());
  }
  data.bytes += static_cast<int64_t>(value->size());
  it->second = std::move(value);

  auto waits = data.kv_waits.find(key);
  if (waits == data.kv_waits.end()) return;
  std::unordered_set<WaitId> ids = std::move(waits->second);
  data.kv_waits.erase(waits);
  for (WaitId id : ids) {
    auto w = kv_waiters_.find(id);
    if (w == kv_waiters_.end()) continue;
    w->second.missing.erase(key);
    if (!w->second.missing.empty()) continue;
    // A key that was there when the wait began may have been deleted since
    // (KvDelete): the wait is for it again, not done (reading it crashed,
    // found by coordinator_request_fuzzer).
    for (const std::string& wanted : w->second.keys) {
      if (!data.kv.contains(wanted)) {
        w->second.missing.insert(wanted);
        data.kv_waits[wanted].insert(id);
      }
    }
    if (!w->second.missing.empty()) continue;
    timers_.Cancel(w->second.timer);
    data.parked.erase(id);
    deferred.push_back(
        [done = std::move(w->second.done),
         result = ResultOf(w->second)]() mutable { done(std::move(result)); });
    kv_waiters_.erase(w);
  }
}

void KvSpace::Set(int64_t generation, const std::string& key, std::string value,
                  Deferred& deferred) {
  Put(generation, key, std::make_shared<const std::string>(std::move(value)),
      deferred);
}

absl::StatusOr<std::string> KvSpace::Get(int64_t generation,
                                         const std::string& key) const {
  if (const Generation* data = Find(generation); data != nullptr) {
    if (auto it = data->kv.find(key); it != data->kv.end()) return *it->second;
  }
  return absl::NotFoundError(absl::StrCat(
      "kv get: key '", key, "' not found in generation ", generation));
}

void KvSpace::Wait(WaitId id, int64_t generation, std::vector<std::string> keys,
                   bool with_values, std::chrono::milliseconds timeout,
                   Callback<KvWaitResult> done, Deferred& deferred) {
  const Generation* data = Find(generation);
  KvWaiter waiter;
  waiter.generation = generation;
  for (const std::string& key : keys) {
    if (data == nullptr || !data->kv.contains(key)) waiter.missing.insert(key);
  }
  if (!waiter.missing.empty() && generation != current_) {
    deferred.push_back([done = std::move(done), generation,
                        current = current_] {
      done(absl::AbortedError(absl::StrCat("kv wait: generation ", generation,
                                           " is over (current is ", current,
                                           "); re-register")));
    });
    return;
  }
  waiter.with_values = with_values;
  waiter.keys = std::move(keys);  // re-checked when the last one arrives
  if (waiter.missing.empty()) {
    deferred.push_back(
        [done = std::move(done), result = ResultOf(waiter)]() mutable {
          done(std::move(result));
        });
    return;
  }
  Generation& target = At(generation);
  for (const std::string& key : waiter.missing) target.kv_waits[key].insert(id);
  target.parked.insert(id);
  waiter.done = std::move(done);
  waiter.timeout = timeout;
  waiter.timer = Arm(id, timeout);
  kv_waiters_.emplace(id, std::move(waiter));
}

absl::StatusOr<int64_t> KvSpace::Add(int64_t generation, const std::string& key,
                                     int64_t delta, Deferred& deferred) {
  int64_t value = 0;
  if (const Generation* data = Find(generation); data != nullptr) {
    auto it = data->kv.find(key);
    if (it != data->kv.end() && !absl::SimpleAtoi(*it->second, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv add: key '", key, "' holds a value that is not an ",
                       "integer (", it->second->size(), " bytes)"));
    }
  }
  if ((delta > 0 && value > std::numeric_limits<int64_t>::max() - delta) ||
      (delta < 0 && value < std::numeric_limits<int64_t>::min() - delta)) {
    return absl::OutOfRangeError(absl::StrCat("kv add: ", value, " + ", delta,
                                              " overflows a 64-bit integer"));
  }
  value += delta;
  Set(generation, key, absl::StrCat(value), deferred);
  return value;
}

CompareSetResult KvSpace::CompareSet(int64_t generation, const std::string& key,
                                     const std::string& expected,
                                     std::string desired, Deferred& deferred) {
  CompareSetResult result;
  result.generation = generation;
  const Generation* data = Find(generation);
  const Value* current = nullptr;
  if (data != nullptr) {
    if (auto it = data->kv.find(key); it != data->kv.end()) {
      current = &it->second;
    }
  }
  const bool matches = expected.empty()
                           ? current == nullptr
                           : current != nullptr && **current == expected;
  if (matches) {
    result.swapped = true;
    result.value = desired;
    Set(generation, key, std::move(desired), deferred);
  } else if (current != nullptr) {
    result.value = **current;
  }
  return result;
}

bool KvSpace::Delete(int64_t generation, const std::string& key) {
  auto it = generations_.find(generation);
  if (it == generations_.end()) return false;
  Generation& data = it->second;
  auto entry = data.kv.find(key);
  if (entry == data.kv.end()) return false;
  data.bytes -= static_cast<int64_t>(key.size() + entry->second->size());
  data.kv.erase(entry);
  return true;
}

int64_t KvSpace::Reserve(int64_t generation, const std::string& group,
                         int64_t count) {
  int64_t& next = At(generation).sequences[SequenceGroupName(group)];
  const int64_t first = next;
  next += count;
  return first;
}

void KvSpace::SeedSequence(int64_t generation, const std::string& group,
                           int64_t next) {
  int64_t& counter = At(generation).sequences[SequenceGroupName(group)];
  counter = std::max(counter, next);
}

absl::Status KvSpace::PostUniqueId(int64_t generation, const std::string& group,
                                   std::string unique_id, Deferred& deferred) {
  Generation& data = At(generation);
  const std::string name = SequenceGroupName(group);
  auto [it, inserted] = data.unique_ids.emplace(name, unique_id);
  if (!inserted) {
    if (it->second == unique_id) return absl::OkStatus();  // A retried post.
    return absl::AlreadyExistsError(
        absl::StrCat("post unique id: group '", name, "' of generation ",
                     generation, " already has a different id"));
  }
  data.bytes += static_cast<int64_t>(name.size() + unique_id.size());
  auto waits = data.id_waits.find(name);
  if (waits == data.id_waits.end()) return absl::OkStatus();
  std::unordered_set<WaitId> ids = std::move(waits->second);
  data.id_waits.erase(waits);
  for (WaitId id : ids) {
    auto w = id_waiters_.find(id);
    if (w == id_waiters_.end()) continue;
    timers_.Cancel(w->second.timer);
    data.parked.erase(id);
    deferred.push_back(
        [done = std::move(w->second.done), generation, unique_id] {
          done(UniqueIdResult{generation, unique_id});
        });
    id_waiters_.erase(w);
  }
  return absl::OkStatus();
}

void KvSpace::GetUniqueId(WaitId id, int64_t generation,
                          const std::string& group,
                          std::chrono::milliseconds timeout,
                          Callback<UniqueIdResult> done, Deferred& deferred) {
  const std::string name = SequenceGroupName(group);
  if (const Generation* data = Find(generation); data != nullptr) {
    if (auto it = data->unique_ids.find(name); it != data->unique_ids.end()) {
      deferred.push_back(
          [done = std::move(done), generation, unique_id = it->second] {
            done(UniqueIdResult{generation, unique_id});
          });
      return;
    }
  }
  if (generation != current_) {
    deferred.push_back([done = std::move(done), generation,
                        current = current_] {
      done(absl::AbortedError(absl::StrCat("get unique id: generation ",
                                           generation, " is over (current is ",
                                           current, ")")));
    });
    return;
  }
  Generation& data = At(generation);
  data.id_waits[name].insert(id);
  data.parked.insert(id);
  IdWaiter& waiter = id_waiters_[id];
  waiter.generation = generation;
  waiter.group = name;
  waiter.done = std::move(done);
  waiter.timer = Arm(id, timeout);
}

std::function<void()> KvSpace::Expire(WaitId id) {
  if (auto it = kv_waiters_.find(id); it != kv_waiters_.end()) {
    KvWaiter waiter = std::move(it->second);
    kv_waiters_.erase(it);
    Unhook(id, waiter);
    std::string message =
        absl::StrCat("kv wait: timed out after ", waiter.timeout.count(),
                     " ms in generation ", waiter.generation,
                     "; missing keys: ", absl::StrJoin(waiter.missing, ", "));
    return [done = std::move(waiter.done), message] {
      done(absl::DeadlineExceededError(message));
    };
  }
  if (auto it = id_waiters_.find(id); it != id_waiters_.end()) {
    IdWaiter waiter = std::move(it->second);
    id_waiters_.erase(it);
    Unhook(id, waiter);
    std::string message = absl::StrCat(
        "get unique id: nothing posted for group '", waiter.group,
        "' of generation ", waiter.generation, " before the deadline");
    return [done = std::move(waiter.done), message] {
      done(absl::DeadlineExceededError(message));
    };
  }
  return nullptr;
}

std::function<void()> KvSpace::Cancel(WaitId id, const absl::Status& why) {
  if (auto it = kv_waiters_.find(id); it != kv_waiters_.end()) {
    timers_.Cancel(it->second.timer);
    Unhook(id, it->second);
    auto done = std::move(it->second.done);
    kv_waiters_.erase(it);
    return [done = std::move(done), why] { done(why); };
  }
  if (auto it = id_waiters_.find(id); it != id_waiters_.end()) {
    timers_.Cancel(it->second.timer);
    Unhook(id, it->second);
    auto done = std::move(it->second.done);
    id_waiters_.erase(it);
    return [done = std::move(done), why] { done(why); };
  }
  return nullptr;
}

void KvSpace::FailAll(const absl::Status& why, Deferred& deferred) {
  for (auto& [id, waiter] : kv_waiters_) {
    timers_.Cancel(waiter.timer);
    deferred.push_back([done = std::move(waiter.done), why] { done(why); });
  }
  for (auto& [id, waiter] : id_waiters_) {
    timers_.Cancel(waiter.timer);
    deferred.push_back([done = std::move(waiter.done), why] { done(why); });
  }
  kv_waiters_.clear();
  id_waiters_.clear();
  for (auto& [generation, data] : generations_) {
    data.kv_waits.clear();
    data.id_waits.clear();
    data.parked.clear();
  }
}

KvStats KvSpace::Stats() const {
  KvStats stats;
  for (const auto& [generation, data] : generations_) {
    ++stats.generations;
    stats.keys += static_cast<int64_t>(data.kv.size() + data.sequences.size() +
                                       data.unique_ids.size());
    stats.bytes += data.bytes;
  }
  stats.parked = static_cast<int64_t>(kv_waiters_.size() + id_waiters_.size());
  return stats;
}

}  // namespace ccl::coordinator
