// The operational gRPC surface both daemons share: the standard health
// service (grpc.health.v1.Health, what Kubernetes' grpc probes and
// grpc_health_probe call) and server reflection (what grpcurl lists).
//
// Health names: "" and the daemon's own service follow readiness (a worker
// is NOT_SERVING until its world communicator is ready and again while it
// drains); "liveness" is SERVING for as long as the process serves at all,
// so that a liveness probe never kills a worker that is still waiting for
// its peers.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <string>

#include "common/queue_server.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ccl {

inline constexpr char kLivenessService[] = "liveness";

// Call once before the first grpc::ServerBuilder is made.
void EnableHealthAndReflection();
// Reflection alone, for a server that answers health on its own queue
// (QueueHealth): gRPC's default health service is a callback service.
void EnableReflection();

class ServingHealth {
 public:
  // `service` is the daemon's gRPC service name, e.g. "ccl.v1.Worker".
  // Starts NOT_SERVING for readiness, SERVING for liveness.
  ServingHealth(grpc::Server& server, std::string service);
  void SetReady(bool ready);

 private:
  grpc::HealthCheckServiceInterface* health_;
  std::string service_;
};

// grpc.health.v1 on a ServerQueue (common/queue_server.h), with the names
// and states of ServingHealth. Watch is answered UNIMPLEMENTED (the health
// protocol allows it; poll Check), as no client of ours watches.
class QueueHealth {
 public:
  explicit QueueHealth(std::string service);
  // Before BuildAndStart.
  void Register(grpc::ServerBuilder& builder);
  // After BuildAndStart.
  void Serve(ServerQueue& queue);
  void SetReady(bool ready) { ready_.store(ready); }

 private:
  const std::string service_;
  std::atomic<bool> ready_{false};
  AllRaw<grpc::health::v1::Health> methods_;
};

}  // namespace ccl
