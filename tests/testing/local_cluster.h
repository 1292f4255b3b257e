// A real cluster for integration tests: one cccoord and N ccworker processes
// on 127.0.0.1 with ephemeral ports, torn down (SIGKILL at worst) when the
// object goes away.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cluster_client.h"
#include "tests/testing/subprocess.h"

namespace ccl::testing {

// $CCL_TEST_SIMULATED_HOSTS=G: a "cuda" cluster puts worker i on
// cuda:(i mod G), each worker a simulated host of its own (ccworker
// --host-id simhost<i>), so that a test of any number of ranks runs on a
// machine with G GPUs: NCCL then joins the ranks through its network
// transport (../shared/GPU.md; scripts/gpu-check.sh sets it). 0 when unset.
int SimulatedHostGpus();
// Why a "cuda" cluster of `workers` cannot run on a machine with `gpus`
// GPUs (empty: it can, with a GPU each or as simulated hosts).
std::string CudaWorkersMissing(int workers, int gpus);

struct LocalClusterOptions {
  int workers = 2;
  // "cuda" gives worker i the device cuda:i (see SimulatedHostGpus).
  std::string device = "cpu";
  std::vector<std::string> worker_args;
  std::vector<std::string> coordinator_args;
  // > 0: this many cchostagent processes (as hosts of consecutive ranks)
  // register each host's workers in one call. The workers use their
  // agent for Register only (ccworker --host-agent), or, with
  // `all_calls_through_host_agent`, as their coordinator for every call.
  int host_agents = 0;
  bool all_calls_through_host_agent = false;
  std::vector<std::string> host_agent_args;
  std::chrono::milliseconds ready_timeout{std::chrono::seconds(60)};
  // false: Start returns as soon as the coordinator has every rank
  // registered, while the workers may still be forming their world (what a
  // client sees when it comes right after `ccctl status` says complete).
  bool wait_for_workers_ready = true;
  // What Client() (and the readiness check) connects with.
  SecurityOptions client_security;
};

class LocalCluster {
 public:
  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(
      LocalClusterOptions options);

  const std::string& coordinator_address() const {
    return coordinator_address_;
  }
  Subprocess& coordinator() { return *coordinator_; }
  Subprocess& worker(int i) { return *workers_[i]; }
  Subprocess& host_agent(int k) { return *host_agents_[k]; }
  int size() const { return static_cast<int>(workers_.size()); }

  // Starts worker `i` again with the arguments it was first given (its
  // rank included), e.g. after the test killed it; `extra_args` are added.
  absl::Status RestartWorker(int i, std::vector<std::string> extra_args = {});
  // Starts a fresh coordinator on the same address (the old one must be
  // gone); it knows nothing of the world until the workers re-register.
  absl::Status RestartCoordinator();
  // Until the world is complete at a generation >= `min_generation` and
  // every worker reports that generation and state "ready"; returns the
  // generation.
  absl::StatusOr<int64_t> WaitUntilReady(std::chrono::milliseconds timeout,
                                         int64_t min_generation = 0);
  // Until the coordinator reports the world complete (every rank
  // registered), whatever the workers' state; returns the generation.
  absl::StatusOr<int64_t> WaitUntilRegistered(
      std::chrono::milliseconds timeout);

  // A client of this cluster (a new one each call, as separate users are).
  absl::StatusOr<std::unique_ptr<client::ClusterClient>> Client(
      std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;
  // One with `options` as given, save the coordinator and security.
  absl::StatusOr<std::unique_ptr<client::ClusterClient>> Client(
      client::ClientOptions options) const;

  // Prints every process's log if the current test failed.
  void DumpLogsOnFailure() const;
  ~LocalCluster();

 private:
  LocalCluster() = default;
  absl::StatusOr<std::unique_ptr<Subprocess>> StartWorker(
      int i, const std::vector<std::string>& extra_args) const;

  LocalClusterOptions options_;
  std::vector<std::string> coordinator_args_;
  std::string coordinator_address_;
  SecurityOptions client_security_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> host_agents_;
  // Worker i's host agent, if any.
  std::vector<std::string> host_agent_of_worker_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
};

}  // namespace ccl::testing
