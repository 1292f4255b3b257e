// CoordinatorCore's KV store, sequence numbers and unique ids: requests are
// validated here and resolved to a generation under the core's lock; the
// data and the parked calls are KvSpace's (kv_space.h).
#include "absl/strings/str_cat.h"
#include "coordinator/coordinator_core.h"

namespace ccl::coordinator {
namespace {

// As many as a worker's executor accepts ahead of its next seq
// (Executor::kMaxSeqsAhead): a range that long can be used, or released.
constexpr int64_t kMaxSequenceCount = int64_t{1} << 16;
constexpr size_t kMaxUniqueIdBytes = 4096;

}  // namespace

absl::Status CoordinatorCore::ValidateValue(const std::string& value) const {
  if (value.size() > options_.max_value_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of ", value.size(), " bytes exceeds the limit of ",
                     options_.max_value_bytes, " bytes (--max-value-bytes)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CoordinatorCore::KvSet(int64_t generation,
                                               const std::string& key,
                                               std::string value) {
  if (key.empty()) return absl::InvalidArgumentError("kv set: key is empty");
  if (absl::Status s = ValidateValue(value); !s.ok()) return s;
  Deferred deferred;
  absl::StatusOr<int64_t> gen;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gen = kv_.Resolve(generation);
    if (gen.ok()) kv_.Set(*gen, key, std::move(value), deferred);
  }
  for (auto& f : deferred) f();
  return gen;
}

absl::StatusOr<std::pair<int64_t, std::string>> CoordinatorCore::KvGet(
    int64_t generation, const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("kv get: key is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  absl::StatusOr<int64_t> gen = kv_.Resolve(generation);
  if (!gen.ok()) return gen.status();
  absl::StatusOr<std::string> value = kv_.Get(*gen, key);
  if (!value.ok()) return value.status();
  return std::make_pair(*gen, *std::move(value));
}

void CoordinatorCore::KvWait(WaitId id, int64_t generation,
                             std::vector<std::string> keys,
                             std::chrono::milliseconds timeout,
                             bool with_values, Callback<KvWaitResult> done) {
  for (const auto& key : keys) {
    if (key.empty()) {
      return done(absl::InvalidArgumentError("kv wait: a key is empty"));
    }
  }
  if (timeout.count() < 0) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("kv wait: timeout ", timeout.count(), " ms is negative")));
  }
  timeout = WaitTimeout(timeout);
  // `done` is moved only when the wait parks, so it still answers an error.
  absl::Status parked = Park(generation, [&](int64_t gen, Deferred& deferred) {
    kv_.Wait(id, gen, std::move(keys), with_values, timeout, std::move(done),
             deferred);
  });
  if (!parked.ok()) done(parked);
}

absl::StatusOr<std::pair<int64_t, int64_t>> CoordinatorCore::KvAdd(
    int64_t generation, const std::string& key, int64_t delta) {
  if (key.empty()) return absl::InvalidArgumentError("kv add: key is empty");
  Deferred deferred;
  absl::StatusOr<std::pair<int64_t, int64_t>> result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    absl::StatusOr<int64_t> gen = kv_.Resolve(generation);
    if (!gen.ok()) return gen.status();
    absl::StatusOr<int64_t> value = kv_.Add(*gen, key, delta, deferred);
    if (!value.ok()) return value.status();
    result = std::make_pair(*gen, *value);
  }
  for (auto& f : deferred) f();
  return result;
}

absl::StatusOr<CompareSetResult> CoordinatorCore::KvCompareSet(
    int64_t generation, const std::string& key, const std::string& expected,
    std::string desired) {
  if (key.empty()) {
    return absl::InvalidArgumentError("kv compare-set: key is empty");
  }
  if (absl::Status s = ValidateValue(desired); !s.ok()) return s;
  Deferred deferred;
  CompareSetResult result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    absl::StatusOr<int64_t> gen = kv_.Resolve(generation);
    if (!gen.ok()) return gen.status();
    result = kv_.CompareSet(*gen, key, expected, std::move(desired), deferred);
  }
  for (auto& f : deferred) f();
  return result;
}

absl::StatusOr<std::pair<int64_t, bool>> CoordinatorCore::KvDelete(
    int64_t generation, const std::string& key) {
  if (key.empty()) return absl::InvalidArgumentError("kv delete: key is empty");
  std::lock_guard<std::mutex> lock(mutex_);
  absl::StatusOr<int64_t> gen = kv_.Resolve(generation);
  if (!gen.ok()) return gen.status();
  return std::make_pair(*gen, kv_.Delete(*gen, key));
}

absl::StatusOr<std::pair<int64_t, int64_t>> CoordinatorCore::ReserveSequence(
    int64_t generation, const std::string& group, int64_t count) {
  auto reserved = ReserveSequence(generation, group, count, std::string());
  if (!reserved.ok()) return reserved.status();
  return std::make_pair(reserved->generation, reserved->first);
}

