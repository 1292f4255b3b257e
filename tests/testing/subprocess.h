// Runs a built binary as a child process for integration tests: output goes
// to a log file in a private temp dir, the port it binds is read from a port
// file it writes, and the destructor always kills and reaps it, so a failing
// test never leaks processes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ccl::testing {

// Path of a binary built by this project, by target name ("cccoord", ...).
// The paths are compiled in by tests/testing/testing.cmake; the environment
// variable CCL_BINARY_<NAME> (upper case) overrides one.
absl::StatusOr<std::string> BinaryPath(const std::string& name);

struct ExitStatus {
  bool exited = false;  // false: killed by `signal`.
  int code = 0;
  int signal = 0;
  std::string ToString() const;
};

class Subprocess {
 public:
  struct Options {
    // Appended as `<flag> <path>` when non-empty; the child must write its
    // port number there once serving.
    std::string port_file_flag = "--port-file";
    // Extra environment entries ("NAME=value"), added to the parent's.
    std::vector<std::string> env;
    // Names the log file; defaults to the binary's base name.
    std::string name;
  };

  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::string& binary, const std::vector<std::string>& args,
      Options options);
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(
      const std::string& binary, const std::vector<std::string>& args) {
    return Start(binary, args, Options());
  }
  // Kills (SIGKILL) the child if it still runs, reaps it, and keeps the temp
  // dir only if the process had failed a test (see DumpLogOnFailure).
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Waits until the port file holds a port; fails early if the child exits.
  absl::StatusOr<int> WaitForPort(std::chrono::milliseconds timeout);
  int port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string loopback_address() const;

  absl::Status Signal(int signal);
  // Polls for the child's exit; DEADLINE_EXCEEDED if it still runs.
  absl::StatusOr<ExitStatus> WaitForExit(std::chrono::milliseconds timeout);
  bool running();

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  const std::string& port_file() const { return port_file_; }
  std::string ReadLog() const;
  // Prints the log to stderr if the current gtest test has failed; call it
  // from TearDown (or before the Subprocess goes away).
  void DumpLogOnFailure() const;

 private:
  Subprocess() = default;
  // Reaps without blocking; true once the child is gone.
  bool Reap(int options);

  pid_t pid_ = -1;
  bool reaped_ = false;
  ExitStatus exit_status_;
  int port_ = 0;
  std::string name_;
  std::string dir_;
  std::string log_path_;
  std::string port_file_;
};

}  // namespace ccl::testing
