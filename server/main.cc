// ccworker: one worker daemon per device. Serves the Worker API, joins the
// coordinator's world, builds the world communicator and heartbeats until
// SIGTERM, then deregisters and exits 0.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/daemon_flags.h"
#include "common/grpc_health.h"
#include "common/heap_policy.h"
#include "common/hostname_rank.h"
#include "common/logging.h"
#include "common/metrics_http.h"
#include "common/process_safety.h"
#include "common/queue_server.h"
#include "common/secrets.h"
#include "common/security_flags.h"
#include "common/status_macros.h"
#include "common/types.h"
#include "coordinator/client/coordinator_client.h"
#include "server/comm/factory.h"
#include "server/core/worker_core.h"
#include "server/core/worker_metrics.h"
#include "server/rpc/worker_service.h"
#include "server/rpc/world_agent.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kVersion[] = "0.1.0";

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

std::string RandomWorkerId() {
  std::random_device device;
  std::mt19937_64 rng(device() ^ (static_cast<uint64_t>(getpid()) << 32));
  char buffer[17];
  std::snprintf(buffer, sizeof(buffer), "%016llx",
                static_cast<unsigned long long>(rng()));
  return buffer;
}

class StopSignal {
 public:
  void Notify() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_ = true;
    }
    cv_.notify_all();
  }
  bool WaitFor(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [this] { return stopped_; });
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return stopped_; });
  }
  bool stopped() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stopped_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

// Everything ccworker is told on its command line or by its environment.
struct WorkerFlags {
  std::string coordinator;
  std::string host_agent;
  std::string device_name;
  std::string listen;
  std::string advertise_host;
  std::string data_host;
  std::string host_id;
  int rank = -1;
  int64_t quota_bytes = 0;
  int64_t op_timeout_ms = 60000;
  int64_t seq_gap_timeout_ms = 30000;
  int64_t register_timeout_ms = 300000;
  int64_t busy_poll_us = 0;
  bool rank_from_hostname = false;
  ccl::DaemonFlags daemon;
  ccl::RequestLimits limits;
  ccl::SecurityFlags security;
  // Settled from the above by SettleFlags.
  ccl::Device device;
};

// CCL_COORDINATOR, else torchrun's MASTER_ADDR:MASTER_PORT, else this host.
std::string DefaultCoordinator() {
  std::string coordinator = EnvOr("CCL_COORDINATOR", "");
  if (coordinator.empty() && std::getenv("MASTER_ADDR")) {
    coordinator = absl::StrCat(std::getenv("MASTER_ADDR"), ":",
                               EnvOr("MASTER_PORT", "29400"));
  }
  return coordinator.empty() ? "127.0.0.1:29400" : coordinator;
}

