// ccworker: one worker daemon per device. Serves the Worker API, joins the
// coordinator's world, builds the world communicator and heartbeats until
// SIGTERM, then deregisters and exits 0.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/coordinator_client.h"
#include "common/security_flags.h"
#include "common/types.h"
#include "server/coordinator_kv_store.h"
#include "server/worker_core.h"
#include "server/worker_service.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kVersion[] = "0.1.0";

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

// Writes atomically so that a reader polling the file never sees half a port.
void WritePortFile(const std::string& path, int port) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp);
    out << port << "\n";
  }
  std::rename(temp.c_str(), path.c_str());
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
  std::string port_file;
  int rank = std::atoi(EnvOr("CCL_RANK", EnvOr("RANK", "-1")).c_str());
  int64_t quota_bytes = 0;
  int64_t op_timeout_ms = 60000;
  int64_t seq_gap_timeout_ms = 30000;
  int64_t register_timeout_ms = 300000;
  std::string log_level = "info";
  app.add_option("--coordinator", coordinator,
                 "coordinator HOST:PORT (env CCL_COORDINATOR, or "
                 "MASTER_ADDR:MASTER_PORT)")
      ->capture_default_str();
  app.add_option("--device", device_name, "cpu or cuda:N (env CCL_DEVICE)")
      ->capture_default_str();
  app.add_option("--listen", listen,
                 "HOST:PORT of this worker's gRPC server; port 0 picks one")
      ->capture_default_str();
  app.add_option("--advertise-host", advertise_host,
                 "host other processes use to reach this worker (default: the "
                 "listen host)");
  app.add_option("--data-host", data_host,
                 "address the data plane (Gloo TCP) binds to (default: the "
                 "advertised host)");
  app.add_option("--port-file", port_file,
                 "write the bound port here once serving");
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
  app.add_option("--register-timeout-ms", register_timeout_ms,
                 "how long to wait for the world to form")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->capture_default_str();
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
  spdlog::set_level(spdlog::level::from_str(log_level));
  if (absl::Status s =
          ccl::ResolveSecurityOptions(security.token_files, &security.options);
      !s.ok()) {
    std::fprintf(stderr, "ccworker: %s\n", std::string(s.message()).c_str());
    return 2;
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
  const std::string listen_host = listen.substr(0, listen.rfind(':'));
  if (advertise_host.empty()) {
    advertise_host = listen_host == "0.0.0.0" || listen_host == "[::]"
                         ? "127.0.0.1"
                         : listen_host;
  }
  if (data_host.empty()) data_host = advertise_host;

  // Signals go to one thread that waits for them; every other thread,
  // gRPC's included, inherits this mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
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

  ccl::WorkerConfig config;
  config.device = *device;
  config.tensor_quota_bytes = quota_bytes;
  config.default_op_timeout = std::chrono::milliseconds(op_timeout_ms);
  config.seq_gap_timeout = std::chrono::milliseconds(seq_gap_timeout_ms);
  config.data_host = data_host;
  auto core = ccl::WorkerCore::Create(config);
  if (!core.ok()) {
    spdlog::error("ccworker: {}", std::string(core.status().message()));
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
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || bound_port == 0) {
    spdlog::error("ccworker: cannot listen on {}", listen);
    return 1;
  }
  const std::string address = absl::StrCat(advertise_host, ":", bound_port);
  service.set_address(address);
  std::printf("ccworker listening on %s\n", address.c_str());
  std::fflush(stdout);
  if (!port_file.empty()) WritePortFile(port_file, bound_port);

  ccl::v1::RegisterRequest request;
  request.set_address(address);
  char hostname[256] = {};
  gethostname(hostname, sizeof(hostname) - 1);
  request.set_host(hostname);
  request.mutable_device()->set_kind(device->kind == ccl::DeviceKind::kCpu
                                         ? ccl::v1::DEVICE_KIND_CPU
                                         : ccl::v1::DEVICE_KIND_CUDA);
  request.mutable_device()->set_index(device->index);
  if (rank >= 0) request.set_requested_rank(rank);
  request.set_worker_id(worker_id);
  request.set_timeout_ms(register_timeout_ms);

  // The coordinator may start after us (compose, Kubernetes): retry while it
  // is unreachable, with backoff, within the register timeout.
  const auto register_deadline = std::chrono::steady_clock::now() +
                                 std::chrono::milliseconds(register_timeout_ms);
  absl::StatusOr<ccl::v1::RegisterResponse> registered;
  std::chrono::milliseconds backoff(100);
  while (true) {
    registered = (*coordinator_client)->Register(request);
    if (registered.ok() ||
        registered.status().code() != absl::StatusCode::kUnavailable ||
        std::chrono::steady_clock::now() + backoff > register_deadline) {
      break;
    }
    spdlog::warn("ccworker: coordinator {} unreachable ({}); retrying",
                 coordinator, std::string(registered.status().message()));
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
  if (!registered.ok()) {
    spdlog::error("ccworker: register with {} failed: {}", coordinator,
                  registered.status().ToString());
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
    return 1;
  }
  const int my_rank = registered->rank();
  const int64_t generation = registered->generation();
  const int world_size = registered->world().world_size();
  spdlog::info("ccworker: rank {} of {} in generation {}", my_rank, world_size,
               generation);

  ccl::CoordinatorKvStore store(**coordinator_client, generation);
  absl::Status formed =
      (*core)->FormWorld(my_rank, world_size, generation, store);
  if (!formed.ok()) {
    spdlog::error("ccworker: building the world communicator failed: {}",
                  formed.ToString());
    server->Shutdown(std::chrono::system_clock::now() +
                     std::chrono::seconds(1));
    return 1;
  }
  service.set_state("ready");
  ready = true;
  std::printf("ccworker rank %d of %d ready (generation %lld, backend %s)\n",
              my_rank, world_size, static_cast<long long>(generation),
              (*core)->backend().c_str());
  std::fflush(stdout);

  const auto heartbeat_interval = std::chrono::milliseconds(
      std::max<int64_t>(100, registered->world().heartbeat_interval_ms() > 0
                                 ? registered->world().heartbeat_interval_ms()
                                 : 1000));
  while (!stop.WaitFor(heartbeat_interval)) {
    ccl::v1::HeartbeatRequest beat;
    beat.set_rank(my_rank);
    beat.set_generation(generation);
    beat.set_worker_id(worker_id);
    beat.set_tensor_count(static_cast<int64_t>((*core)->List().size()));
    beat.set_tensor_bytes((*core)->BytesInUse());
    auto reply = (*coordinator_client)->Heartbeat(beat);
    if (!reply.ok()) {
      spdlog::warn("ccworker: heartbeat failed: {}", reply.status().ToString());
    }
  }

  service.set_state("draining");
  ccl::v1::DeregisterRequest leave;
  leave.set_rank(my_rank);
  leave.set_generation(generation);
  leave.set_worker_id(worker_id);
  absl::Status left = (*coordinator_client)->Deregister(leave);
  if (!left.ok()) spdlog::warn("ccworker: deregister: {}", left.ToString());
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  (*core)->Shutdown();
  server->Wait();
  spdlog::info("ccworker: rank {} stopped", my_rank);
  return 0;
}
