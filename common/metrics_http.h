// A minimal HTTP/1.1 server for Prometheus scrapes: GET /metrics answers the
// registry's text; anything else is 404 (405 for other methods). One thread,
// one request per connection (Connection: close), which is all a scraper
// needs; it is not a general web server.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics.h"

namespace ccl {

class MetricsHttpServer {
 public:
  // Binds `host:port` (port 0: any free port) and starts serving.
  // `registry` must outlive the server.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& host, int port, MetricsRegistry* registry);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  void Stop();

 private:
  MetricsHttpServer(int fd, int port, MetricsRegistry* registry);
  void Serve();
  void Handle(int client);

  int fd_;
  int port_;
  MetricsRegistry* registry_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace ccl