void AddWorkerFlags(CLI::App& app, WorkerFlags& f) {
  f.coordinator = DefaultCoordinator();
  f.host_agent = EnvOr("CCL_HOST_AGENT", "");
  f.device_name = EnvOr("CCL_DEVICE", "cpu");
  f.listen = EnvOr("CCL_LISTEN", "127.0.0.1:0");
  f.rank = std::atoi(EnvOr("CCL_RANK", EnvOr("RANK", "-1")).c_str());
  app.add_option("--coordinator", f.coordinator,
                 "coordinator HOST:PORT (env CCL_COORDINATOR, or "
                 "MASTER_ADDR:MASTER_PORT)")
      ->capture_default_str();
  app.add_option("--host-agent", f.host_agent,
                 "HOST:PORT of this host's cchostagent: registrations go "
                 "through it (one call for the host's workers), every other "
                 "coordinator call directly (env CCL_HOST_AGENT)");
  app.add_option("--device", f.device_name, "cpu or cuda:N (env CCL_DEVICE)")
      ->capture_default_str();
  app.add_option("--listen", f.listen,
                 "HOST:PORT of this worker's gRPC server; port 0 picks one")
      ->capture_default_str();
  app.add_option("--advertise-host", f.advertise_host,
                 "host other processes use to reach this worker (default: the "
                 "listen host)")
      ->envname("CCL_ADVERTISE_HOST");
  app.add_option("--data-host", f.data_host,
                 "address the data plane (Gloo TCP) binds to (default: the "
                 "advertised host)")
      ->envname("CCL_DATA_HOST");
  app.add_option("--host-id", f.host_id,
                 "the host this worker is to NCCL (sets NCCL_HOSTID): workers "
                 "sharing a GPU need distinct ids (simulated hosts, "
                 "../shared/GPU.md), and containers of one node that must be "
                 "one host need the same (env CCL_HOST_ID)")
      ->envname("CCL_HOST_ID");
  app.add_option("--rank", f.rank,
                 "requested rank; -1 lets the coordinator assign one (env "
                 "CCL_RANK or RANK)")
      ->capture_default_str();
  app.add_option("--quota-bytes", f.quota_bytes,
                 "most tensor bytes this worker holds; 0 means no quota")
      ->capture_default_str();
  app.add_option("--op-timeout-ms", f.op_timeout_ms,
                 "default deadline of an op")
      ->capture_default_str();
  app.add_option("--seq-gap-timeout-ms", f.seq_gap_timeout_ms,
                 "how long a group waits for a missing sequence number")
      ->capture_default_str();
  app.add_option("--busy-poll-us", f.busy_poll_us,
                 "spin this long for the next request, op or completion "
                 "before sleeping; above the time between a client's ops "
                 "(e.g. 1000) it halves the worker's share of a small op, "
                 "for about a core while ops come (env CCL_BUSY_POLL_US; "
                 "0: never spin; docs/deploy.md)")
      ->envname("CCL_BUSY_POLL_US")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  app.add_option("--register-timeout-ms", f.register_timeout_ms,
                 "how long to wait for the world to form")
      ->capture_default_str();
  ccl::AddDaemonFlags(app, f.daemon);
  app.add_flag("--rank-from-hostname", f.rank_from_hostname,
               "request the rank a StatefulSet pod name ends in (name-N)")
      ->envname("CCL_RANK_FROM_HOSTNAME");
  // The request limits (server/rpc/request_limits.h), each with its default.
  auto limit = [&app](const char* flag, auto& value, const char* what) {
    app.add_option(flag, value, what)->capture_default_str();
  };
  limit("--max-message-bytes", f.limits.max_message_bytes,
        "largest gRPC message the worker receives");
  limit("--max-tensors", f.limits.max_tensors,
        "most tensors this worker holds at once");
  limit("--max-shape-rank", f.limits.max_shape_rank,
        "most dimensions of a tensor shape");
  limit("--max-tensor-elements", f.limits.max_tensor_elements,
        "most elements of one tensor");
  limit("--max-name-length", f.limits.max_name_length,
        "longest tensor or group name");
  limit("--max-groups", f.limits.max_groups,
        "most groups (communicators) this worker knows");
  ccl::AddSecurityFlags(app, f.security, ccl::SecurityFlagSet::kServer);
}

