#include "common/grpc_health.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

namespace ccl {

void EnableHealthAndReflection() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
}

ServingHealth::ServingHealth(grpc::Server& server, std::string service)
    : health_(server.GetHealthCheckService()), service_(std::move(service)) {
  if (health_ == nullptr) return;
  health_->SetServingStatus(kLivenessService, true);
  SetReady(false);
}

void ServingHealth::SetReady(bool ready) {
  if (health_ == nullptr) return;
  health_->SetServingStatus("", ready);
  health_->SetServingStatus(service_, ready);
}

}  // namespace ccl
