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
#include <mutex>
#include <optional>
#include <random>
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

}  // namespace

int main(int argc, char** argv) {
  ccl::PrepareDaemonProcess(argv[0]);
  ccl::ApplyWorkerHeapPolicy();
  CLI::App app{"ccworker: a collective-communication worker daemon"};
  std::string default_coordinator = EnvOr("CCL_COORDINATOR", "");
  if (default_coordinator.empty() && std::getenv("MASTER_ADDR")) {
    // torchrun's variables, as a fallback rank source.
    default_coordinator = absl::StrCat(std::getenv("MASTER_ADDR"), ":",
                                       EnvOr("MASTER_PORT", "29400"));
  }
  if (default_coordinator.empty()) default_coordinator = "127.0.0.1:29400";
  std::string coordinator = default_coordinator;
  std::string device_name = EnvOr("CCL_DEVICE", "cpu");
  std::string listen = EnvOr("CCL_LISTEN", "127.0.0.1:0");
  std::string advertise_host;
  std::string data_host;
  int rank = std::atoi(EnvOr("CCL_RANK", EnvOr("RANK", "-1")).c_str());
  int64_t quota_bytes = 0;
  int64_t op_timeout_ms = 60000;
  int64_t seq_gap_timeout_ms = 30000;
  int64_t register_timeout_ms = 300000;
  int64_t busy_poll_us = 0;
  bool rank_from_hostname = false;
  app.add_option("--coordinator", coordinator,
                 "coordinator HOST:PORT (env CCL_COORDINATOR, or "
                 "MASTER_ADDR:MASTER_PORT)")
      ->capture_default_str();
  std::string host_agent = EnvOr("CCL_HOST_AGENT", "");
  app.add_option("--host-agent", host_agent,
                 "HOST:PORT of this host's cchostagent: registrations go "
                 "through it (one call for the host's workers), every other "
                 "coordinator call directly (env CCL_HOST_AGENT)");
  app.add_option("--device", device_name, "cpu or cuda:N (env CCL_DEVICE)")
      ->capture_default_str();
  app.add_option("--listen", listen,
                 "HOST:PORT of this worker's gRPC server; port 0 picks one")
      ->capture_default_str();
  app.add_option("--advertise-host", advertise_host,
                 "host other processes use to reach this worker (default: the "
                 "listen host)")
      ->envname("CCL_ADVERTISE_HOST");
  app.add_option("--data-host", data_host,
                 "address the data plane (Gloo TCP) binds to (default: the "
                 "advertised host)")
      ->envname("CCL_DATA_HOST");
  std::string host_id;
  app.add_option("--host-id", host_id,
                 "the host this worker is to NCCL (sets NCCL_HOSTID): workers "
                 "sharing a GPU need distinct ids (simulated hosts, "
                 "../shared/GPU.md), and containers of one node that must be "
                 "one host need the same (env CCL_HOST_ID)")
      ->envname("CCL_HOST_ID");
  app.add_option("--rank", rank,
                 "requested rank; -1 lets the coordinator assign one (env "
                 "CCL_RANK or RANK)")
      ->capture_default_str();
  app.add_option("--quota-bytes", quota_bytes,
                 "most tensor bytes this worker holds; 0 means no quota")
      ->capture_default_str();
  app.add_option("--op-timeout-ms", op_timeout_ms, "default deadline of an op")
      ->capture_default_str();
  app.add_option("--seq-gap-timeout-ms", seq_gap_timeout_ms,
                 "how long a group waits for a missing sequence number")
      ->capture_default_str();
  app.add_option("--busy-poll-us", busy_poll_us,
                 "spin this long for the next request, op or completion "
                 "before sleeping; above the time between a client's ops "
                 "(e.g. 1000) it halves the worker's share of a small op, "
                 "for about a core while ops come (env CCL_BUSY_POLL_US; "
                 "0: never spin; docs/deploy.md)")
      ->envname("CCL_BUSY_POLL_US")
      ->check(CLI::Range(int64_t{0}, int64_t{1000000}))
      ->capture_default_str();
  app.add_option("--register-timeout-ms", register_timeout_ms,
                 "how long to wait for the world to form")
      ->capture_default_str();
  ccl::DaemonFlags daemon;
  ccl::AddDaemonFlags(app, daemon);
  app.add_flag("--rank-from-hostname", rank_from_hostname,
               "request the rank a StatefulSet pod name ends in (name-N)")
      ->envname("CCL_RANK_FROM_HOSTNAME");
  ccl::RequestLimits limits;
  app.add_option("--max-message-bytes", limits.max_message_bytes,
                 "largest gRPC message the worker receives")
      ->capture_default_str();
  app.add_option("--max-tensors", limits.max_tensors,
                 "most tensors this worker holds at once")
      ->capture_default_str();
  app.add_option("--max-shape-rank", limits.max_shape_rank,
                 "most dimensions of a tensor shape")
      ->capture_default_str();
  app.add_option("--max-tensor-elements", limits.max_tensor_elements,
                 "most elements of one tensor")
      ->capture_default_str();
  app.add_option("--max-name-length", limits.max_name_length,
                 "longest tensor or group name")
      ->capture_default_str();
  app.add_option("--max-groups", limits.max_groups,
                 "most groups (communicators) this worker knows")
      ->capture_default_str();
  ccl::SecurityFlags security;
  ccl::AddSecurityFlags(app, security, ccl::SecurityFlagSet::kServer);
  CLI11_PARSE(app, argc, argv);
  if (absl::Status s = ccl::ValidateLimits(limits); !s.ok()) {
    std::fprintf(stderr, "ccworker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s =
          ccl::ResolveSecurityOptions(security.token_files, &security.options);
      !s.ok()) {
    std::fprintf(stderr, "ccworker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (absl::Status s = ccl::SetupDaemonLogging(daemon, "ccworker"); !s.ok()) {
    std::fprintf(stderr, "ccworker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (rank_from_hostname) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    auto from_name = ccl::RankFromHostname(name);
    if (!from_name.ok()) {
      std::fprintf(stderr, "ccworker: --rank-from-hostname: %s\n",
                   std::string(from_name.status().message()).c_str());
      return 2;
    }
    rank = *from_name;
  }

  // The worker's server accepts the full and read-only tokens; the join
  // token is only what it registers with, and grants nothing here.
  ccl::SecurityOptions server_security = security.options;
  server_security.tokens.join.clear();
  // To the coordinator it is a client: it sends the join token (or, without
  // one, the full token) and presents its certificate for mTLS.
  ccl::SecurityOptions coordinator_security = security.options;
  if (!security.options.tokens.join.empty()) {
    coordinator_security.tokens.full = security.options.tokens.join;
  }
  auto device = ccl::ParseDevice(device_name);
  if (!device.ok()) {
    std::fprintf(stderr, "ccworker: %s\n",
                 std::string(device.status().message()).c_str());
    return 2;
  }
  if (!host_id.empty()) {
    if (!std::all_of(host_id.begin(), host_id.end(),
                     [](char c) { return c > ' ' && c < 0x7f; }) ||
        host_id.size() > 255) {
      std::fprintf(stderr,
                   "ccworker: --host-id '%s': use at most 255 printable "
                   "characters without spaces\n",
                   host_id.c_str());
      return 2;
    }
    // Before any thread starts (setenv is not safe beside getenv) and before
    // NCCL computes its host hash, once per process, at the first init.
    setenv("NCCL_HOSTID", host_id.c_str(), /*overwrite=*/1);
  }
  const std::string listen_host = listen.substr(0, listen.rfind(':'));
  if (advertise_host.empty()) {
    advertise_host = listen_host == "0.0.0.0" || listen_host == "[::]"
                         ? "127.0.0.1"
                         : listen_host;
  }
  if (data_host.empty()) data_host = advertise_host;

  // Signals go to one thread that waits for them; every other thread,
  // gRPC's included, inherits this mask.
  const sigset_t signals = ccl::BlockStopSignals();
  StopSignal stop;
  std::atomic<bool> ready{false};
  std::thread signal_thread([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    spdlog::info("ccworker: got signal {}, stopping", signal_number);
    if (!ready) {
      // Still joining: nothing to drain, and Register may be parked.
      std::_Exit(0);
    }
    stop.Notify();
  });
  signal_thread.detach();

  // Made only now: credentials and channels start gRPC's threads, which
  // must inherit the signal mask above.
  auto credentials = ccl::MakeServerCredentials(server_security, listen);
  if (!credentials.ok()) {
    std::fprintf(stderr, "ccworker: %s\n",
                 std::string(credentials.status().message()).c_str());
    return 2;
  }
  for (const std::string& warning : credentials->warnings) {
    spdlog::warn("ccworker: {}", warning);
  }
  auto coordinator_client = ccl::CoordinatorClient::Connect(
      coordinator, std::chrono::milliseconds(10000), coordinator_security);
  if (!coordinator_client.ok()) {
    std::fprintf(stderr, "ccworker: coordinator channel: %s\n",
                 std::string(coordinator_client.status().message()).c_str());
    return 2;
  }
  std::unique_ptr<ccl::CoordinatorClient> registrar;
  if (!host_agent.empty()) {
    auto connected = ccl::CoordinatorClient::Connect(
        host_agent, std::chrono::milliseconds(10000), coordinator_security);
    if (!connected.ok()) {
      std::fprintf(stderr, "ccworker: host agent channel: %s\n",
                   std::string(connected.status().message()).c_str());
      return 2;
    }
    registrar = *std::move(connected);
  }

  ccl::WorkerConfig config;
  config.device = *device;
  config.tensor_quota_bytes = quota_bytes;
  config.default_op_timeout = std::chrono::milliseconds(op_timeout_ms);
  config.seq_gap_timeout = std::chrono::milliseconds(seq_gap_timeout_ms);
  config.busy_poll = std::chrono::microseconds(busy_poll_us);
  config.data_host = data_host;
  config.max_tensors = limits.max_tensors;
  config.max_groups = limits.max_groups;
  ccl::WorkerMetrics metrics(device->kind == ccl::DeviceKind::kCuda ? "nccl"
                                                                    : "gloo");
  config.on_ops_done = [&metrics](std::span<const ccl::OpRecord> records) {
    metrics.OnOpsDone(records);
  };
  // A broken communicator is told to the coordinator by the world agent,
  // which is made after the core: the hook reaches it through `sealer`.
  std::mutex sealer_mutex;
  ccl::WorldAgent* sealer = nullptr;
  config.on_communicator_broken =
      [&sealer_mutex, &sealer](int64_t generation, const absl::Status& cause) {
        std::lock_guard<std::mutex> lock(sealer_mutex);
        if (sealer != nullptr) sealer->Seal(generation, cause);
      };
  config.on_sequence_gap =
      ccl::SequenceHolderQuestion(**coordinator_client, config.seq_gap_timeout);
  auto core = ccl::WorkerCore::Create(config);
  if (!core.ok()) {
    spdlog::error("ccworker: {}", std::string(core.status().message()));
    return 1;
  }

  metrics.Watch(core->get());
  auto metrics_server =
      ccl::StartMetrics(daemon, &metrics.registry(), "ccworker");
  if (!metrics_server.ok()) {
    spdlog::error("ccworker: {}", metrics_server.status().ToString());
    return 1;
  }

  const std::string worker_id = RandomWorkerId();
  ccl::WorkerService service(**core, {"", worker_id, kVersion}, limits);
  int bound_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, credentials->credentials, &bound_port);
  // Tensor writes stream in chunks well under this.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<int64_t>(limits.max_message_bytes, INT32_MAX)));
  // Every method, health and unknown methods on one completion queue
  // (common/queue_server.h says why no callback service may be on it).
  service.Register(builder);
  ccl::QueueHealth health("ccl.v1.Worker");
  health.Register(builder);
  ccl::UnknownMethods unknown_methods("ccl.v1.Worker");
  unknown_methods.Register(builder);
  ccl::EnableReflection();
  ccl::ServerQueue queue(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    spdlog::error("ccworker: cannot listen on {}", listen);
    return 1;
  }
  // However this returns: no new call, every open call answered (the core's
  // shutdown ends what it holds: works, generation waits, host tasks), then
  // the queue drained and closed, all before the server, the queue and the
  // service are destroyed; the core, destroyed after them, has nothing left
  // to call back. A normal stop does the same below; each step is
  // idempotent.
  absl::Cleanup close_queue = [&] {
    queue.CancelStreams();
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
    (*core)->Shutdown();
    queue.Close(std::chrono::seconds(1));
  };
  if (absl::Status serving = service.Serve(queue); !serving.ok()) {
    spdlog::error("ccworker: {}", serving.ToString());
    return 1;
  }
  health.Serve(queue);
  unknown_methods.Serve(queue);
  // Handlers never block, so two threads keep the queue moving while one is
  // in a handler; more only contend for the queue.
  queue.Start(2, std::chrono::microseconds(busy_poll_us));
  const std::string address = absl::StrCat(advertise_host, ":", bound_port);
  service.set_address(address);
  std::printf("ccworker listening on %s\n", address.c_str());
  std::fflush(stdout);
  if (absl::Status s = ccl::WritePortFile(daemon, bound_port); !s.ok()) {
    spdlog::error("ccworker: {}", s.ToString());
    return 1;
  }

  // After the signal mask is set: the CUDA runtime starts threads of its
  // own, which inherit it.
  auto gpu_claim = ccl::GpuClaimOf(*device);
  if (!gpu_claim.ok()) {
    std::fprintf(stderr, "ccworker: device %s: %s\n", device_name.c_str(),
                 std::string(gpu_claim.status().message()).c_str());
    return 2;
  }
  ccl::v1::RegisterRequest request;
  request.set_address(address);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  request.set_host(hostname);
  request.set_host_id(gpu_claim->host_id);
  request.set_boot_id(gpu_claim->boot_id);
  request.set_device_bus_id(gpu_claim->bus_id);
  request.mutable_device()->set_kind(device->kind == ccl::DeviceKind::kCpu
                                         ? ccl::v1::DEVICE_KIND_CPU
                                         : ccl::v1::DEVICE_KIND_CUDA);
  request.mutable_device()->set_index(device->index);
  if (rank >= 0) request.set_requested_rank(rank);
  request.set_worker_id(worker_id);
  // What proves this process to the coordinator (heartbeats, re-joins,
  // leaving): made here rather than issued at the first registration, so
  // that a retry of a first registration that got no answer is recognised.
  absl::StatusOr<std::string> secret = ccl::RandomSecretHex(32);
  if (!secret.ok()) {
    std::fprintf(stderr, "ccworker: %s\n", secret.status().ToString().c_str());
    return 1;
  }
  request.set_worker_secret(*secret);
  request.set_timeout_ms(register_timeout_ms);
  // An NCCL worker asks for the world's unique ids with its registration:
  // most ranks then form the world with that one call.
  if (std::optional<int> per_root = ccl::NcclRanksPerRoot(*device)) {
    request.set_nccl_ranks_per_root(*per_root);
  }

  ccl::WorldAgentOptions agent_options;
  agent_options.registration = request;
  agent_options.coordinator = coordinator;
  agent_options.registrar = registrar.get();
  agent_options.registrar_address = host_agent;
  agent_options.register_timeout =
      std::chrono::milliseconds(register_timeout_ms);
  agent_options.on_state = [&](const std::string& state) {
    service.set_state(state);
    metrics.SetState(state);
    // Ready only while the world communicator is usable: a re-forming
    // world is NOT_SERVING again until its new generation is built.
    if (state == "ready") {
      ccl::SetLogRank((*core)->rank(), (*core)->generation());
      metrics.SetMembership((*core)->rank(), (*core)->world_size(),
                            (*core)->generation());
    }
    health.SetReady(state == "ready");
  };
  agent_options.on_heartbeat = [&metrics] { metrics.HeartbeatSucceeded(); };
  ccl::WorldAgent agent(**core, **coordinator_client, agent_options);
  {
    std::lock_guard<std::mutex> lock(sealer_mutex);
    sealer = &agent;
  }
  // Before the agent goes: executors may outlive it.
  absl::Cleanup forget_sealer = [&sealer_mutex, &sealer] {
    std::lock_guard<std::mutex> lock(sealer_mutex);
    sealer = nullptr;
  };
  // The coordinator may start after us (compose, Kubernetes): Join retries
  // while it is unreachable, within the register timeout.
  if (absl::Status joined = agent.Join(); !joined.ok()) {
    spdlog::error("ccworker: joining the world through {}{} failed: {}",
                  coordinator,
                  host_agent.empty() ? "" : " (host agent " + host_agent + ")",
                  joined.ToString());
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
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

  service.set_state("draining");
  // Probes and load balancers see NOT_SERVING first; then the grace period.
  health.SetReady(false);
  metrics.SetState("draining");
  if (daemon.drain_ms > 0) {
    spdlog::info("ccworker: draining for {} ms", daemon.drain_ms);
    std::this_thread::sleep_for(std::chrono::milliseconds(daemon.drain_ms));
  }
  absl::Status left = agent.Leave();
  if (!left.ok()) spdlog::warn("ccworker: deregister: {}", left.ToString());
  // Clients' op streams stay open as long as the clients do.
  queue.CancelStreams();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Ends every work, so every call still open is answered (cancelled calls
  // included: the client is gone, the answer is dropped).
  (*core)->Shutdown();
  queue.Close(std::chrono::seconds(5));
  server->Wait();
  if (*metrics_server) (*metrics_server)->Stop();
  spdlog::info("ccworker: rank {} stopped", my_rank);
  return 0;
}
