// cccoord: the coordinator daemon. Serves membership, rendezvous, the KV
// store and the unique id handout until SIGTERM or SIGINT.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/daemon_flags.h"
#include "common/grpc_errors.h"
#include "common/grpc_health.h"
#include "common/logging.h"
#include "common/metrics_http.h"
#include "common/process_safety.h"
#include "common/security_flags.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_core.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/coordinator_service.h"
#include "spdlog/spdlog.h"

namespace {

std::string HostOf(const std::string& address) {
  auto colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// Everything cccoord is told on its command line or by its environment.
struct CoordinatorFlags {
  int world_size = 0;
  std::string listen = "127.0.0.1:29400";
  int64_t heartbeat_interval_ms = 1000;
  int64_t heartbeat_timeout_ms = 10000;
  int64_t max_heartbeat_rate = 4096;
  int64_t register_timeout_ms = 300000;
  int64_t max_value_bytes = 1 << 20;
  int64_t max_key_bytes = 4096;
  std::string elastic = "none";
  ccl::DaemonFlags daemon;
  ccl::SecurityFlags security;
};

void AddCoordinatorFlags(CLI::App& app, CoordinatorFlags& f) {
  app.add_option(
      "--world-size", f.world_size,
      "Number of ranks (fallback: $CCL_WORLD_SIZE, then $WORLD_SIZE)");
  app.add_option("--listen", f.listen, "host:port to serve on (port 0: any)")
      ->capture_default_str()
      ->envname("CCL_COORDINATOR_LISTEN");
  app.add_option("--heartbeat-interval-ms", f.heartbeat_interval_ms,
                 "Heartbeat period workers are told to use")
      ->capture_default_str();
  app.add_option("--heartbeat-timeout-ms", f.heartbeat_timeout_ms,
                 "Silence after which a member is LOST")
      ->capture_default_str();
  app.add_option("--max-heartbeat-rate", f.max_heartbeat_rate,
                 "Heartbeats a second the whole world may send; larger "
                 "worlds are told a longer interval, and a timeout longer by "
                 "as much (at least 3 intervals); 0: no limit")
      ->capture_default_str();
  app.add_option("--register-timeout-ms", f.register_timeout_ms,
                 "Default wait for Register/KvWait/GetUniqueId with timeout 0")
      ->capture_default_str();
  app.add_option("--max-value-bytes", f.max_value_bytes,
                 "Largest KV value accepted")
      ->capture_default_str();
  app.add_option("--max-key-bytes", f.max_key_bytes, "Longest KV key accepted")
      ->capture_default_str();
  app.add_option("--elastic", f.elastic,
                 "What a formed world does when a rank is lost or leaves: "
                 "'none' waits for a replacement to take the rank; 'shrink' "
                 "goes on without it at a new generation, survivors "
                 "renumbered in order")
      ->check(CLI::IsMember({"none", "shrink"}))
      ->capture_default_str()
      ->envname("CCL_ELASTIC");
  ccl::AddDaemonFlags(app, f.daemon);
  ccl::AddSecurityFlags(app, f.security, ccl::SecurityFlagSet::kCoordinator);
}

// Checks the flags and completes them (the world size from the
// environment when no flag gave it); sets up logging. An error is the
// user's to fix (a usage error).
absl::Status SettleFlags(const CLI::App& app, CoordinatorFlags& f) {
  CCL_RETURN_IF_ERROR(ccl::SetupDaemonLogging(f.daemon, "cccoord"));
  if (app.count("--world-size") == 0) {
    for (const char* name : {"CCL_WORLD_SIZE", "WORLD_SIZE"}) {
      const char* value = std::getenv(name);
      if (value == nullptr || *value == '\0') continue;
      if (!absl::SimpleAtoi(value, &f.world_size)) {
        return absl::InvalidArgumentError(
            absl::StrCat("$", name, "='", value, "' is not an integer"));
      }
      break;
    }
  }
  if (f.world_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--world-size must be a positive integer (got ", f.world_size,
        "); set it or $CCL_WORLD_SIZE / $WORLD_SIZE"));
  }
  if (f.max_value_bytes <= 0 || f.max_key_bytes <= 0) {
    return absl::InvalidArgumentError(
        "--max-value-bytes and --max-key-bytes must be positive");
  }
  return ccl::ResolveSecurityOptions(f.security.token_files,
                                     &f.security.options);
}

ccl::coordinator::CoordinatorOptions CoreOptions(const CoordinatorFlags& f) {
  ccl::coordinator::CoordinatorOptions options;
  options.world_size = f.world_size;
  options.heartbeat_interval =
      std::chrono::milliseconds(f.heartbeat_interval_ms);
  options.heartbeat_timeout = std::chrono::milliseconds(f.heartbeat_timeout_ms);
  options.max_heartbeat_rate = f.max_heartbeat_rate;
  options.default_wait_timeout =
      std::chrono::milliseconds(f.register_timeout_ms);
  options.max_value_bytes = static_cast<size_t>(f.max_value_bytes);
  options.elastic_shrink = f.elastic == "shrink";
  options.sweep_period = std::chrono::milliseconds(
      std::max<int64_t>(10, std::min<int64_t>(f.heartbeat_interval_ms, 1000)));
  return options;
}

// The Coordinator API's server, started; UNAVAILABLE if it cannot listen.
// `error_details` must outlive it.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartServer(
    const CoordinatorFlags& f, ccl::coordinator::CoordinatorService& service,
    std::shared_ptr<grpc::ServerCredentials> credentials,
    ccl::RequestErrorDetails& error_details, int& port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(f.listen, std::move(credentials), &port);
  builder.RegisterService(&service);
  // A client's lease stream carries nothing after its first reply: a client
  // host that loses power never closes it. Pings on connections with calls
  // open find such a client within about 30 s and end its lease, so its
  // reserved seqs wait no longer than the workers' default gap timeout
  // whatever --seq-gap-timeout-ms says.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  error_details.Install(builder);
  ccl::EnableHealthAndReflection();
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", f.listen));
  }
  return server;
}

}  // namespace

