#include "server/rpc/coordinator_kv_store.h"

#include "common/status_macros.h"

namespace ccl {

absl::Status CoordinatorKvStore::Set(const std::string& key,
                                     const std::string& value) {
  return client_.KvSet(generation_, key, value);
}

absl::StatusOr<std::string> CoordinatorKvStore::Get(
    const std::string& key, std::chrono::milliseconds timeout) {
  if (auto it = known_.find(key); it != known_.end()) return it->second;
  CCL_ASSIGN_OR_RETURN(std::vector<std::string> values,
                       client_.KvWaitGet(generation_, {key}, timeout));
  return std::move(values.front());
}

absl::StatusOr<std::vector<std::string>> CoordinatorKvStore::GetMany(
    const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    auto it = known_.find(key);
    if (it == known_.end())
      return client_.KvWaitGet(generation_, keys, timeout);
    values.push_back(it->second);
  }
  return values;
}

absl::Status CoordinatorKvStore::Wait(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) {
  return client_.KvWait(generation_, keys, timeout);
}

}  // namespace ccl
