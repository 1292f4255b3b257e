// The command-line flags every daemon (cccoord, ccworker) has, defined once:
// logging, the Prometheus endpoint, the drain period on SIGTERM and the port
// file tests and scripts read. Each flag also reads its CCL_* variable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "common/metrics.h"
#include "common/metrics_http.h"

namespace ccl {

struct DaemonFlags {
  std::string log_level = "info";
  std::string log_format = "text";
  int metrics_port = 0;
  std::string metrics_address = "127.0.0.1";
  int64_t drain_ms = 0;
  std::string port_file;
};

void AddDaemonFlags(CLI::App& app, DaemonFlags& flags);

// Logging as the flags say; INVALID_ARGUMENT for an unknown level or format.
absl::Status SetupDaemonLogging(const DaemonFlags& flags,
                                const std::string& process);

// The metrics endpoint when --metrics-port asks for one (null otherwise);
// prints where it serves.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetrics(
    const DaemonFlags& flags, MetricsRegistry* registry,
    const std::string& process);

// A daemon's exit status for a command line it cannot run with.
inline constexpr int kUsageExitCode = 2;
// Prints "`process`: <why>" to stderr; returns kUsageExitCode, for main.
int UsageError(const std::string& process, const absl::Status& why);

// Writes `port` to --port-file, if given, so that a reader polling the file
// never sees half a number (written aside, then renamed).
absl::Status WritePortFile(const DaemonFlags& flags, int port);

}  // namespace ccl