// Checks the flags and derives the rest: the device, the rank from the
// hostname, the advertised and data hosts; sets up logging and NCCL's host
// id. An error is the user's to fix (a usage error).
absl::Status SettleFlags(WorkerFlags& f) {
  CCL_RETURN_IF_ERROR(ccl::ValidateLimits(f.limits));
  CCL_RETURN_IF_ERROR(
      ccl::ResolveSecurityOptions(f.security.token_files, &f.security.options));
  CCL_RETURN_IF_ERROR(ccl::SetupDaemonLogging(f.daemon, "ccworker"));
  if (f.rank_from_hostname) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    auto from_name = ccl::RankFromHostname(name);
    if (!from_name.ok()) {
      return absl::Status(
          from_name.status().code(),
          absl::StrCat("--rank-from-hostname: ", from_name.status().message()));
    }
    f.rank = *from_name;
  }
  CCL_ASSIGN_OR_RETURN(f.device, ccl::ParseDevice(f.device_name));
  if (!f.host_id.empty()) {
    if (!std::all_of(f.host_id.begin(), f.host_id.end(),
                     [](char c) { return c > ' ' && c < 0x7f; }) ||
        f.host_id.size() > 255) {
      return absl::InvalidArgumentError(
          absl::StrCat("--host-id '", f.host_id,
                       "': use at most 255 printable characters without "
                       "spaces"));
    }
    // Before any thread starts (setenv is not safe beside getenv) and before
    // NCCL computes its host hash, once per process, at the first init.
    setenv("NCCL_HOSTID", f.host_id.c_str(), /*overwrite=*/1);
  }
  const std::string listen_host = f.listen.substr(0, f.listen.rfind(':'));
  if (f.advertise_host.empty()) {
    f.advertise_host = listen_host == "0.0.0.0" || listen_host == "[::]"
                           ? "127.0.0.1"
                           : listen_host;
  }
  if (f.data_host.empty()) f.data_host = f.advertise_host;
  return absl::OkStatus();
}

// Signals go to one thread that waits for them; every other thread, gRPC's
// and the CUDA runtime's included, inherits this mask, so the mask is set
// before any of them starts.
void HandleStopSignals(const std::atomic<bool>& ready, StopSignal& stop) {
  const sigset_t signals = ccl::BlockStopSignals();
  std::thread([signals, &ready, &stop] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    spdlog::info("ccworker: got signal {}, stopping", signal_number);
    if (!ready) {
      // Still joining: nothing to drain, and Register may be parked.
      std::_Exit(0);
    }
    stop.Notify();
  }).detach();
}

// The worker's server accepts the full and read-only tokens; the join token
// is only what it registers with, and grants nothing here.
ccl::SecurityOptions ServerSecurity(ccl::SecurityOptions options) {
  options.tokens.join.clear();
  return options;
}

// To the coordinator the worker is a client: it sends the join token (or,
// without one, the full token) and presents its certificate for mTLS.
ccl::SecurityOptions CoordinatorSecurity(ccl::SecurityOptions options) {
  if (!options.tokens.join.empty()) options.tokens.full = options.tokens.join;
  return options;
}

struct CoordinatorChannels {
  std::unique_ptr<ccl::CoordinatorClient> coordinator;
  // The host agent's, which registrations go through; null without one.
  std::unique_ptr<ccl::CoordinatorClient> registrar;
};

absl::StatusOr<CoordinatorChannels> ConnectCoordinator(const WorkerFlags& f) {
  const ccl::SecurityOptions security = CoordinatorSecurity(f.security.options);
  CoordinatorChannels channels;
  auto coordinator = ccl::CoordinatorClient::Connect(
      f.coordinator, std::chrono::milliseconds(10000), security);
  if (!coordinator.ok()) {
    return absl::Status(
        coordinator.status().code(),
        absl::StrCat("coordinator channel: ", coordinator.status().message()));
  }
  channels.coordinator = *std::move(coordinator);
  if (!f.host_agent.empty()) {
    auto agent = ccl::CoordinatorClient::Connect(
        f.host_agent, std::chrono::milliseconds(10000), security);
    if (!agent.ok()) {
      return absl::Status(
          agent.status().code(),
          absl::StrCat("host agent channel: ", agent.status().message()));
    }
    channels.registrar = *std::move(agent);
  }
  return channels;
}

// A broken communicator is told to the coordinator by the world agent,
// which is made after the core: the core's hook reaches it through this.
class SealerSlot {
 public:
  void Set(ccl::WorldAgent* agent) {
    std::lock_guard<std::mutex> lock(mutex_);
    agent_ = agent;
  }
  void Seal(int64_t generation, const absl::Status& cause) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (agent_ != nullptr) agent_->Seal(generation, cause);
  }

 private:
  std::mutex mutex_;
  ccl::WorldAgent* agent_ = nullptr;
};

