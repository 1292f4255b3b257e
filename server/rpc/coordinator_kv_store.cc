#include "server/rpc/coordinator_kv_store.h"

#include "common/status_macros.h"

namespace ccl {

absl::Status CoordinatorKvStore::Set(const std::string& key,
                                     const std::string& value) {
  return client_.KvSet(generation_, key, value);
}

absl::StatusOr<std::string> CoordinatorKvStore::Get(
    const std::string& key, std::chrono::milliseconds timeout) {
  CCL_RETURN_IF_ERROR(client_.KvWait(generation_, {key}, timeout));
  return client_.KvGet(generation_, key);
}

absl::Status CoordinatorKvStore::Wait(const std::vector<std::string>& keys,
                                      std::chrono::milliseconds timeout) {
  return client_.KvWait(generation_, keys, timeout);
}

}  // namespace ccl
