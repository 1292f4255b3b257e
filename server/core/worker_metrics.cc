#include "server/core/worker_metrics.h"

#include <vector>

#include "absl/status/status.h"
#include "common/logging.h"
#include "common/types.h"
#include "spdlog/spdlog.h"

namespace ccl {
namespace {

constexpr const char* kStates[] = {"joining", "ready", "re-forming",
                                   "draining"};

void MustDeclare(MetricsRegistry& registry, const std::string& name,
                 MetricsRegistry::Type type, const std::string& help,
                 std::vector<double> buckets = {}) {
  // The names are constants of this file; a failure is a bug the unit test
  // shows, so it is logged rather than fatal.
  if (absl::Status s = registry.Declare(name, type, help, std::move(buckets));
      !s.ok()) {
    spdlog::error("metrics: {}", s.ToString());
  }
}

}  // namespace

WorkerMetrics::WorkerMetrics(std::string backend)
    : backend_(std::move(backend)) {
  using Type = MetricsRegistry::Type;
  MustDeclare(registry_, "ccl_ops_total", Type::kCounter,
              "Ops finished on this rank, by op, backend and final status "
              "(OK or the canonical error code).");
  MustDeclare(registry_, "ccl_op_bytes_total", Type::kCounter,
              "Bytes of the tensors ops ran over on this rank (elements per "
              "rank times element size), by op and backend.");
  MustDeclare(registry_, "ccl_op_latency_seconds", Type::kHistogram,
              "Time from enqueue to completion of successful ops, by op and "
              "backend.",
              MetricsRegistry::LatencyBuckets());
  MustDeclare(registry_, "ccl_op_device_seconds", Type::kHistogram,
              "Backend (device) time of successful ops, by op and backend.",
              MetricsRegistry::LatencyBuckets());
  MustDeclare(registry_, "ccl_tensors_held", Type::kGauge,
              "Named tensors this worker holds.");
  MustDeclare(registry_, "ccl_tensor_bytes_held", Type::kGauge,
              "Bytes of the tensors this worker holds.");
  MustDeclare(registry_, "ccl_worker_state", Type::kGauge,
              "1 for the worker's current state (joining, ready, re-forming, "
              "draining).");
  MustDeclare(registry_, "ccl_communicator_state", Type::kGauge,
              "1 for each communicator (group) this worker is a member of, "
              "labelled with its backend and state.");
  MustDeclare(registry_, "ccl_worker_rank", Type::kGauge,
              "This worker's rank in the current generation (-1 before).");
  MustDeclare(registry_, "ccl_worker_world_size", Type::kGauge,
              "World size of the current generation (0 before).");
  MustDeclare(registry_, "ccl_worker_generation", Type::kGauge,
              "Current generation (0 before the world forms).");
  MustDeclare(registry_, "ccl_heartbeat_age_seconds", Type::kGauge,
              "Seconds since the last heartbeat the coordinator accepted "
              "(since start before the first).");
  registry_.Set("ccl_worker_rank", {}, -1);
  registry_.Set("ccl_worker_world_size", {}, 0);
  registry_.Set("ccl_worker_generation", {}, 0);
  registry_.AddCollector([this](MetricsRegistry& r) { Collect(r); });
}

void WorkerMetrics::OnOpsDone(std::span<const OpRecord> records) {
  size_t begin = 0;
  while (begin < records.size()) {
    const OpRecord& first = records[begin];
    size_t end = begin + 1;
    while (end < records.size() && records[end].spec.kind == first.spec.kind &&
           records[end].status.code() == first.status.code()) {
      ++end;
    }
    Account(records.subspan(begin, end - begin));
    begin = end;
  }
}

void WorkerMetrics::Account(std::span<const OpRecord> run) {
  const OpRecord& first = run.front();
  const std::string op(OpKindName(first.spec.kind));
  const bool ok = first.status.ok();
  const std::string status =
      ok ? "OK" : absl::StatusCodeToString(first.status.code());
  registry_.Add("ccl_ops_total",
                {{"op", op}, {"backend", backend_}, {"status", status}},
                static_cast<double>(run.size()));
  const MetricLabels labels = {{"op", op}, {"backend", backend_}};
  if (ok) {
    // A byte count only for ops that moved data; count*size is per rank, as
    // nccl-tests' "size" column.
    double bytes = 0;
    std::vector<double> latency, device;
    latency.reserve(run.size());
    device.reserve(run.size());
    for (const OpRecord& record : run) {
      bytes += static_cast<double>(record.count) *
               static_cast<double>(DTypeSize(record.dtype));
      latency.push_back(record.timing.total_us * 1e-6);
      device.push_back(record.timing.device_us * 1e-6);
    }
    registry_.Add("ccl_op_bytes_total", labels, bytes);
    registry_.ObserveEach("ccl_op_latency_seconds", labels, latency);
    registry_.ObserveEach("ccl_op_device_seconds", labels, device);
    if (!spdlog::should_log(spdlog::level::debug)) return;
  }
  for (const OpRecord& record : run) {
    ScopedLogOp scope(record.spec.group, record.spec.seq);
    if (ok) {
      spdlog::debug("{} done in {:.1f} us", op, record.timing.total_us);
    } else {
      spdlog::warn("{} failed: {}", op, record.status.ToString());
    }
  }
}

void WorkerMetrics::Watch(const WorkerCore* core) {
  std::lock_guard<std::mutex> lock(mutex_);
  core_ = core;
}

void WorkerMetrics::SetState(const std::string& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = state;
}

void WorkerMetrics::SetMembership(int rank, int world_size,
                                  int64_t generation) {
  registry_.Set("ccl_worker_rank", {}, rank);
  registry_.Set("ccl_worker_world_size", {}, world_size);
  registry_.Set("ccl_worker_generation", {}, static_cast<double>(generation));
}

void WorkerMetrics::HeartbeatSucceeded() {
  std::lock_guard<std::mutex> lock(mutex_);
  last_heartbeat_ = std::chrono::steady_clock::now();
  heartbeat_seen_ = true;
}

void WorkerMetrics::Collect(MetricsRegistry& registry) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const char* state : kStates) {
    registry.Set("ccl_worker_state", {{"state", state}},
                 state_ == state ? 1 : 0);
  }
  const auto since = heartbeat_seen_ ? last_heartbeat_ : start_;
  registry.Set(
      "ccl_heartbeat_age_seconds", {},
      std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
          .count());
  if (core_ == nullptr) return;
  registry.Set("ccl_tensors_held", {},
               static_cast<double>(core_->List().size()));
  registry.Set("ccl_tensor_bytes_held", {},
               static_cast<double>(core_->BytesInUse()));
  // Groups come and go (a new generation drops them): rebuilt each scrape.
  registry.ClearSeries("ccl_communicator_state");
  for (const GroupInfo& group : core_->Groups()) {
    if (group.group_rank < 0) continue;
    registry.Set("ccl_communicator_state",
                 {{"group", group.name},
                  {"backend", group.backend},
                  {"state", group.state}},
                 1);
  }
}

}  // namespace ccl
