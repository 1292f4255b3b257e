// KvStore over the coordinator's KV service, scoped to one generation. Used
// by the Gloo rendezvous and the NCCL id handout; its calls block, so only
// communicator threads (or the worker's main thread) use it, never a gRPC
// server thread.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "coordinator/client/coordinator_client.h"
#include "server/comm/kv_store.h"

namespace ccl {

class CoordinatorKvStore final : public KvStore {
 public:
  // `known`: values of this generation's keys the coordinator already sent
  // (RegisterResponse.kv, the NCCL ids). Their keys are set once per
  // generation, so reads of them are answered here without a call: that is
  // what lets most ranks of a large world form it with one call.
  CoordinatorKvStore(CoordinatorClient& client, int64_t generation,
                     std::map<std::string, std::string> known = {})
      : client_(client), generation_(generation), known_(std::move(known)) {}

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
  const std::map<std::string, std::string> known_;
};

}  // namespace ccl
