#include "client/ccctl/doctor_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/format.h"

namespace ccl::ctl::doctor {
namespace {

using nlohmann::json;

// Documents this code writes; a baseline from another version is refused.
constexpr int kSchemaVersion = 1;

std::map<std::pair<int, int>, const Cell*> CellMap(const Run& run) {
  std::map<std::pair<int, int>, const Cell*> cells;
  for (const Cell& cell : run.cells) cells[{cell.src, cell.dst}] = &cell;
  return cells;
}

std::string HostOf(const Run& run, int rank) {
  for (const Rank& r : run.ranks) {
    if (r.rank == rank) return r.host;
  }
  return "";
}

// Cells (src, dst) a finding blames: a rank's row and/or column, a link's
// two cells, a host's links to other hosts.
std::set<std::pair<int, int>> BlamedCells(const Run& run,
                                          const Finding& finding) {
  std::set<std::pair<int, int>> out;
  for (const Cell& cell : run.cells) {
    const std::pair<int, int> key{cell.src, cell.dst};
    switch (finding.blame) {
      case Blame::kRank: {
        const int r = finding.ranks[0];
        if ((cell.src == r && finding.direction != "recv") ||
            (cell.dst == r && finding.direction != "send")) {
          out.insert(key);
        }
        break;
      }
      case Blame::kLink: {
        const int a = finding.ranks[0], b = finding.ranks[1];
        if ((cell.src == a && cell.dst == b) ||
            (cell.src == b && cell.dst == a)) {
          out.insert(key);
        }
        break;
      }
      case Blame::kHost: {
        const bool src_in = HostOf(run, cell.src) == finding.host;
        const bool dst_in = HostOf(run, cell.dst) == finding.host;
        if (src_in != dst_in) out.insert(key);
        break;
      }
      case Blame::kCluster:
        out.insert(key);
        break;
    }
  }
  return out;
}

// The reference a cell's bandwidth is compared with: its class's median.
double ReferenceFor(const Run& run, const Cell& cell) {
  const bool within = HostOf(run, cell.src) == HostOf(run, cell.dst);
  const auto& reference = within ? run.verdict.intra_host_bandwidth_gbps
                                 : run.verdict.inter_host_bandwidth_gbps;
  return reference.value_or(0);
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Red (0.3 of the reference or less) through yellow to green (1 or more).
std::string Colour(double ratio) {
  const double t = std::clamp((ratio - 0.3) / 0.7, 0.0, 1.0);
  int r, g;
  if (t < 0.5) {
    r = 215;
    g = static_cast<int>(48 + (220 - 48) * (t / 0.5));
  } else {
    r = static_cast<int>(215 - (215 - 40) * ((t - 0.5) / 0.5));
    g = static_cast<int>(220 - (220 - 160) * ((t - 0.5) / 0.5));
  }
  return absl::StrFormat("#%02x%02x%02x", r, g, 60);
}

std::string Label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

}  // namespace

nlohmann::json ToJson(const Run& run) {
  json ranks = json::array();
  for (const Rank& r : run.ranks) {
    ranks.push_back({{"rank", r.rank}, {"host", r.host}});
  }
  json cells = json::array();
  for (const Cell& c : run.cells) {
    json cell = {{"src", c.src},
                 {"dst", c.dst},
                 {"bandwidth_gbps", c.bandwidth_gbps},
                 {"latency_us", c.latency_us},
                 {"wrong", c.wrong}};
    if (!c.error.empty()) cell["error"] = c.error;
    cells.push_back(cell);
  }
  json skew = json::array();
  for (const Skew& s : run.verdict.skew) {
    skew.push_back({{"rank", s.rank},
                    {"median_lateness_us", s.median_lateness_us},
                    {"median_time_us", s.median_time_us}});
  }
  json findings = json::array();
  for (const Finding& f : run.verdict.findings) {
    json finding = {{"blame", BlameName(f.blame)}, {"ranks", f.ranks},
                    {"metric", f.metric},          {"value", f.value},
                    {"reference", f.reference},    {"score", f.score},
                    {"evidence", f.evidence},      {"next_step", f.next_step}};
    if (!f.host.empty()) finding["host"] = f.host;
    if (!f.direction.empty()) finding["direction"] = f.direction;
    findings.push_back(finding);
  }
  json references = json::object();
  auto put = [&](const char* key, const std::optional<double>& value) {
    if (value) references[key] = *value;
  };
  put("intra_host_bandwidth_gbps", run.verdict.intra_host_bandwidth_gbps);
  put("inter_host_bandwidth_gbps", run.verdict.inter_host_bandwidth_gbps);
  put("intra_host_latency_us", run.verdict.intra_host_latency_us);
  put("inter_host_latency_us", run.verdict.inter_host_latency_us);
  json document = {
      {"schema", kSchemaVersion},
      {"group", run.group},
      {"generation", run.generation},
      {"ranks", ranks},
      {"bandwidth_bytes", run.bandwidth_bytes},
      {"latency_bytes", run.latency_bytes},
      {"iters", run.iters},
      {"latency_iters", run.latency_iters},
      {"skew_ops", run.skew_ops},
      {"skew_bytes", run.skew_bytes},
      {"thresholds",
       {{"bandwidth_tolerance", run.thresholds.bandwidth_tolerance},
        {"latency_tolerance", run.thresholds.latency_tolerance},
        {"sigmas", run.thresholds.sigmas},
        {"baseline_tolerance", run.thresholds.baseline_tolerance},
        {"arrival_share", run.thresholds.arrival_share}}},
      {"cells", cells},
      {"skew", skew},
      {"references", references},
      {"findings", findings},
      {"healthy", run.verdict.findings.empty()},
      {"search", run.search},
      {"rounds", run.rounds},
      {"remeasured_pairs", run.remeasured_pairs},
      {"elapsed_s", run.elapsed_s},
      {"finished_unix_s", run.finished_unix_s}};
  if (!run.simulated_hosts.empty()) {
    document["simulated_hosts"] = run.simulated_hosts;
  }
  if (!run.baseline_file.empty()) document["baseline"] = run.baseline_file;
  if (!run.skew_error.empty()) document["skew_error"] = run.skew_error;
  return document;
}

absl::StatusOr<std::vector<Cell>> BaselineCells(const nlohmann::json& saved,
                                                const Run& run) {
  try {
    if (saved.value("schema", 0) != kSchemaVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat("the baseline is not a ccctl doctor document of schema ",
                       kSchemaVersion, "; save one with --save-baseline"));
    }
    std::vector<int> then, now;
    for (const json& r : saved.at("ranks")) then.push_back(r.at("rank"));
    for (const Rank& r : run.ranks) now.push_back(r.rank);
    if (then != now) {
      return absl::FailedPreconditionError(
          absl::StrCat("the baseline has ranks [", absl::StrJoin(then, ", "),
                       "], this run [", absl::StrJoin(now, ", "),
                       "]: save a baseline of the same group"));
    }
    const int64_t bandwidth = saved.at("bandwidth_bytes");
    const int64_t latency = saved.at("latency_bytes");
    if (bandwidth != run.bandwidth_bytes || latency != run.latency_bytes) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the baseline measured ", bandwidth, " and ", latency,
          " bytes, this run ", run.bandwidth_bytes, " and ", run.latency_bytes,
          ": pass the baseline's --size and --latency-size"));
    }
    std::vector<Cell> cells;
    for (const json& c : saved.at("cells")) {
      Cell cell;
      cell.src = c.at("src");
      cell.dst = c.at("dst");
      cell.bandwidth_gbps = c.value("bandwidth_gbps", 0.0);
      cell.latency_us = c.value("latency_us", 0.0);
      cell.wrong = c.value("wrong", int64_t{0});
      cell.error = c.value("error", std::string());
      cells.push_back(std::move(cell));
    }
    return cells;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the baseline is not a ccctl doctor document: ", e.what()));
  }
}