ccl::WorkerConfig CoreConfig(const WorkerFlags& f, ccl::WorkerMetrics& metrics,
                             SealerSlot& sealer,
                             ccl::CoordinatorClient& coordinator) {
  ccl::WorkerConfig config;
  config.device = f.device;
  config.tensor_quota_bytes = f.quota_bytes;
  config.default_op_timeout = std::chrono::milliseconds(f.op_timeout_ms);
  config.seq_gap_timeout = std::chrono::milliseconds(f.seq_gap_timeout_ms);
  config.busy_poll = std::chrono::microseconds(f.busy_poll_us);
  config.data_host = f.data_host;
  config.max_tensors = f.limits.max_tensors;
  config.max_groups = f.limits.max_groups;
  config.on_ops_done = [&metrics](std::span<const ccl::OpRecord> records) {
    metrics.OnOpsDone(records);
  };
  config.on_communicator_broken = [&sealer](int64_t generation,
                                            const absl::Status& cause) {
    sealer.Seal(generation, cause);
  };
  config.on_sequence_gap =
      ccl::SequenceHolderQuestion(coordinator, config.seq_gap_timeout);
  return config;
}

// The Worker API's server: every method, health and unknown methods on one
// completion queue (common/queue_server.h says why no callback service may
// be on it).
class WorkerServer {
 public:
  WorkerServer(ccl::WorkerCore& core, const std::string& worker_id,
               const ccl::RequestLimits& limits)
      : core_(core), service_(core, {"", worker_id, kVersion}, limits) {}
  // However main returns, Stop first: the core, destroyed after this, then
  // has nothing left to call back.
  ~WorkerServer() { Stop(std::chrono::seconds(1), std::chrono::seconds(1)); }

  absl::Status Start(const WorkerFlags& f,
                     std::shared_ptr<grpc::ServerCredentials> credentials) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(f.listen, std::move(credentials), &port_);
    // Tensor writes stream in chunks well under this.
    builder.SetMaxReceiveMessageSize(static_cast<int>(
        std::min<int64_t>(f.limits.max_message_bytes, INT32_MAX)));
    service_.Register(builder);
    health_.Register(builder);
    unknown_methods_.Register(builder);
    ccl::EnableReflection();
    queue_ = std::make_unique<ccl::ServerQueue>(builder);
    server_ = builder.BuildAndStart();
    if (!server_ || port_ == 0) {
      server_.reset();
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", f.listen));
    }
    if (absl::Status serving = service_.Serve(*queue_); !serving.ok()) {
      // Logged as it was, with its code.
      return absl::Status(serving.code(), serving.ToString());
    }
    health_.Serve(*queue_);
    unknown_methods_.Serve(*queue_);
    // Handlers never block, so two threads keep the queue moving while one
    // is in a handler; more only contend for the queue.
    queue_->Start(2, std::chrono::microseconds(f.busy_poll_us));
    return absl::OkStatus();
  }

  // No new call, every open call answered (the core's shutdown ends what it
  // holds: works, generation waits, host tasks; cancelled calls included:
  // their client is gone, the answer is dropped), then the queue drained and
  // closed. Clients' op streams stay open as long as the clients do, so they
  // are cancelled first. Each step is idempotent.
  void Stop(std::chrono::seconds grace, std::chrono::seconds drain) {
    if (server_ == nullptr) return;
    queue_->CancelStreams();
    server_->Shutdown(std::chrono::system_clock::now() + grace);
    core_.Shutdown();
    queue_->Close(drain);
  }
  void Wait() {
    if (server_ != nullptr) server_->Wait();
  }

  int port() const { return port_; }
  ccl::WorkerService& service() { return service_; }
  ccl::QueueHealth& health() { return health_; }

 private:
  ccl::WorkerCore& core_;
  ccl::WorkerService service_;
  ccl::QueueHealth health_{"ccl.v1.Worker"};
  ccl::UnknownMethods unknown_methods_{"ccl.v1.Worker"};
  std::unique_ptr<ccl::ServerQueue> queue_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// What the worker registers with: where it is, which device on which host,
