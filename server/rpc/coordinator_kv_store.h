// KvStore over the coordinator's KV service, scoped to one generation. Used
// by the Gloo rendezvous; its calls block, so only communicator threads (or
// the worker's main thread) use it, never a gRPC server thread.
#pragma once

#include "coordinator/client/coordinator_client.h"
#include "server/comm/kv_store.h"

namespace ccl {

class CoordinatorKvStore final : public KvStore {
 public:
  CoordinatorKvStore(CoordinatorClient& client, int64_t generation)
      : client_(client), generation_(generation) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) override;
  absl::StatusOr<std::vector<std::string>> GetMany(
      const std::vector<std::string>& keys,
      std::chrono::milliseconds timeout) override;

 private:
  CoordinatorClient& client_;
  const int64_t generation_;
};

}  // namespace ccl