std::string RenderTable(const Run& run) {
  std::string out;
  const int n = static_cast<int>(run.ranks.size());
  absl::StrAppend(&out, "# ccctl doctor: group ", run.group, ", generation ",
                  run.generation, ", ", n, " ranks on ",
                  std::set<std::string>([&] {
                    std::set<std::string> hosts;
                    for (const Rank& r : run.ranks) hosts.insert(r.host);
                    return hosts;
                  }())
                      .size(),
                  " hosts, ", run.cells.size(), " directed pairs in ",
                  run.rounds, " rounds",
                  run.search == "bisect" ? " (a search, --bisect)" : "",
                  absl::StrFormat(" in %.1f s\n", run.elapsed_s));
  if (!run.simulated_hosts.empty()) {
    absl::StrAppend(&out, "# ", run.simulated_hosts, "\n");
  }
  const auto cells = CellMap(run);
  if (n <= kMostTableRanks) {
    for (int metric = 0; metric < 2; ++metric) {
      absl::StrAppend(&out, "\n",
                      metric == 0
                          ? absl::StrCat("bandwidth (GB/s) at ",
                                         FormatBytes(run.bandwidth_bytes),
                                         ", row sends to column")
                          : absl::StrCat("latency (us) at ",
                                         FormatBytes(run.latency_bytes)),
                      "\n");
      absl::StrAppend(&out, absl::StrFormat("%8s", "src\\dst"));
      for (const Rank& d : run.ranks) {
        absl::StrAppend(&out, absl::StrFormat(" %7d", d.rank));
      }
      absl::StrAppend(&out, "\n");
      for (const Rank& s : run.ranks) {
        absl::StrAppend(&out, absl::StrFormat("%8d", s.rank));
        for (const Rank& d : run.ranks) {
          auto it = cells.find({s.rank, d.rank});
          // "-": a rank with itself; ".": a pair a search did not measure.
          std::string text = s.rank == d.rank ? "-" : ".";
          if (it != cells.end()) {
            const Cell& c = *it->second;
            text = c.broken()    ? (c.wrong > 0 ? "WRONG" : "FAIL")
                   : metric == 0 ? absl::StrFormat("%.2f", c.bandwidth_gbps)
                                 : absl::StrFormat("%.1f", c.latency_us);
          }
          absl::StrAppend(&out, absl::StrFormat(" %7s", text));
        }
        absl::StrAppend(&out, "  ", s.host, "\n");
      }
    }
  }
  const Verdict& v = run.verdict;
  std::vector<std::string> references;
  auto line = [&](const char* what, const std::optional<double>& value,
                  const char* unit) {
    if (value) {
      references.push_back(absl::StrFormat("%s %.3g%s", what, *value, unit));
    }
  };
  line("bandwidth within hosts", v.intra_host_bandwidth_gbps, " GB/s");
  line("bandwidth between hosts", v.inter_host_bandwidth_gbps, " GB/s");
  line("latency within hosts", v.intra_host_latency_us, " us");
  line("latency between hosts", v.inter_host_latency_us, " us");
  absl::StrAppend(&out, "\nreferences (medians of comparable pairs): ",
                  absl::StrJoin(references, "; "), "\n");
  if (!v.skew.empty()) {
    absl::StrAppend(&out,
                    "all_reduce arrival, median lateness after the "
                    "first rank (us):");
    for (const Skew& s : v.skew) {
      absl::StrAppend(
          &out, absl::StrFormat(" %d:%.0f", s.rank, s.median_lateness_us));
    }
    absl::StrAppend(&out, "\n");
  } else if (!run.skew_error.empty()) {
    absl::StrAppend(&out, "all_reduce arrival not measured: ", run.skew_error,
                    "\n");
  }
  if (!run.baseline_file.empty()) {
    absl::StrAppend(&out, "judged against the baseline ", run.baseline_file,
                    "\n");
  }
  if (run.remeasured_pairs > 0) {
    absl::StrAppend(&out, "confirmed: ", run.remeasured_pairs,
                    " suspect pairs measured again, each keeping its better "
                    "figure\n");
  }
  if (v.findings.empty()) {
    absl::StrAppend(&out, "\nhealthy: no rank, link or host stands out\n");
    return out;
  }
  absl::StrAppend(&out, "\n", v.findings.size(), " finding",
                  v.findings.size() == 1 ? "" : "s", ", worst first:\n");
  int index = 0;
  for (const Finding& f : v.findings) {
    std::string what;
    switch (f.blame) {
      case Blame::kRank:
        what = absl::StrCat("rank ", f.ranks[0], " (", f.host, ")");
        break;
      case Blame::kLink:
        what = absl::StrCat("link ", f.ranks[0], " <-> ", f.ranks[1], " (",
                            f.host, ")");
        break;
      case Blame::kHost:
        what = absl::StrCat("host ", f.host, " (ranks ",
                            absl::StrJoin(f.ranks, ", "), ")");
        break;
      case Blame::kCluster:
        what = "the whole group";
        break;
    }
    absl::StrAppend(
        &out,
        absl::StrFormat(
            "%d. %s: %s%s\n   %s\n   next: %s\n", ++index, what, f.metric,
            f.direction.empty() ? "" : absl::StrCat(" (", f.direction, ")"),
            f.evidence, f.next_step));
  }
  return out;
}