// the rank it asks for, and the secret that proves this process later.
absl::StatusOr<ccl::v1::RegisterRequest> Registration(
    const WorkerFlags& f, const std::string& address,
    const std::string& worker_id, const ccl::GpuClaim& claim) {
  ccl::v1::RegisterRequest request;
  request.set_address(address);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  request.set_host(hostname);
  request.set_host_id(claim.host_id);
  request.set_boot_id(claim.boot_id);
  request.set_device_bus_id(claim.bus_id);
  request.mutable_device()->set_kind(f.device.kind == ccl::DeviceKind::kCpu
                                         ? ccl::v1::DEVICE_KIND_CPU
                                         : ccl::v1::DEVICE_KIND_CUDA);
  request.mutable_device()->set_index(f.device.index);
  if (f.rank >= 0) request.set_requested_rank(f.rank);
  request.set_worker_id(worker_id);
  // What proves this process to the coordinator (heartbeats, re-joins,
  // leaving): made here rather than issued at the first registration, so
  // that a retry of a first registration that got no answer is recognised.
  CCL_ASSIGN_OR_RETURN(std::string secret, ccl::RandomSecretHex(32));
  request.set_worker_secret(secret);
  request.set_timeout_ms(f.register_timeout_ms);
  // An NCCL worker asks for the world's unique ids with its registration:
  // most ranks then form the world with that one call.
  if (std::optional<int> per_root = ccl::NcclRanksPerRoot(f.device)) {
    request.set_nccl_ranks_per_root(*per_root);
  }
  return request;
}

// The worker's state as the service, the metrics and health checks tell
// it: ready only while the world communicator is usable (a re-forming world
// is NOT_SERVING again until its new generation is built).
void ShowState(const std::string& state, WorkerServer& server,
               ccl::WorkerMetrics& metrics, ccl::WorkerCore& core) {
  server.service().set_state(state);
  metrics.SetState(state);
  if (state == "ready") {
    ccl::SetLogRank(core.rank(), core.generation());
    metrics.SetMembership(core.rank(), core.world_size(), core.generation());
  }
  server.health().SetReady(state == "ready");
}

// Probes and load balancers see NOT_SERVING first; then the grace period;
// then the worker leaves the world.
void Drain(WorkerServer& server, ccl::WorkerMetrics& metrics,
           const WorkerFlags& f, ccl::WorldAgent& agent) {
  server.service().set_state("draining");
  server.health().SetReady(false);
  metrics.SetState("draining");
  if (f.daemon.drain_ms > 0) {
    spdlog::info("ccworker: draining for {} ms", f.daemon.drain_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(f.daemon.drain_ms));
  }
  absl::Status left = agent.Leave();
  if (!left.ok()) spdlog::warn("ccworker: deregister: {}", left.ToString());
}

}  // namespace

