// Logging setup shared by the daemons: spdlog to stderr, as text (the
// default, for a terminal) or JSON lines (for log collectors in compose and
// Kubernetes), with the fields an operator filters on: rank and generation
// once known, group and seq inside an op's scope.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace ccl {

// `level`: trace, debug, info, warn, error, critical, off. `format`: text or
// json. `process` names the logger ("ccworker"). INVALID_ARGUMENT for an
// unknown level or format; the previous setup stays then.
absl::Status SetupLogging(const std::string& level, const std::string& format,
                          const std::string& process);

// Process-wide fields, set once the worker has a rank; -1 leaves one out.
void SetLogRank(int rank, int64_t generation);

// Adds group and seq to every line logged on this thread while it lives.
class ScopedLogOp {
 public:
  ScopedLogOp(std::string group, int64_t seq);
  ~ScopedLogOp();
  ScopedLogOp(const ScopedLogOp&) = delete;
  ScopedLogOp& operator=(const ScopedLogOp&) = delete;

 private:
  std::string saved_group_;
  int64_t saved_seq_;
};

// One JSON line for a message; exposed for tests.
std::string FormatJsonLogLine(int64_t unix_micros, const std::string& level,
                              const std::string& process,
                              const std::string& message);

}  // namespace ccl
