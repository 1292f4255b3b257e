#include "common/metrics.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace ccl {
namespace {

bool ValidName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       c == '_' || c == ':';
    const bool digit = c >= '0' && c <= '9';
    if (!alpha && !(digit && i > 0)) return false;
  }
  return true;
}

// Go's strconv formatting is what Prometheus parses; %.17g round-trips and
// the special values have fixed spellings.
std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

std::string EscapeHelp(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// `labels` rendered with one more pair appended (histogram "le").
std::string WithLabel(const std::string& rendered, const std::string& name,
                      const std::string& value) {
  const std::string pair = absl::StrCat(name, "=\"", value, "\"");
  if (rendered.empty()) return absl::StrCat("{", pair, "}");
  return absl::StrCat(rendered.substr(0, rendered.size() - 1), ",", pair, "}");
}

const char* TypeName(MetricsRegistry::Type type) {
  switch (type) {
    case MetricsRegistry::Type::kCounter:
      return "counter";
    case MetricsRegistry::Type::kGauge:
      return "gauge";
    case MetricsRegistry::Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

}  // namespace

std::string RenderLabels(const MetricLabels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i > 0) out += ",";
    out += labels[i].first;
    out += "=\"";
    for (char c : labels[i].second) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '"') {
        out += "\\\"";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
    out += "\"";
  }
  out += "}";
  return out;
}

absl::Status MetricsRegistry::Declare(const std::string& name, Type type,
                                      const std::string& help,
                                      std::vector<double> buckets) {
  if (!ValidName(name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad metric name '", name, "'"));
  }
  if (type == Type::kHistogram) {
    if (buckets.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("histogram ", name, " needs buckets"));
    }
    for (size_t i = 1; i < buckets.size(); ++i) {
      if (!(buckets[i] > buckets[i - 1])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "histogram ", name, ": buckets must increase strictly"));
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (families_.count(name)) {
    return absl::AlreadyExistsError(
        absl::StrCat("metric ", name, " declared twice"));
  }
  Family& family = families_[name];
  family.type = type;
  family.help = help;
  family.buckets = std::move(buckets);
  return absl::OkStatus();
}

MetricsRegistry::Series* MetricsRegistry::FindSeries(const std::string& name,
                                                     const MetricLabels& labels,
                                                     Type type) {
  auto it = families_.find(name);
  if (it == families_.end() || it->second.type != type) return nullptr;
  Series& series = it->second.series[RenderLabels(labels)];
  if (type == Type::kHistogram && series.bucket_counts.empty()) {
    series.bucket_counts.assign(it->second.buckets.size(), 0);
  }
  return &series;
}

void MetricsRegistry::Add(const std::string& name, const MetricLabels& labels,
                          double delta) {
  std::lock_guard<std::mutex> lock(mutex_);
  // A counter only goes up; a gauge may take either sign.
  Series* series = FindSeries(name, labels, Type::kCounter);
  if (series != nullptr) {
    if (delta > 0) series->value += delta;
    return;
  }
  series = FindSeries(name, labels, Type::kGauge);
  if (series != nullptr) series->value += delta;
}

void MetricsRegistry::Set(const std::string& name, const MetricLabels& labels,
                          double value) {
  std::lock_guard<std::mutex> lock(mutex_);
  Series* series = FindSeries(name, labels, Type::kGauge);
  if (series != nullptr) series->value = value;
}

void MetricsRegistry::Observe(const std::string& name,
                              const MetricLabels& labels, double value) {
  ObserveEach(name, labels, std::span<const double>(&value, 1));
}

void MetricsRegistry::ObserveEach(const std::string& name,
                                  const MetricLabels& labels,
                                  std::span<const double> values) {
  std::lock_guard<std::mutex> lock(mutex_);
  Series* series = FindSeries(name, labels, Type::kHistogram);
  if (series == nullptr) return;
  const std::vector<double>& bounds = families_[name].buckets;
  for (const double value : values) {
    for (size_t i = 0; i < bounds.size(); ++i) {
      if (value <= bounds[i]) {
        ++series->bucket_counts[i];
        break;
      }
    }
    series->value += value;
    ++series->count;
  }
}

void MetricsRegistry::ClearSeries(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = families_.find(name);
  if (it != families_.end()) it->second.series.clear();
}

void MetricsRegistry::AddCollector(
    std::function<void(MetricsRegistry&)> collector) {
  std::lock_guard<std::mutex> lock(collectors_mutex_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() {
  {
    std::lock_guard<std::mutex> lock(collectors_mutex_);
    for (auto& collector : collectors_) collector(*this);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  for (const auto& [name, family] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(family.help), "\n");
    absl::StrAppend(&out, "# TYPE ", name, " ", TypeName(family.type), "\n");
    for (const auto& [labels, series] : family.series) {
      if (family.type != Type::kHistogram) {
        absl::StrAppend(&out, name, labels, " ", FormatValue(series.value),
                        "\n");
        continue;
      }
      uint64_t cumulative = 0;
      for (size_t i = 0; i < family.buckets.size(); ++i) {
        cumulative += series.bucket_counts[i];
        absl::StrAppend(&out, name, "_bucket",
                        WithLabel(labels, "le", FormatValue(family.buckets[i])),
                        " ", cumulative, "\n");
      }
      absl::StrAppend(&out, name, "_bucket", WithLabel(labels, "le", "+Inf"),
                      " ", series.count, "\n");
      absl::StrAppend(&out, name, "_sum", labels, " ",
                      FormatValue(series.value), "\n");
      absl::StrAppend(&out, name, "_count", labels, " ", series.count, "\n");
    }
  }
  return out;
}

std::vector<double> MetricsRegistry::LatencyBuckets() {
  return {1e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
          5e-2, 0.1,  0.25, 0.5,    1,    2.5,  5,      10,   30,   60};
}

}  // namespace ccl
