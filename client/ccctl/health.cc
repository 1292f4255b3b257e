// ccctl health: asks a daemon's grpc.health.v1 service, as a Kubernetes grpc
// probe or grpc_health_probe would, so that compose healthchecks and scripts
// need no other tool in the image. Exit 0 when SERVING, 1 otherwise (also
// for unreadable credential files; 2 for a bad duration). The channel comes
// from the credentials factory every other command uses, so it speaks TLS
// (and mTLS) given --tls-ca (and --tls-cert/--tls-key) or their CCL_TLS_*
// variables: the exec probe for a TLS server, which Kubernetes' plaintext
// gRPC probe cannot reach. The health service itself needs no token.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <iostream>
#include <thread>

#include "client/ccctl/ccctl.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/format.h"
#include "common/credentials.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace ccl::ctl {
namespace {

struct HealthOptions {
  std::string address;
  std::string service;
  std::string wait = "0s";
};

int RunHealth(const Globals& globals, const HealthOptions& options) {
  auto timeout = ParseDuration(globals.timeout);
  auto wait = ParseDuration(options.wait);
  if (!timeout.ok()) return Fail(timeout.status(), true);
  if (!wait.ok()) return Fail(wait.status(), true);
  const std::string address =
      options.address.empty() ? ResolveCoordinator(globals) : options.address;
  auto security = ResolveSecurity(globals);
  if (!security.ok()) return Fail(security.status());
  auto channel = MakeChannel(address, *security);
  if (!channel.ok()) return Fail(channel.status());
  auto stub = grpc::health::v1::Health::NewStub(*channel);
  const auto give_up = std::chrono::steady_clock::now() + *wait;
  std::string status_name;
  while (true) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + *timeout);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(options.service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = stub->Check(&context, request, &response);
    if (status.ok()) {
      status_name = grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
          response.status());
    } else {
      status_name = status.error_code() == grpc::StatusCode::NOT_FOUND
                        ? "SERVICE_UNKNOWN"
                        : "UNREACHABLE (" + status.error_message() + ")";
    }
    if (status_name == "SERVING" ||
        std::chrono::steady_clock::now() >= give_up) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  if (globals.json()) {
    PrintJson({{"address", address},
               {"service", options.service},
               {"status", status_name}});
  } else {
    std::cout << address << " " << status_name << "\n";
  }
  return status_name == "SERVING" ? kExitOk : kExitFailure;
}

}  // namespace

void AddHealthCommand(CLI::App& app, Globals& globals, int& exit_code) {
  auto options = std::make_shared<HealthOptions>();
  CLI::App* health = app.add_subcommand(
      "health",
      "grpc.health.v1 status of a coordinator or worker (exit 0: SERVING)");
  health->add_option("address", options->address,
                     "HOST:PORT (default: the coordinator)");
  health->add_option("--service", options->service,
                     "\"\" (readiness), liveness, ccl.v1.Worker, "
                     "ccl.v1.Coordinator");
  health
      ->add_option("--wait", options->wait,
                   "keep asking until SERVING or this long, e.g. 30s")
      ->capture_default_str();
  health->callback([&globals, &exit_code, options] {
    exit_code = RunHealth(globals, *options);
  });
}

}  // namespace ccl::ctl
