// cchostagent: one per host, in front of the coordinator. The host's workers
// point --coordinator at it; it sends their registrations to the coordinator
// as one RegisterHost call and passes every other call through
// (host_agent_service.h). Serves until SIGTERM or SIGINT.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/credentials.h"
#include "common/daemon_flags.h"
#include "common/grpc_health.h"
#include "common/metrics_http.h"
#include "common/process_safety.h"
#include "common/security_flags.h"
#include "common/status_macros.h"
#include "coordinator/host_agent/host_agent_service.h"
#include "spdlog/spdlog.h"

namespace {

std::string EnvOr(const char* name, std::string fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// Everything cchostagent is told on its command line or by its environment.
struct AgentFlags {
  std::string coordinator = EnvOr("CCL_COORDINATOR", "127.0.0.1:29400");
  std::string listen = "127.0.0.1:29401";
  int workers = 0;
  int64_t window_ms = -1;  // see --window-ms
  bool insecure = false;
  ccl::DaemonFlags daemon;
  ccl::SecurityFlags security;  // towards the coordinator
};

void AddAgentFlags(CLI::App& app, AgentFlags& f) {
  app.add_option("--coordinator", f.coordinator,
                 "the coordinator's HOST:PORT (env CCL_COORDINATOR)")
      ->capture_default_str();
  app.add_option("--listen", f.listen,
                 "host:port the host's workers reach it on (port 0: any)")
      ->capture_default_str()
      ->envname("CCL_HOST_AGENT_LISTEN");
  app.add_option("--workers", f.workers,
                 "workers on this host: their registrations leave as one "
                 "call as soon as all have come (fallback: "
                 "$LOCAL_WORLD_SIZE, as torchrun sets it; 0: by the window "
                 "alone)");
  app.add_option("--window-ms", f.window_ms,
                 "longest a registration waits for the host's others "
                 "(default: 2000 with --workers, where a batch leaves by its "
                 "count and the window only bounds a straggler's or a "
                 "restarted worker's wait; 200 without)");
  app.add_flag("--insecure", f.insecure,
               "serve plaintext on a non-loopback address (the agent checks "
               "no token itself: the coordinator checks each call's)");
  ccl::AddDaemonFlags(app, f.daemon);
  ccl::AddSecurityFlags(app, f.security, ccl::SecurityFlagSet::kClient);
}

// Checks the flags and completes them (the worker count from torchrun's
// $LOCAL_WORLD_SIZE, the window from it); sets up logging. An error is the
// user's to fix (a usage error).
absl::Status SettleFlags(AgentFlags& f) {
  CCL_RETURN_IF_ERROR(ccl::SetupDaemonLogging(f.daemon, "cchostagent"));
  if (f.workers == 0) {
    const std::string local = EnvOr("LOCAL_WORLD_SIZE", "");
    if (!local.empty() && !absl::SimpleAtoi(local, &f.workers)) {
      return absl::InvalidArgumentError(
          absl::StrCat("$LOCAL_WORLD_SIZE='", local, "' is not an integer"));
    }
  }
  if (f.workers < 0) {
    return absl::InvalidArgumentError("--workers must not be negative");
  }
  if (f.window_ms < 0) f.window_ms = f.workers > 0 ? 2000 : 200;
  return ccl::ResolveSecurityOptions(f.security.token_files,
                                     &f.security.options);
}

// The agent's gauges: registrations sent and the calls that carried them.
void DeclareMetrics(ccl::MetricsRegistry& metrics,
                    ccl::coordinator::HostAgentService& service) {
  (void)metrics.Declare("ccl_host_agent_registrations_sent",
                        ccl::MetricsRegistry::Type::kGauge,
                        "Worker registrations sent to the coordinator.");
  (void)metrics.Declare("ccl_host_agent_register_host_calls",
                        ccl::MetricsRegistry::Type::kGauge,
                        "RegisterHost calls that carried them.");
  metrics.AddCollector([&service](ccl::MetricsRegistry& r) {
    r.Set("ccl_host_agent_registrations_sent", {},
          static_cast<double>(service.registrations_sent()));
    r.Set("ccl_host_agent_register_host_calls", {},
          static_cast<double>(service.batches_sent()));
  });
}

}  // namespace

int main(int argc, char** argv) {
  ccl::PrepareDaemonProcess(argv[0]);
  const sigset_t stop_signals = ccl::BlockStopSignals();  // sigwait below
  // As cccoord: Debian's absl would otherwise track lock graphs on every
  // lock.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  CLI::App app{
      "cchostagent: registers the workers of one host with the coordinator "
      "in one call, and passes their other coordinator calls through"};
  AgentFlags flags;
  AddAgentFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = SettleFlags(flags); !s.ok())
    return ccl::UsageError("cchostagent", s);

  grpc::ChannelArguments channel_args;
  // Replies carry a world's NCCL id list; RegisterHost replies are many.
  channel_args.SetMaxReceiveMessageSize(-1);
  auto channels = ccl::ChannelFactory::Create(flags.security.options);
  if (!channels.ok()) return ccl::UsageError("cchostagent", channels.status());
  ccl::coordinator::HostAgentOptions options;
  options.expected_workers = flags.workers;
  options.window = std::chrono::milliseconds(flags.window_ms);
  // With a token of its own, the agent's channel sends it on every call.
  options.forward_authorization = flags.security.options.tokens.full.empty();
  ccl::coordinator::HostAgentService service(
      channels->Make(flags.coordinator, channel_args), options);

  ccl::MetricsRegistry metrics;
  DeclareMetrics(metrics, service);
  auto metrics_server =
      ccl::StartMetrics(flags.daemon, &metrics, "cchostagent");
  if (!metrics_server.ok()) {
    std::cerr << "cchostagent: " << metrics_server.status().message() << "\n";
    return 1;
  }

  ccl::SecurityOptions serving;
  serving.insecure = flags.insecure;
  auto credentials = ccl::MakeServerCredentials(serving, flags.listen);
  if (!credentials.ok())
    return ccl::UsageError("cchostagent", credentials.status());
  for (const std::string& warning : credentials->warnings) {
    spdlog::warn("{}", warning);
  }
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(flags.listen, credentials->credentials, &port);
  builder.RegisterService(&service);
  ccl::EnableHealthAndReflection();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "cchostagent: cannot listen on " << flags.listen << "\n";
    return 1;
  }
  ccl::ServingHealth health(*server, "ccl.v1.Coordinator");
  health.SetReady(true);
  const std::string host = flags.listen.substr(0, flags.listen.rfind(':'));
  std::cout << "cchostagent listening on " << host << ":" << port
            << " for coordinator " << flags.coordinator << std::endl;
  spdlog::info("serving {} worker(s) of this host on {}:{}; coordinator {}",
               flags.workers, host, port, flags.coordinator);
  if (absl::Status s = ccl::WritePortFile(flags.daemon, port); !s.ok()) {
    std::cerr << "cchostagent: " << s.message() << "\n";
    server->Shutdown(std::chrono::system_clock::now());
    return 1;
  }

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  spdlog::info(
      "signal {}: shutting down ({} registration(s) sent in {} "
      "call(s))",
      signal_number, service.registrations_sent(), service.batches_sent());
  health.SetReady(false);
  if (flags.daemon.drain_ms > 0) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(flags.daemon.drain_ms));
  }
  // Calls still waiting for the coordinator are cancelled; their workers
  // retry, as they would after losing the coordinator.
  server->Shutdown(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(500));
  server->Wait();
  if (*metrics_server) (*metrics_server)->Stop();
  spdlog::info("stopped");
  return 0;
}
