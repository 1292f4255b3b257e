#include "common/grpc_health.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "common/queue_streams.h"

namespace ccl {

void EnableHealthAndReflection() {
  grpc::EnableDefaultHealthCheckService(true);
  EnableReflection();
}

void EnableReflection() {
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

QueueHealth::QueueHealth(std::string service) : service_(std::move(service)) {}

void QueueHealth::Register(grpc::ServerBuilder& builder) {
  builder.RegisterService(methods_.service());
}

void QueueHealth::Serve(ServerQueue& queue) {
  using grpc::health::v1::HealthCheckRequest;
  using grpc::health::v1::HealthCheckResponse;
  using Check = UnaryCall<HealthCheckRequest, HealthCheckResponse>;
  Check::Serve(
      queue, methods_, *methods_.MethodIndex("Check"), [this](Check* call) {
        const std::string& name = call->request().service();
        if (name == kLivenessService) {
          call->response()->set_status(HealthCheckResponse::SERVING);
        } else if (name.empty() || name == service_) {
          call->response()->set_status(ready_.load()
                                           ? HealthCheckResponse::SERVING
                                           : HealthCheckResponse::NOT_SERVING);
        } else {
          // What gRPC's own health service answers for a name it
          // does not know.
          call->Finish(absl::NotFoundError(
              "no health status for service '" + name.substr(0, 256) +
              "'; this server reports '', '" + service_ + "' and '" +
              kLivenessService + "'"));
          return;
        }
        call->Finish(absl::OkStatus());
      });
  ServerStreamCall<HealthCheckRequest>::Serve(
      queue, methods_, *methods_.MethodIndex("Watch"),
      [](const HealthCheckRequest&)
          -> absl::StatusOr<std::unique_ptr<StreamSource>> {
        return absl::UnimplementedError(
            "this server answers grpc.health.v1.Health/Check only: poll it");
      });
}

}  // namespace ccl
