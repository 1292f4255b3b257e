// ccctl doctor's outputs from one run: the JSON document (also the
// baseline file), the terminal table, the heatmap as SVG and the figures as
// Prometheus gauges. Plain logic, unit-tested without a cluster.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ccctl/doctor_judge.h"
#include "nlohmann/json.hpp"

namespace ccl::ctl::doctor {

// What one run measured and concluded.
struct Run {
  std::string group = "world";
  int64_t generation = 0;
  std::vector<Rank> ranks;
  int64_t bandwidth_bytes = 0;
  int64_t latency_bytes = 0;
  int iters = 0;
  int latency_iters = 0;
  int skew_ops = 0;
  int64_t skew_bytes = 0;
  std::vector<Cell> cells;
  Verdict verdict;
  Thresholds thresholds;
  double elapsed_s = 0;
  int64_t finished_unix_s = 0;
  // Set when the ranks time-share one GPU as simulated hosts: the figures
  // then say whether the paths work, not how fast the hardware is.
  std::string simulated_hosts;
  std::string baseline_file;  // the run was judged against it
  std::string skew_error;     // why the skew was not measured
  // "matrix" (every pair) or "bisect" (a search from sampled rounds).
  std::string search = "matrix";
  int rounds = 0;  // rounds of pairs measured
  // Pairs measured after the first verdict, to confirm or narrow it.
  int remeasured_pairs = 0;
};

// The document of `ccctl doctor -o json` (docs/doctor.md has the schema);
// --save-baseline writes the same document.
nlohmann::json ToJson(const Run& run);

// The cells of a saved document, checked against this run's ranks and
// sizes: a baseline of other ranks or sizes is no baseline.
absl::StatusOr<std::vector<Cell>> BaselineCells(const nlohmann::json& saved,
                                                const Run& run);

// The matrix (up to kMostTableRanks ranks), the references and findings.
inline constexpr int kMostTableRanks = 16;
std::string RenderTable(const Run& run);

// The bandwidth matrix as a heatmap: each cell coloured by its ratio to
// its class's reference, the cells a finding blames outlined.
std::string RenderSvg(const Run& run);

// Text exposition format, for node_exporter's textfile collector (or any
// scraper of a file): every cell, every finding and the run's time.
std::string RenderPrometheus(const Run& run);

}  // namespace ccl::ctl::doctor
