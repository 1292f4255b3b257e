// The worker's Prometheus metrics: per-op counts, bytes and latency by op
// and backend (fed by WorkerConfig::on_ops_done, the one place every op's
// final status and timing pass), and live state read at scrape time
// (tensors held, communicator states, heartbeat age).
#pragma once

#include <atomic>
#include <chrono>
#include <mutex>
#include <span>
#include <string>

#include "common/metrics.h"
#include "server/core/worker_core.h"

namespace ccl {

class WorkerMetrics {
 public:
  // `backend` labels the op series ("gloo", "nccl").
  explicit WorkerMetrics(std::string backend);

  MetricsRegistry& registry() { return registry_; }

  // The on_ops_done hook: must not block (it runs on an executor thread).
  // A run of consecutive records of one op kind and outcome (a plan's) is
  // accounted for with one update per series.
  void OnOpsDone(std::span<const OpRecord> records);

  // Gauges of `core` are read on each scrape from then on; `core` must
  // outlive the metrics endpoint.
  void Watch(const WorkerCore* core);
  // "joining", "ready", "re-forming" or "draining".
  void SetState(const std::string& state);
  void SetMembership(int rank, int world_size, int64_t generation);
  void HeartbeatSucceeded();

 private:
  // `run`: records of one op kind and one status code.
  void Account(std::span<const OpRecord> run);
  void Collect(MetricsRegistry& registry);

  const std::string backend_;
  MetricsRegistry registry_;
  std::mutex mutex_;
  const WorkerCore* core_ = nullptr;
  std::string state_ = "joining";
  std::chrono::steady_clock::time_point start_ =
      std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_heartbeat_{};
  bool heartbeat_seen_ = false;
};

}  // namespace ccl
