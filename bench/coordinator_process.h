// The coordinator under test, as a child process: a real cccoord, so that
// its CPU time and memory are its own and not the simulated workers'. Read
// from /proc/<pid>, Linux only.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ccl::bench {

struct ProcessSample {
  double cpu_s = 0;     // user + system
  int64_t rss_kb = 0;   // resident now
  int64_t peak_kb = 0;  // resident high-water mark (VmHWM)
};

class CoordinatorProcess {
 public:
  // Starts `binary` with `args` plus --listen 127.0.0.1:0 and a port file,
  // and waits until it serves. Its output goes to `log_path`.
  static absl::StatusOr<std::unique_ptr<CoordinatorProcess>> Start(
      const std::string& binary, const std::vector<std::string>& args,
      const std::string& log_path);
  // SIGTERM, then SIGKILL if it has not exited within 5 s.
  ~CoordinatorProcess();
  CoordinatorProcess(const CoordinatorProcess&) = delete;
  CoordinatorProcess& operator=(const CoordinatorProcess&) = delete;

  std::string address() const;
  pid_t pid() const { return pid_; }
  absl::StatusOr<ProcessSample> Sample() const;

 private:
  CoordinatorProcess() = default;

  pid_t pid_ = -1;
  int port_ = 0;
  std::string dir_;
};

// cccoord in this build tree (bench/../coordinator/cccoord), else "cccoord".
std::string DefaultCoordinatorBinary();

// Raises the soft descriptor limit to the hard one: thousands of parked
// calls on one process need many.
void RaiseFileLimit();

}  // namespace ccl::bench
