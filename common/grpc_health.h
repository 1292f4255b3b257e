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

#include <string>

namespace ccl {

inline constexpr char kLivenessService[] = "liveness";

// Call once before the first grpc::ServerBuilder is made.
void EnableHealthAndReflection();

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

}  // namespace ccl