std::string RenderSvg(const Run& run) {
  const int n = static_cast<int>(run.ranks.size());
  const int cell = n <= 16 ? 44 : std::max(8, 700 / std::max(n, 1));
  const int left = 120, top = 90, legend = 60;
  const int width = std::max(900, left + n * cell + 40);
  const int height = top + n * cell + legend + 30 +
                     18 * static_cast<int>(run.verdict.findings.size());
  const auto cells = CellMap(run);
  std::set<std::pair<int, int>> blamed;
  for (const Finding& f : run.verdict.findings) {
    for (const auto& key : BlamedCells(run, f)) blamed.insert(key);
  }
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      width, height);
  absl::StrAppend(
      &svg,
      absl::StrFormat(
          "<text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">"
          "ccctl doctor: %s, generation %d, %d ranks: bandwidth at %s, row "
          "sends to column</text>\n",
          Escape(run.group), run.generation, n,
          Escape(FormatBytes(run.bandwidth_bytes))));
  if (!run.simulated_hosts.empty()) {
    absl::StrAppend(&svg,
                    absl::StrFormat("<text x=\"10\" y=\"40\" fill=\"#a04000\">"
                                    "%s</text>\n",
                                    Escape(run.simulated_hosts)));
  }
  for (int i = 0; i < n; ++i) {
    const Rank& r = run.ranks[i];
    // Column labels (destination) and row labels (source, with the host).
    absl::StrAppend(
        &svg, absl::StrFormat("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">"
                              "%d</text>\n",
                              left + i * cell + cell / 2, top - 8, r.rank));
    absl::StrAppend(
        &svg, absl::StrFormat("<text x=\"%d\" y=\"%d\" text-anchor=\"end\">"
                              "%d %s</text>\n",
                              left - 6, top + i * cell + cell / 2 + 4, r.rank,
                              Escape(r.host.substr(0, 14))));
  }
  absl::StrAppend(
      &svg, absl::StrFormat("<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">"
                            "to rank</text>\n",
                            left + n * cell / 2, top - 26));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const int x = left + j * cell, y = top + i * cell;
      const int src = run.ranks[i].rank, dst = run.ranks[j].rank;
      auto it = cells.find({src, dst});
      std::string fill = "#e0e0e0", text;
      std::string title = absl::StrCat(src, " -> ", dst);
      if (it != cells.end()) {
        const Cell& c = *it->second;
        if (c.broken()) {
          fill = "#404040";
          text = c.wrong > 0 ? "WRONG" : "FAIL";
          absl::StrAppend(&title, ": ", c.wrong > 0 ? "wrong bytes" : c.error);
        } else {
          const double reference = ReferenceFor(run, c);
          fill = Colour(reference > 0 ? c.bandwidth_gbps / reference : 1);
          text = absl::StrFormat("%.3g", c.bandwidth_gbps);
          absl::StrAppend(
              &title, absl::StrFormat(": %.3g GB/s, %.1f us", c.bandwidth_gbps,
                                      c.latency_us));
        }
      }
      const bool marked = blamed.count({src, dst}) > 0;
      absl::StrAppend(
          &svg,
          absl::StrFormat("<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                          "fill=\"%s\" stroke=\"%s\" stroke-width=\"%d\">"
                          "<title>%s</title></rect>\n",
                          x + 1, y + 1, cell - 2, cell - 2, fill,
                          marked ? "#000000" : "#ffffff", marked ? 3 : 1,
                          Escape(title)));
      if (!text.empty() && cell >= 36) {
        absl::StrAppend(
            &svg, absl::StrFormat("<text x=\"%d\" y=\"%d\" text-anchor=\"middle"
                                  "\" font-size=\"11\">%s</text>\n",
                                  x + cell / 2, y + cell / 2 + 4, text));
      }
    }
  }
  // The legend: the colour scale as ratios to the class's median.
  const int ly = top + n * cell + 20;
  for (int k = 0; k <= 7; ++k) {
    const double ratio = 0.3 + 0.1 * k;
    absl::StrAppend(&svg,
                    absl::StrFormat("<rect x=\"%d\" y=\"%d\" width=\"30\" "
                                    "height=\"14\" fill=\"%s\"/>"
                                    "<text x=\"%d\" y=\"%d\" font-size=\"10\" "
                                    "text-anchor=\"middle\">%.1f</text>\n",
                                    left + k * 32, ly, Colour(ratio),
                                    left + k * 32 + 15, ly + 26, ratio));
  }
  absl::StrAppend(
      &svg, absl::StrFormat("<text x=\"%d\" y=\"%d\" font-size=\"11\">x the "
                            "median of comparable links; outlined: blamed "
                            "by a finding</text>\n",
                            left + 8 * 32 + 8, ly + 11));
  int fy = ly + legend;
  if (run.verdict.findings.empty()) {
    absl::StrAppend(&svg,
                    absl::StrFormat("<text x=\"10\" y=\"%d\" fill=\"#206020\">"
                                    "healthy: no rank, link or host stands "
                                    "out</text>\n",
                                    fy));
  }
  int index = 0;
  for (const Finding& f : run.verdict.findings) {
    absl::StrAppend(
        &svg, absl::StrFormat(
                  "<text x=\"10\" y=\"%d\" fill=\"#a00000\">%d. %s %s (%s): "
                  "%s</text>\n",
                  fy, ++index, BlameName(f.blame),
                  f.blame == Blame::kHost ? Escape(f.host)
                                          : absl::StrJoin(f.ranks, " <-> "),
                  Escape(f.metric), Escape(f.evidence.substr(0, 120))));
    fy += 18;
  }
  absl::StrAppend(&svg, "</svg>\n");
  return svg;
}

