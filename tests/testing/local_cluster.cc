#include "tests/testing/local_cluster.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ccl::testing {

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    LocalClusterOptions options) {
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  cluster->options_ = options;
  cluster->client_security_ = options.client_security;
  auto cccoord = BinaryPath("cccoord");
  if (!cccoord.ok()) return cccoord.status();

  std::vector<std::string> coordinator_args = {
      "--world-size", absl::StrCat(options.workers), "--listen", "127.0.0.1:0"};
  coordinator_args.insert(coordinator_args.end(),
                          options.coordinator_args.begin(),
                          options.coordinator_args.end());
  cluster->coordinator_args_ = coordinator_args;
  auto coordinator = Subprocess::Start(*cccoord, coordinator_args);
  if (!coordinator.ok()) return coordinator.status();
  cluster->coordinator_ = *std::move(coordinator);
  auto port = cluster->coordinator_->WaitForPort(std::chrono::seconds(20));
  if (!port.ok()) return port.status();
  cluster->coordinator_address_ = cluster->coordinator_->loopback_address();

  cluster->host_agent_of_worker_.assign(options.workers, "");
  if (options.host_agents > 0) {
    auto cchostagent = BinaryPath("cchostagent");
    if (!cchostagent.ok()) return cchostagent.status();
    const int per_host =
        (options.workers + options.host_agents - 1) / options.host_agents;
    for (int k = 0; k < options.host_agents; ++k) {
      const int first = k * per_host;
      const int count =
          std::max(0, std::min(per_host, options.workers - first));
      Subprocess::Options agent_options;
      agent_options.name = absl::StrCat("cchostagent-", k);
      std::vector<std::string> agent_args = {
          "--coordinator", cluster->coordinator_address_,
          "--listen",      "127.0.0.1:0",
          "--workers",     absl::StrCat(count)};
      agent_args.insert(agent_args.end(), options.host_agent_args.begin(),
                        options.host_agent_args.end());
      auto agent = Subprocess::Start(*cchostagent, agent_args, agent_options);
      if (!agent.ok()) return agent.status();
      auto agent_port = (*agent)->WaitForPort(std::chrono::seconds(20));
      if (!agent_port.ok()) return agent_port.status();
      for (int i = first; i < first + count; ++i) {
        cluster->host_agent_of_worker_[i] = (*agent)->loopback_address();
      }
      cluster->host_agents_.push_back(*std::move(agent));
    }
  }

  for (int i = 0; i < options.workers; ++i) {
    auto worker = cluster->StartWorker(i, {});
    if (!worker.ok()) return worker.status();
    cluster->workers_.push_back(*std::move(worker));
  }
  for (auto& worker : cluster->workers_) {
    auto worker_port = worker->WaitForPort(options.ready_timeout);
    if (!worker_port.ok()) return worker_port.status();
  }
  auto ready = options.wait_for_workers_ready
                   ? cluster->WaitUntilReady(options.ready_timeout)
                   : cluster->WaitUntilRegistered(options.ready_timeout);
  if (!ready.ok()) {
    cluster->DumpLogsOnFailure();
    return ready.status();
  }
  return cluster;
}

int SimulatedHostGpus() {
  const char* value = std::getenv("CCL_TEST_SIMULATED_HOSTS");
  int gpus = 0;
  if (value == nullptr || !absl::SimpleAtoi(value, &gpus)) return 0;
  return std::max(0, gpus);
}

std::string CudaWorkersMissing(int workers, int gpus) {
  if (gpus >= workers || (SimulatedHostGpus() > 0 && gpus > 0)) return "";
  return absl::StrCat("needs ", workers,
                      " CUDA devices (or CCL_TEST_SIMULATED_HOSTS=GPUS to "
                      "share fewer as simulated hosts), found ",
                      gpus);
}

absl::StatusOr<std::unique_ptr<Subprocess>> LocalCluster::StartWorker(
    int i, const std::vector<std::string>& extra_args) const {
  auto ccworker = BinaryPath("ccworker");
  if (!ccworker.ok()) return ccworker.status();
  const std::string& host_agent = host_agent_of_worker_[i];
  std::vector<std::string> args = {
      "--coordinator",
      !host_agent.empty() && options_.all_calls_through_host_agent
          ? host_agent
          : coordinator_address_,
      "--listen",
      "127.0.0.1:0",
      "--device",
      options_.device};
  if (options_.device == "cuda") {
    const int gpus = SimulatedHostGpus();
    args.back() = absl::StrCat("cuda:", gpus > 0 ? i % gpus : i);
    if (gpus > 0) {
      args.insert(args.end(), {"--host-id", absl::StrCat("simhost", i)});
    }
  }
  // A --rank in extra_args replaces the worker's own (-1: the coordinator
  // assigns one, as compose's and Kubernetes' workers ask).
  if (std::find(extra_args.begin(), extra_args.end(), "--rank") ==
      extra_args.end()) {
    args.insert(args.end(), {"--rank", absl::StrCat(i)});
  }
  if (!host_agent.empty() && !options_.all_calls_through_host_agent) {
    args.insert(args.end(), {"--host-agent", host_agent});
  }
  args.insert(args.end(), options_.worker_args.begin(),
              options_.worker_args.end());
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  Subprocess::Options process_options;
  process_options.name = absl::StrCat("ccworker-", i);
  return Subprocess::Start(*ccworker, args, process_options);
}

