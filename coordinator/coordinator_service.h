// The coordinator's gRPC adapter: converts protos to the core's native types
// and back, and maps absl::Status to grpc::Status. It uses the callback API
// so that no gRPC thread ever blocks: Register, KvWait and GetUniqueId park
// a reactor that the core finishes when the condition holds, at the deadline,
// or when the client cancels.
#pragma once

#include <memory>
#include <mutex>

#include "ccl/v1/coordinator.grpc.pb.h"
#include "coordinator/coordinator_core.h"
#include "coordinator/coordinator_methods.h"
#include "coordinator/request_limits.h"

namespace ccl::coordinator {

class CoordinatorService final : public v1::Coordinator::CallbackService {
 public:
  // `core` must outlive the service and every call in flight. Every request
  // is checked against `limits` (request_limits.h) before the core sees it.
  explicit CoordinatorService(CoordinatorCore& core,
                              CoordinatorLimits limits = CoordinatorLimits())
      : core_(core), limits_(limits) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerWriteReactor<v1::RegisterHostReply>* RegisterHost(
      grpc::CallbackServerContext* context,
      const v1::RegisterHostRequest* request) override;
  CCL_COORDINATOR_PLAIN_METHODS(CCL_DECLARE_COORDINATOR_METHOD)
  grpc::ServerWriteReactor<v1::HoldLeaseReply>* HoldLease(
      grpc::CallbackServerContext* context,
      const v1::HoldLeaseRequest* request) override;

 private:
  // Every member of a world gets the same World message; converting a world
  // of thousands once per member would cost N^2. The header (no members) is
  // what Register replies carry unless the member list is asked for.
  std::shared_ptr<const v1::World> WorldProto(
      const std::shared_ptr<const WorldInfo>& world, bool include_members);

  // The core's request for a validated Register proto, with the caller's
  // deadline; Register's and each RegisterHost member's.
  absl::StatusOr<RegisterRequest> NativeRegister(
      const grpc::CallbackServerContext& context,
      const v1::RegisterRequest& request);
  // A registration's answer as Register sends it.
  void FillRegisterResponse(const RegisterResult& result, bool include_members,
                            v1::RegisterResponse* response);

  CoordinatorCore& core_;
  const CoordinatorLimits limits_;
  std::mutex cache_mutex_;
  std::shared_ptr<const WorldInfo> cached_world_;
  std::shared_ptr<const v1::World> cached_world_proto_;
  std::shared_ptr<const v1::World> cached_world_header_;
};

v1::World ToProto(const WorldInfo& world);

// The core's registration from a validated proto (ValidateRequest passed);
// the adapter's conversion, shared with the fuzz target. Heartbeats convert
// in common/proto_convert.h, where the worker's go the other way.
absl::StatusOr<RegisterRequest> RegisterFromProto(
    const v1::RegisterRequest& request, const CoordinatorLimits& limits);

}  // namespace ccl::coordinator