std::string RenderPrometheus(const Run& run) {
  std::string out;
  const std::string group = Label(run.group);
  auto gauge = [&](const char* name, const char* help) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name,
                    " gauge\n");
  };
  auto pair_labels = [&](const Cell& c) {
    return absl::StrCat("group=\"", group, "\",src=\"", c.src, "\",dst=\"",
                        c.dst, "\",src_host=\"", Label(HostOf(run, c.src)),
                        "\",dst_host=\"", Label(HostOf(run, c.dst)), "\"");
  };
  gauge("ccl_doctor_bandwidth_gbps",
        "Point-to-point bandwidth from src to dst in the last ccctl doctor "
        "run (GB/s).");
  for (const Cell& c : run.cells) {
    if (c.broken()) continue;
    absl::StrAppend(&out, "ccl_doctor_bandwidth_gbps{", pair_labels(c), "} ",
                    c.bandwidth_gbps, "\n");
  }
  gauge("ccl_doctor_latency_us",
        "Point-to-point latency from src to dst at the small size in the "
        "last ccctl doctor run (microseconds).");
  for (const Cell& c : run.cells) {
    if (c.broken()) continue;
    absl::StrAppend(&out, "ccl_doctor_latency_us{", pair_labels(c), "} ",
                    c.latency_us, "\n");
  }
  gauge("ccl_doctor_pair_failed",
        "1 if the pair failed or delivered wrong bytes in the last run.");
  for (const Cell& c : run.cells) {
    absl::StrAppend(&out, "ccl_doctor_pair_failed{", pair_labels(c), "} ",
                    c.broken() ? 1 : 0, "\n");
  }
  gauge("ccl_doctor_arrival_lateness_us",
        "A rank's median lateness in the doctor's all_reduces.");
  for (const Skew& s : run.verdict.skew) {
    absl::StrAppend(&out, "ccl_doctor_arrival_lateness_us{group=\"", group,
                    "\",rank=\"", s.rank, "\",host=\"",
                    Label(HostOf(run, s.rank)), "\"} ", s.median_lateness_us,
                    "\n");
  }
  gauge("ccl_doctor_finding_score",
        "Each finding of the last run: how far from normal (1 normal, 0 "
        "broken).");
  for (const Finding& f : run.verdict.findings) {
    absl::StrAppend(&out, "ccl_doctor_finding_score{group=\"", group,
                    "\",blame=\"", BlameName(f.blame), "\",ranks=\"",
                    absl::StrJoin(f.ranks, ","), "\",host=\"", Label(f.host),
                    "\",metric=\"", Label(f.metric), "\"} ", f.score, "\n");
  }
  gauge("ccl_doctor_findings", "Findings of the last run (0: healthy).");
  absl::StrAppend(&out, "ccl_doctor_findings{group=\"", group, "\"} ",
                  run.verdict.findings.size(), "\n");
  gauge("ccl_doctor_duration_seconds", "How long the last run took.");
  absl::StrAppend(&out, "ccl_doctor_duration_seconds{group=\"", group, "\"} ",
                  run.elapsed_s, "\n");
  gauge("ccl_doctor_last_run_timestamp_seconds",
        "When the last run finished (Unix time).");
  absl::StrAppend(&out, "ccl_doctor_last_run_timestamp_seconds{group=\"", group,
                  "\"} ", run.finished_unix_s, "\n");
  return out;
}

}  // namespace ccl::ctl::doctor
