#include "tests/testing/local_cluster.h"

#include <signal.h>

#include <thread>

#include "absl/strings/str_cat.h"

namespace ccl::testing {

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    LocalClusterOptions options) {
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  cluster->client_security_ = options.client_security;
  auto cccoord = BinaryPath("cccoord");
  if (!cccoord.ok()) return cccoord.status();
  auto ccworker = BinaryPath("ccworker");
  if (!ccworker.ok()) return ccworker.status();

  std::vector<std::string> coordinator_args = {
      "--world-size", absl::StrCat(options.workers), "--listen", "127.0.0.1:0"};
  coordinator_args.insert(coordinator_args.end(),
                          options.coordinator_args.begin(),
                          options.coordinator_args.end());
  auto coordinator = Subprocess::Start(*cccoord, coordinator_args);
  if (!coordinator.ok()) return coordinator.status();
  cluster->coordinator_ = *std::move(coordinator);
  auto port = cluster->coordinator_->WaitForPort(std::chrono::seconds(20));
  if (!port.ok()) return port.status();
  cluster->coordinator_address_ = cluster->coordinator_->loopback_address();

  for (int i = 0; i < options.workers; ++i) {
    std::vector<std::string> args = {
        "--coordinator",
        cluster->coordinator_address_,
        "--listen",
        "127.0.0.1:0",
        "--rank",
        absl::StrCat(i),
        "--device",
        options.device == "cuda" ? absl::StrCat("cuda:", i) : options.device};
    args.insert(args.end(), options.worker_args.begin(),
                options.worker_args.end());
    Subprocess::Options process_options;
    process_options.name = absl::StrCat("ccworker-", i);
    auto worker = Subprocess::Start(*ccworker, args, process_options);
    if (!worker.ok()) return worker.status();
    cluster->workers_.push_back(*std::move(worker));
  }
  for (auto& worker : cluster->workers_) {
    auto worker_port = worker->WaitForPort(options.ready_timeout);
    if (!worker_port.ok()) return worker_port.status();
  }
  // Ready when the world is complete and every worker has its communicator.
  const auto deadline =
      std::chrono::steady_clock::now() + options.ready_timeout;
  absl::Status last = absl::UnavailableError("not ready");
  while (std::chrono::steady_clock::now() < deadline) {
    auto client = cluster->Client(std::chrono::seconds(5));
    if (client.ok() && (*client)->world().state() == v1::WORLD_STATE_COMPLETE) {
      bool ready = true;
      for (int rank : (*client)->AllRanks()) {
        auto info = (*client)->Info(rank);
        if (!info.ok() || info->state() != "ready") {
          ready = false;
          last = info.ok() ? absl::UnavailableError(absl::StrCat(
                                 "rank ", rank, " is ", info->state()))
                           : info.status();
        }
      }
      if (ready) return cluster;
    } else if (!client.ok()) {
      last = client.status();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  cluster->DumpLogsOnFailure();
  return absl::DeadlineExceededError(
      absl::StrCat("local cluster not ready: ", last.ToString()));
}

absl::StatusOr<std::unique_ptr<ClusterClient>> LocalCluster::Client(
    std::chrono::milliseconds timeout) const {
  ClientOptions options;
  options.coordinator = coordinator_address_;
  options.timeout = timeout;
  options.security = client_security_;
  return ClusterClient::Connect(options);
}

void LocalCluster::DumpLogsOnFailure() const {
  if (coordinator_) coordinator_->DumpLogOnFailure();
  for (const auto& worker : workers_) worker->DumpLogOnFailure();
}

LocalCluster::~LocalCluster() {
  DumpLogsOnFailure();
  for (auto& worker : workers_) (void)worker->Signal(SIGTERM);
  for (auto& worker : workers_)
    (void)worker->WaitForExit(std::chrono::seconds(5));
  workers_.clear();
  coordinator_.reset();
}

}  // namespace ccl::testing