absl::StatusOr<CoordinatorCore::ReservedSequence>
CoordinatorCore::ReserveSequence(int64_t generation, const std::string& group,
                                 int64_t count, const std::string& lease) {
  if (count <= 0 || count > kMaxSequenceCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserve sequence: count must be in [1, ",
                     kMaxSequenceCount, "], got ", count));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // Before a world has formed (a coordinator that just restarted, before
  // its workers re-registered and it adopted their generation) there is no
  // generation to count in. Seqs of "generation 0" would reach the workers
  // as ops for whatever generation they run, numbered from a counter apart
  // from the one the adopted generation continues: two ops could get one
  // seq, and ranks would pair different ops.
  if (generation_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "reserve sequence: no world has formed yet (", DescribeMissingLocked(),
        "); sequence numbers are handed out once it has"));
  }
  absl::StatusOr<int64_t> gen = kv_.Resolve(generation);
  if (!gen.ok()) return gen.status();
  // The clients (ccctl, C++, Python) recognise this refusal by the world's
  // reforming_reason and wait for the next generation within the op's
  // timeout: the op runs there.
  // A generation that is over takes no new ops either: its workers have
  // left it, and would refuse an op stamped with it.
  if (*gen != generation_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "reserve sequence: generation ", *gen,
        " is over; the world is in "
        "generation ",
        generation_,
        began_after_.empty()
            ? ""
            : absl::StrCat(" (it began after ", began_after_, ")")));
  }
  if (!sealed_reason_.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "reserve sequence: generation ", generation_, " is re-forming after ",
        sealed_reason_,
        "; no new op runs in it. Send the op again once "
        "the next generation has begun (the clients wait for it)"));
  }
  ReservedSequence reserved;
  reserved.generation = *gen;
  reserved.first = kv_.Reserve(*gen, group, count);
  reserved.leased = leases_.Record(*gen, group, reserved.first, count, lease);
  return reserved;
}

absl::Status CoordinatorCore::OpenLease(const std::string& lease,
                                        std::string holder) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (shutting_down_) {
    return absl::UnavailableError("coordinator is shutting down");
  }
  return leases_.Open(lease, std::move(holder));
}

void CoordinatorCore::CloseLease(const std::string& lease) {
  Deferred deferred;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    leases_.Close(lease, deferred);
  }
  for (auto& f : deferred) f();
}

void CoordinatorCore::AwaitSequenceHolder(WaitId id, int64_t generation,
                                          const std::string& group, int64_t seq,
                                          std::chrono::milliseconds timeout,
                                          Callback<SequenceHolder> done) {
  if (timeout.count() < 0) {
    return done(absl::InvalidArgumentError(
        absl::StrCat("await sequence holder: timeout ", timeout.count(),
                     " ms is negative")));
  }
  timeout = WaitTimeout(timeout);
  absl::Status parked = Park(generation, [&](int64_t gen, Deferred& deferred) {
    leases_.Await(id, gen, group, seq, timeout, std::move(done), deferred);
  });
  if (!parked.ok()) done(parked);
}

absl::StatusOr<int64_t> CoordinatorCore::PostUniqueId(int64_t generation,
                                                      const std::string& group,
                                                      std::string unique_id) {
  if (unique_id.empty() || unique_id.size() > kMaxUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("post unique id: the id must be 1 to ", kMaxUniqueIdBytes,
                     " bytes, got ", unique_id.size()));
  }
  Deferred deferred;
  absl::StatusOr<int64_t> gen;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gen = kv_.Resolve(generation);
    if (!gen.ok()) return gen.status();
    absl::Status posted =
        kv_.PostUniqueId(*gen, group, std::move(unique_id), deferred);
    if (!posted.ok()) return posted;
  }
  for (auto& f : deferred) f();
  return gen;
}

void CoordinatorCore::GetUniqueId(WaitId id, int64_t generation,
                                  const std::string& group,
                                  std::chrono::milliseconds timeout,
                                  Callback<UniqueIdResult> done) {
  if (timeout.count() < 0) {
    return done(absl::InvalidArgumentError(absl::StrCat(
        "get unique id: timeout ", timeout.count(), " ms is negative")));
  }
  timeout = WaitTimeout(timeout);
  absl::Status parked = Park(generation, [&](int64_t gen, Deferred& deferred) {
    kv_.GetUniqueId(id, gen, group, timeout, std::move(done), deferred);
  });
  if (!parked.ok()) done(parked);
}

absl::Status CoordinatorCore::Park(
    int64_t generation, const std::function<void(int64_t, Deferred&)>& park) {
  Deferred deferred;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    absl::StatusOr<int64_t> gen = kv_.Resolve(generation);
    if (!gen.ok()) return gen.status();
    if (shutting_down_) {
      return absl::UnavailableError("coordinator is shutting down");
    }
    park(*gen, deferred);
  }
  for (auto& f : deferred) f();
  return absl::OkStatus();
}

}  // namespace ccl::coordinator
