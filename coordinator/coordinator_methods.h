// The Coordinator service's unary methods besides Register
// (proto/ccl/v1/coordinator.proto), as X(Method, Request, Response). The
// coordinator's adapter and the host agent both serve the whole service:
// each declares these from this one list, and the agent passes each through
// to the coordinator as it is. Register (batched by the agent), RegisterHost
// and HoldLease (server streams) are declared apart.
#pragma once

#define CCL_COORDINATOR_PLAIN_METHODS(X)                              \
  X(Heartbeat, HeartbeatRequest, HeartbeatResponse)                   \
  X(Deregister, DeregisterRequest, DeregisterResponse)                \
  X(GetWorld, GetWorldRequest, World)                                 \
  X(KvSet, KvSetRequest, KvSetResponse)                               \
  X(KvGet, KvGetRequest, KvGetResponse)                               \
  X(KvWait, KvWaitRequest, KvWaitResponse)                            \
  X(KvAdd, KvAddRequest, KvAddResponse)                               \
  X(KvCompareSet, KvCompareSetRequest, KvCompareSetResponse)          \
  X(KvDelete, KvDeleteRequest, KvDeleteResponse)                      \
  X(ReserveSequence, ReserveSequenceRequest, ReserveSequenceResponse) \
  X(AwaitSequenceHolder, AwaitSequenceHolderRequest,                  \
    AwaitSequenceHolderResponse)                                      \
  X(PostUniqueId, PostUniqueIdRequest, PostUniqueIdResponse)          \
  X(GetUniqueId, GetUniqueIdRequest, GetUniqueIdResponse)

// One unary method's override in a v1::Coordinator::CallbackService.
#define CCL_DECLARE_COORDINATOR_METHOD(Method, Request, Response)        \
  grpc::ServerUnaryReactor* Method(grpc::CallbackServerContext* context, \
                                   const v1::Request* request,           \
                                   v1::Response* response) override;
