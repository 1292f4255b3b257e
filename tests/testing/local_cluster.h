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

struct LocalClusterOptions {
  int workers = 2;
  std::string device = "cpu";  // "cuda" gives worker i the device cuda:i
  std::vector<std::string> worker_args;
  std::vector<std::string> coordinator_args;
  std::chrono::milliseconds ready_timeout{std::chrono::seconds(60)};
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
  int size() const { return static_cast<int>(workers_.size()); }

  // A client of this cluster (a new one each call, as separate users are).
  absl::StatusOr<std::unique_ptr<ClusterClient>> Client(
      std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;

  // Prints every process's log if the current test failed.
  void DumpLogsOnFailure() const;
  ~LocalCluster();

 private:
  LocalCluster() = default;
  std::string coordinator_address_;
  SecurityOptions client_security_;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
};

}  // namespace ccl::testing