int main(int argc, char** argv) {
  ccl::PrepareDaemonProcess(argv[0]);
  ccl::ApplyWorkerHeapPolicy();
  CLI::App app{"ccworker: a collective-communication worker daemon"};
  WorkerFlags flags;
  AddWorkerFlags(app, flags);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = SettleFlags(flags); !s.ok())
    return ccl::UsageError("ccworker", s);

  StopSignal stop;
  std::atomic<bool> ready{false};
  HandleStopSignals(ready, stop);

  // Made only now: credentials and channels start gRPC's threads, which
  // must inherit the signal mask.
  auto credentials = ccl::MakeServerCredentials(
      ServerSecurity(flags.security.options), flags.listen);
  if (!credentials.ok())
    return ccl::UsageError("ccworker", credentials.status());
  for (const std::string& warning : credentials->warnings) {
    spdlog::warn("ccworker: {}", warning);
  }
  auto channels = ConnectCoordinator(flags);
  if (!channels.ok()) return ccl::UsageError("ccworker", channels.status());

  ccl::WorkerMetrics metrics(
      flags.device.kind == ccl::DeviceKind::kCuda ? "nccl" : "gloo");
  SealerSlot sealer;
  auto core = ccl::WorkerCore::Create(
      CoreConfig(flags, metrics, sealer, *channels->coordinator));
  if (!core.ok()) {
    spdlog::error("ccworker: {}", std::string(core.status().message()));
    return 1;
  }
  metrics.Watch(core->get());
  auto metrics_server =
      ccl::StartMetrics(flags.daemon, &metrics.registry(), "ccworker");
  if (!metrics_server.ok()) {
    spdlog::error("ccworker: {}", metrics_server.status().ToString());
    return 1;
  }

  const std::string worker_id = RandomWorkerId();
  WorkerServer server(**core, worker_id, flags.limits);
  if (absl::Status s = server.Start(flags, credentials->credentials); !s.ok()) {
    spdlog::error("ccworker: {}", std::string(s.message()));
    return 1;
  }
  const std::string address =
      absl::StrCat(flags.advertise_host, ":", server.port());
  server.service().set_address(address);
  std::printf("ccworker listening on %s\n", address.c_str());
  std::fflush(stdout);
  if (absl::Status s = ccl::WritePortFile(flags.daemon, server.port());
      !s.ok()) {
    spdlog::error("ccworker: {}", s.ToString());
    return 1;
  }

  // After the signal mask is set: the CUDA runtime starts threads of its
  // own, which inherit it.
  auto gpu_claim = ccl::GpuClaimOf(flags.device);
  if (!gpu_claim.ok()) {
    return ccl::UsageError(
        "ccworker",
        absl::Status(gpu_claim.status().code(),
                     absl::StrCat("device ", flags.device_name, ": ",
                                  gpu_claim.status().message())));
  }
  auto registration = Registration(flags, address, worker_id, *gpu_claim);
  if (!registration.ok()) {
    std::fprintf(stderr, "ccworker: %s\n",
                 registration.status().ToString().c_str());
    return 1;
  }

  ccl::WorldAgentOptions agent_options;
  agent_options.registration = *std::move(registration);
  agent_options.coordinator = flags.coordinator;
  agent_options.registrar = channels->registrar.get();
  agent_options.registrar_address = flags.host_agent;
  agent_options.register_timeout =
      std::chrono::milliseconds(flags.register_timeout_ms);
  agent_options.on_state = [&](const std::string& state) {
    ShowState(state, server, metrics, **core);
  };
  agent_options.on_heartbeat = [&metrics] { metrics.HeartbeatSucceeded(); };
  ccl::WorldAgent agent(**core, *channels->coordinator, agent_options);
  sealer.Set(&agent);
  // Before the agent goes: executors may outlive it.
  absl::Cleanup forget_sealer = [&sealer] { sealer.Set(nullptr); };
  // The coordinator may start after us (compose, Kubernetes): Join retries
  // while it is unreachable, within the register timeout.
  if (absl::Status joined = agent.Join(); !joined.ok()) {
    spdlog::error("ccworker: joining the world through {}{} failed: {}",
                  flags.coordinator,
                  flags.host_agent.empty()
                      ? ""
                      : " (host agent " + flags.host_agent + ")",
                  joined.ToString());
    return 1;
  }
  const int my_rank = (*core)->rank();
  ready = true;
  std::printf("ccworker rank %d of %d ready (generation %lld, backend %s)\n",
              my_rank, (*core)->world_size(),
              static_cast<long long>((*core)->generation()),
              (*core)->backend().c_str());
  std::fflush(stdout);

  std::thread stopper([&] {
    stop.Wait();
    agent.Stop();
  });
  agent.Run();
  stopper.join();

  Drain(server, metrics, flags, agent);
  server.Stop(std::chrono::seconds(2), std::chrono::seconds(5));
  server.Wait();
  if (*metrics_server) (*metrics_server)->Stop();
  spdlog::info("ccworker: rank {} stopped", my_rank);
  return 0;
}
