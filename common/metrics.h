// A small Prometheus metrics registry: counters, gauges and histograms with
// fixed buckets, rendered in the text exposition format 0.0.4. Debian 12
// ships no prometheus-cpp; this covers what the daemons export and nothing
// more. Thread-safe; updates take one mutex, which is fine at control-plane
// rates (one update per op, not per byte).
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace ccl {

// Label name/value pairs, in the order they are rendered.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  enum class Type { kCounter, kGauge, kHistogram };

  // Declares a family once, before it is updated. INVALID_ARGUMENT for a bad
  // name, ALREADY_EXISTS for a name declared before; histograms need
  // strictly increasing `buckets` (upper bounds; +Inf is implied).
  absl::Status Declare(const std::string& name, Type type,
                       const std::string& help,
                       std::vector<double> buckets = {});

  // Updates of an undeclared family are dropped (a wrong name is a bug
  // caught by the tests, not a reason to fail an op).
  void Add(const std::string& name, const MetricLabels& labels, double delta);
  void Set(const std::string& name, const MetricLabels& labels, double value);
  void Observe(const std::string& name, const MetricLabels& labels,
               double value);
  // Observe of each of `values`, looking the series up once (a plan's ops).
  void ObserveEach(const std::string& name, const MetricLabels& labels,
                   std::span<const double> values);
  // Drops every series of a gauge family (for state-style gauges that are
  // rebuilt on each scrape).
  void ClearSeries(const std::string& name);

  // Runs before each Render, outside the registry's lock, so that gauges of
  // live state (tensors held, heartbeat age) are read at scrape time.
  void AddCollector(std::function<void(MetricsRegistry&)> collector);

  std::string Render();

  // Latency buckets in seconds, from 10us to 60s.
  static std::vector<double> LatencyBuckets();

 private:
  struct Series {
    double value = 0;                     // counter, gauge; histogram sum
    uint64_t count = 0;                   // histogram
    std::vector<uint64_t> bucket_counts;  // histogram, not cumulative
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::vector<double> buckets;
    std::map<std::string, Series> series;  // key: rendered label set
  };

  Series* FindSeries(const std::string& name, const MetricLabels& labels,
                     Type type);

  std::mutex mutex_;
  std::map<std::string, Family> families_;
  std::mutex collectors_mutex_;
  std::vector<std::function<void(MetricsRegistry&)>> collectors_;
};

// Renders `{a="x",b="y"}` with the format's escapes; empty labels give "".
std::string RenderLabels(const MetricLabels& labels);

}  // namespace ccl
