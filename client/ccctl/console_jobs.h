// The console's long runs (a bench sweep, the doctor, a trace) as ccctl
// itself in a child process: the page gets exactly the JSON document the
// command prints, a run that hangs is killed at its limit without touching
// the console, and the console stays one process a person starts.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ccl::ctl {

struct ChildResult {
  int exit_code = -1;  // -1: killed (timed out or cancelled)
  bool timed_out = false;
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] a path) with stdout and stderr captured; kills it at
// `limit`. `on_stderr` hears stderr as it arrives (progress lines), `on_start`
// the child's pid.
absl::StatusOr<ChildResult> RunChild(
    const std::vector<std::string>& argv, std::chrono::milliseconds limit,
    const std::function<void(const std::string&)>& on_stderr = {},
    const std::function<void(pid_t)>& on_start = {});

// One job at a time (a bench and the doctor both load every rank: two at
// once would measure each other). Jobs are kept for the page to read back.
class ConsoleJobs {
 public:
  // `ccctl` is the path of this binary; `globals` the flags every child
  // gets (coordinator, timeout, TLS and token files).
  ConsoleJobs(std::string ccctl, std::vector<std::string> globals);
  ~ConsoleJobs();  // kills a running child and waits for it

  // Starts `ccctl <args...>` for `kind` ("bench", "doctor"; `args` ask for
  // JSON on stdout);
  // FAILED_PRECONDITION while another job runs. Returns the job's id.
  absl::StatusOr<int64_t> Start(const std::string& kind,
                                const std::vector<std::string>& args,
                                std::chrono::milliseconds limit);
  // {"id", "kind", "args", "state": running|done|failed, "elapsed_s",
  //  "progress": stderr lines so far, "exit_code", "result": the document,
  //  "error"}; NOT_FOUND for an unknown id.
  absl::StatusOr<nlohmann::json> Get(int64_t id);
  // The latest job of each kind, newest first (ids and states).
  nlohmann::json List();

  // A short run (a trace) in the calling thread: the document, or the
  // child's own error line.
  absl::StatusOr<nlohmann::json> RunNow(const std::vector<std::string>& args,
                                        std::chrono::milliseconds limit);

 private:
  struct Job {
    int64_t id = 0;
    std::string kind;
    std::vector<std::string> args;
    std::string state = "running";
    std::chrono::steady_clock::time_point started, ended;
    std::vector<std::string> progress;
    int exit_code = -1;
    nlohmann::json result;
    std::string error;
    pid_t pid = 0;
  };
  std::vector<std::string> Argv(const std::vector<std::string>& args) const;
  void Run(int64_t id, std::vector<std::string> argv,
           std::chrono::milliseconds limit);

  const std::string ccctl_;
  const std::vector<std::string> globals_;
  std::mutex mutex_;
  std::map<int64_t, Job> jobs_;
  int64_t next_id_ = 1;
  bool stopping_ = false;
  std::thread runner_;
};

// The error line a failed ccctl printed ("ccctl: UNAVAILABLE: ..."), without
// the prefix; else a description of how it ended.
std::string ChildError(const ChildResult& result);

}  // namespace ccl::ctl
