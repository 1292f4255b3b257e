#include "common/daemon_flags.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace ccl {

void AddDaemonFlags(CLI::App& app, DaemonFlags& flags) {
  app.add_option("--port-file", flags.port_file,
                 "write the bound port here once serving");
  app.add_option("--log-level", flags.log_level,
                 "trace, debug, info, warn, error, critical, off")
      ->capture_default_str()
      ->envname("CCL_LOG_LEVEL");
  app.add_option("--log-format", flags.log_format, "text or json (JSON lines)")
      ->capture_default_str()
      ->envname("CCL_LOG_FORMAT");
  app.add_option("--metrics-port", flags.metrics_port,
                 "serve Prometheus text on http://ADDRESS:PORT/metrics; 0: off")
      ->capture_default_str()
      ->envname("CCL_METRICS_PORT");
  app.add_option("--metrics-address", flags.metrics_address,
                 "address the metrics endpoint binds to")
      ->capture_default_str()
      ->envname("CCL_METRICS_ADDRESS");
  app.add_option("--drain-ms", flags.drain_ms,
                 "on SIGTERM, report NOT_SERVING this long before stopping")
      ->capture_default_str()
      ->envname("CCL_DRAIN_MS");
}

absl::Status SetupDaemonLogging(const DaemonFlags& flags,
                                const std::string& process) {
  return SetupLogging(flags.log_level, flags.log_format, process);
}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> StartMetrics(
    const DaemonFlags& flags, MetricsRegistry* registry,
    const std::string& process) {
  if (flags.metrics_port <= 0) return std::unique_ptr<MetricsHttpServer>();
  auto started = MetricsHttpServer::Start(flags.metrics_address,
                                          flags.metrics_port, registry);
  if (!started.ok()) return started.status();
  std::printf("%s metrics on http://%s:%d/metrics\n", process.c_str(),
              flags.metrics_address.c_str(), (*started)->port());
  std::fflush(stdout);
  return started;
}

absl::Status WritePortFile(const DaemonFlags& flags, int port) {
  if (flags.port_file.empty()) return absl::OkStatus();
  const std::string temp =
      absl::StrCat(flags.port_file, ".tmp.", static_cast<long>(getpid()));
  {
    std::ofstream out(temp, std::ios::trunc);
    out << port << "\n";
    out.close();
    if (!out) {
      return absl::InternalError(absl::StrCat("cannot write ", temp));
    }
  }
  if (std::rename(temp.c_str(), flags.port_file.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", temp, " to ", flags.port_file));
  }
  return absl::OkStatus();
}

int UsageError(const std::string& process, const absl::Status& why) {
  std::fprintf(stderr, "%s: %s\n", process.c_str(),
               std::string(why.message()).c_str());
  return kUsageExitCode;
}

}  // namespace ccl
