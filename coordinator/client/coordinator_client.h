// StatusOr API over the Coordinator stub, shared by the worker daemon and
// ccctl. Every call has a deadline: the call's own (for parked calls such as
// Register and KvWait) plus the client's RPC timeout.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "ccl/v1/coordinator.grpc.pb.h"
#include "common/credentials.h"

namespace ccl {

class CoordinatorClient {
 public:
  CoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                    std::chrono::milliseconds rpc_timeout);
  // Plaintext, no token: the zero-configuration local cluster.
  static std::unique_ptr<CoordinatorClient> Connect(
      const std::string& address, std::chrono::milliseconds rpc_timeout);
  // Through the credentials factory; INVALID_ARGUMENT if the security
  // options do not work (a file that cannot be read, say).
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const std::string& address, std::chrono::milliseconds rpc_timeout,
      const SecurityOptions& security);

  const std::string& target() const { return target_; }

  absl::StatusOr<v1::RegisterResponse> Register(
      const v1::RegisterRequest& request);
  // `timeout`, when set, bounds this call instead of the RPC timeout.
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request,
      std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  absl::Status Deregister(const v1::DeregisterRequest& request);
  absl::StatusOr<v1::World> GetWorld();

  absl::Status KvSet(int64_t generation, const std::string& key,
                     const std::string& value);
  absl::StatusOr<std::string> KvGet(int64_t generation, const std::string& key);
  absl::Status KvWait(int64_t generation, const std::vector<std::string>& keys,
                      std::chrono::milliseconds timeout);
  // Waits for the keys and returns their values, in order: one round trip
  // (two or more against a coordinator that predates KvWait's values).
  absl::StatusOr<std::vector<std::string>> KvWaitGet(
      int64_t generation, const std::vector<std::string>& keys,
      std::chrono::milliseconds timeout);

  // First of `count` consecutive sequence numbers of `group`.
  absl::StatusOr<int64_t> ReserveSequence(int64_t generation,
                                          const std::string& group,
                                          int64_t count);
  // The same under `lease` (see HoldLease); empty: under none.
  absl::StatusOr<v1::ReserveSequenceResponse> ReserveSequence(
      const v1::ReserveSequenceRequest& request);

  // Asks who holds a missing seq (AwaitSequenceHolder) without blocking:
  // `done` runs once, on a gRPC thread. Returns what cancels the call.
  std::function<void()> AwaitSequenceHolderAsync(
      const v1::AwaitSequenceHolderRequest& request,
      std::function<void(absl::StatusOr<v1::AwaitSequenceHolderResponse>)>
          done);

  v1::Coordinator::Stub& stub() { return *stub_; }

 private:
  std::unique_ptr<grpc::ClientContext> Context(
      std::chrono::milliseconds extra = std::chrono::milliseconds(0)) const;

  std::string target_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  std::chrono::milliseconds rpc_timeout_;
};

}  // namespace ccl
