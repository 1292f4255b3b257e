// What the worker's logic needs of the coordinator's KV store: enough for a
// Gloo rendezvous and for the NCCL unique id handout. The gRPC-backed
// implementation lives in the adapter layer; tests use an in-memory one.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ccl {

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual absl::Status Set(const std::string& key,
                           const std::string& value) = 0;
  // Waits up to `timeout` for the key to appear.
  virtual absl::StatusOr<std::string> Get(
      const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual absl::Status Wait(const std::vector<std::string>& keys,
                            std::chrono::milliseconds timeout) = 0;
  // Waits up to `timeout` for every key and returns their values in order.
  // Stores that can do it in one round trip override this.
  virtual absl::StatusOr<std::vector<std::string>> GetMany(
      const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    if (absl::Status s = Wait(keys, timeout); !s.ok()) return s;
    std::vector<std::string> values;
    for (const auto& key : keys) {
      absl::StatusOr<std::string> value = Get(key, timeout);
      if (!value.ok()) return value.status();
      values.push_back(*std::move(value));
    }
    return values;
  }
};

}  // namespace ccl