int main(int argc, char** argv) {
  ccl::PrepareDaemonProcess(argv[0]);
  const sigset_t stop_signals = ccl::BlockStopSignals();  // sigwait below

  // Debian's absl is built without NDEBUG, so absl::Mutex (under gRPC's
  // locks) would keep a lock graph for deadlock detection on every lock: a
  // tenth of the coordinator's CPU while a world of 16k ranks registers.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"cccoord: the ccl coordinator (membership, rendezvous, KV)"};
  CoordinatorFlags flags;
  AddCoordinatorFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = SettleFlags(app, flags); !s.ok())
    return ccl::UsageError("cccoord", s);

  auto core = ccl::coordinator::CoordinatorCore::Create(CoreOptions(flags));
  if (!core.ok()) return ccl::UsageError("cccoord", core.status());
  ccl::coordinator::CoordinatorLimits limits;
  limits.max_value_bytes = static_cast<size_t>(flags.max_value_bytes);
  limits.max_key_bytes = static_cast<size_t>(flags.max_key_bytes);
  ccl::coordinator::CoordinatorService service(**core, limits);
  ccl::MetricsRegistry metrics;
  ccl::coordinator::RegisterCoordinatorMetrics(metrics, **core);
  auto metrics_server = ccl::StartMetrics(flags.daemon, &metrics, "cccoord");
  if (!metrics_server.ok()) {
    std::cerr << "cccoord: " << metrics_server.status().message() << "\n";
    return 1;
  }
  auto credentials =
      ccl::MakeServerCredentials(flags.security.options, flags.listen);
  if (!credentials.ok())
    return ccl::UsageError("cccoord", credentials.status());
  for (const std::string& warning : credentials->warnings) {
    spdlog::warn("{}", warning);
  }

  int port = 0;
  ccl::RequestErrorDetails error_details("ccl.v1.Coordinator");
  auto server = StartServer(flags, service, credentials->credentials,
                            error_details, port);
  if (!server.ok()) {
    std::cerr << "cccoord: " << server.status().message() << "\n";
    return 1;
  }
  ccl::ServingHealth health(**server, "ccl.v1.Coordinator");
  health.SetReady(true);
  std::cout << "cccoord listening on " << HostOf(flags.listen) << ":" << port
            << std::endl;
  spdlog::info("serving world of size {} on {}:{}", flags.world_size,
               HostOf(flags.listen), port);
  if (absl::Status s = ccl::WritePortFile(flags.daemon, port); !s.ok()) {
    std::cerr << "cccoord: " << s.message() << "\n";
    (*server)->Shutdown(std::chrono::system_clock::now());
    return 1;
  }

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  spdlog::info("signal {}: shutting down", signal_number);
  // Probes see NOT_SERVING for the grace period before the port closes.
  health.SetReady(false);
  if (flags.daemon.drain_ms > 0) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(flags.daemon.drain_ms));
  }
  // Parked calls would otherwise hold Shutdown until their own deadlines.
  (*core)->Shutdown();
  (*server)->Shutdown(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(500));
  (*server)->Wait();
  if (*metrics_server) (*metrics_server)->Stop();
  spdlog::info("stopped");
  return 0;
}