absl::Status LocalCluster::RestartWorker(int i,
                                         std::vector<std::string> extra_args) {
  if (i < 0 || i >= size()) {
    return absl::InvalidArgumentError(absl::StrCat("no worker ", i));
  }
  workers_[i]->DumpLogOnFailure();
  auto worker = StartWorker(i, extra_args);
  if (!worker.ok()) return worker.status();
  workers_[i] = *std::move(worker);
  return workers_[i]->WaitForPort(options_.ready_timeout).status();
}

absl::Status LocalCluster::RestartCoordinator() {
  auto cccoord = BinaryPath("cccoord");
  if (!cccoord.ok()) return cccoord.status();
  coordinator_->DumpLogOnFailure();
  std::vector<std::string> args = coordinator_args_;
  for (size_t k = 0; k + 1 < args.size(); ++k) {
    if (args[k] == "--listen") args[k + 1] = coordinator_address_;
  }
  // The old process's port may linger a moment in the kernel.
  absl::Status last;
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto coordinator = Subprocess::Start(*cccoord, args);
    if (!coordinator.ok()) return coordinator.status();
    auto port = (*coordinator)->WaitForPort(std::chrono::seconds(10));
    if (port.ok()) {
      coordinator_ = *std::move(coordinator);
      return absl::OkStatus();
    }
    last = port.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last;
}

absl::StatusOr<int64_t> LocalCluster::WaitUntilRegistered(
    std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::Status last = absl::UnavailableError("not registered");
  while (std::chrono::steady_clock::now() < deadline) {
    auto client = Client(std::chrono::seconds(5));
    if (client.ok() &&
        (*client)->world().state == client::WorldState::kComplete) {
      return (*client)->world().generation;
    }
    if (!client.ok()) last = client.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("the world did not complete within ", timeout.count(),
                   " ms: ", last.ToString()));
}

absl::StatusOr<int64_t> LocalCluster::WaitUntilReady(
    std::chrono::milliseconds timeout, int64_t min_generation) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  absl::Status last = absl::UnavailableError("not ready");
  while (std::chrono::steady_clock::now() < deadline) {
    auto client = Client(std::chrono::seconds(5));
    if (client.ok() &&
        (*client)->world().state == client::WorldState::kComplete &&
        (*client)->world().generation >= min_generation) {
      const int64_t generation = (*client)->world().generation;
      bool ready = true;
      for (const auto& info : (*client)->Info((*client)->AllRanks())) {
        if (!info.result.ok() || info.result->state != "ready" ||
            info.result->generation != generation) {
          ready = false;
          last = info.result.ok()
                     ? absl::UnavailableError(absl::StrCat(
                           "rank ", info.rank, " is ", info.result->state,
                           " in generation ", info.result->generation,
                           "; the world is in ", generation))
                     : info.result.status();
        }
      }
      if (ready) return generation;
    } else if (!client.ok()) {
      last = client.status();
    } else {
      const client::World& world = (*client)->world();
      last = absl::UnavailableError(absl::StrCat(
          "world of generation ", world.generation, " is ",
          std::string(client::WorldStateName(world.state)), " with ",
          world.members.size(), " of ", world.world_size, " members"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("local cluster not ready: ", last.ToString()));
}

absl::StatusOr<std::unique_ptr<client::ClusterClient>> LocalCluster::Client(
    std::chrono::milliseconds timeout) const {
  client::ClientOptions options;
  options.timeout = timeout;
  return Client(std::move(options));
}

absl::StatusOr<std::unique_ptr<client::ClusterClient>> LocalCluster::Client(
    client::ClientOptions options) const {
  options.coordinator = coordinator_address_;
  options.security = client_security_;
  return client::ClusterClient::Connect(options);
}

void LocalCluster::DumpLogsOnFailure() const {
  if (coordinator_) coordinator_->DumpLogOnFailure();
  for (const auto& agent : host_agents_) agent->DumpLogOnFailure();
  for (const auto& worker : workers_) worker->DumpLogOnFailure();
}

LocalCluster::~LocalCluster() {
  DumpLogsOnFailure();
  for (auto& worker : workers_) (void)worker->Signal(SIGTERM);
  for (auto& worker : workers_)
    (void)worker->WaitForExit(std::chrono::seconds(5));
  workers_.clear();
  host_agents_.clear();
  coordinator_.reset();
}

}  // namespace ccl::testing
