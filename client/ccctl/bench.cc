// ccctl bench: nccl-tests' flags and table, timed on the workers so that
// RPC cost stays out of the figure; --e2e adds the time a client sees.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ccctl/bench_ops.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/format.h"
#include "common/status_macros.h"

namespace ccl::ctl {
namespace {

struct BenchArgs {
  std::string op_name = "all_reduce";
  std::string min_bytes = "32M", max_bytes = "32M", step_bytes;
  double factor = 0;
  int iters = 20, warmup = 5, root = -1, check = 0;
  // nccl-tests' -G: the timed loop captured in a CUDA graph, launched this
  // many times (0: no graph).
  int graph_launches = 0;
  std::string dtype = "float32", reduce = "sum", csv, plot;
  bool e2e = false;
};

struct Row {
  int64_t bytes = 0, count = 0;
  double time_us[2] = {0, 0}, algbw[2] = {0, 0}, busbw[2] = {0, 0};
  int64_t wrong[2] = {0, 0};
  // Client-seen time per op: the mean, and the median and 99th percentile
  // of the single ops (one slow op moves the mean, not the median).
  double e2e_us = 0, e2e_p50_us = 0, e2e_p99_us = 0;
  // Where a client-seen op's time goes, medians over the ops of the slowest
  // rank's accept-to-completion (total), waiting behind earlier ops (queue)
  // and moving data (device); the rest is RPC and client.
  double worker_total_p50_us = 0, worker_queue_p50_us = 0,
         worker_device_p50_us = 0;
  // The same ops as one plan (one request per rank): client time per op,
  // the median of kPlanRounds plans after an untimed one.
  double e2e_plan_us = 0;
  bool plan_emulated = false;
  // The fastest and slowest single instance (out of place) on any rank, as
  // the backend timed it (CUDA events on GPU).
  double op_min_us = 0, op_max_us = 0;
};

constexpr int kPlanRounds = 5;

// Draws busbw against size with Debian's python3-matplotlib; the script
// travels inside ccctl so that no install path has to be found.
constexpr char kPlotScript[] = R"PY(
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(sys.stdin))
sizes = [int(r["size"]) for r in rows]
fig, ax = plt.subplots(figsize=(8, 4.5))
ax.plot(sizes, [float(r["busbw"]) for r in rows], "o-", label="out-of-place")
ax.plot(sizes, [float(r["ip_busbw"]) for r in rows], "s--", label="in-place")
ax.set_xscale("log", base=2)
ax.set_xlabel("size (bytes)")
ax.set_ylabel("busbw (GB/s)")
ax.set_title("ccctl bench %s, %s ranks" % (rows[0]["op"], sys.argv[2]) if rows else "ccctl bench")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[1], dpi=120)
)PY";

// The nearest-rank percentile `q` (0..1] of `values`.
double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

// Prints each rank whose plan failed, or any of whose steps did (the first
// failed step of each such rank); true if any.
bool ReportPlanErrors(const RankResults<PlanResult>& planned) {
  bool failed = ReportRankErrors(planned);
  for (const auto& r : planned) {
    if (!r.result.ok()) continue;
    for (const WorkStatus& step : r.result->steps) {
      if (!step.error.ok()) {
        std::cerr << "ccctl: rank " << r.rank
                  << ": plan: " << StatusText(step.error) << "\n";
        failed = true;
        break;
      }
    }
  }
  return failed;
}

absl::Status Plot(const std::string& csv_text, const std::string& png,
                  int ranks) {
  char script_path[] = "/tmp/ccctl-plot-XXXXXX";
  const int fd = mkstemp(script_path);
  if (fd < 0)
    return absl::InternalError("cannot create a temporary file for the plot");
  const ssize_t written = write(fd, kPlotScript, sizeof(kPlotScript) - 1);
  close(fd);
  if (written != static_cast<ssize_t>(sizeof(kPlotScript) - 1)) {
    unlink(script_path);
    return absl::InternalError("cannot write the plot script");
  }
  // Debian's interpreter first: that is where python3-matplotlib installs.
  const char* python =
      access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
  const std::string command =
      absl::StrCat(python, " ", script_path, " '", png, "' ", ranks);
  FILE* pipe = popen(command.c_str(), "w");
  if (pipe == nullptr) {
    unlink(script_path);
    return absl::UnavailableError("cannot run python3 for --plot");
  }
  fwrite(csv_text.data(), 1, csv_text.size(), pipe);
  const int status = pclose(pipe);
  unlink(script_path);
  if (status != 0) {
    return absl::UnavailableError(
        absl::StrCat("drawing ", png,
                     " failed; --plot needs python3 with matplotlib "
                     "(Debian: python3-matplotlib)"));
  }
  return absl::OkStatus();
}

// The sizes, op and element type of a sweep, from the flags.
struct Sweep {
  const BenchOp* op = nullptr;
  int64_t min_bytes = 0, max_bytes = 0, step = 0;
  double factor = 0;
  DType dtype = DType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;

  int64_t Next(int64_t bytes) const {
    return factor > 0 ? static_cast<int64_t>(bytes * factor) : bytes + step;
  }
  bool OneSize() const { return factor <= 0 && step <= 0; }
};

// INVALID_ARGUMENT (a usage error) for flags that make no sweep.
absl::StatusOr<Sweep> ParseSweep(const BenchArgs& args) {
  Sweep sweep;
  sweep.op = FindBenchOp(args.op_name);
  if (!sweep.op) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown bench op '", args.op_name,
                     "'; expected all_reduce, all_gather, reduce_scatter, "
                     "broadcast, reduce, alltoall, gather, scatter, sendrecv"));
  }
  CCL_ASSIGN_OR_RETURN(sweep.min_bytes, ParseSize(args.min_bytes));
  CCL_ASSIGN_OR_RETURN(sweep.max_bytes, ParseSize(args.max_bytes));
  CCL_ASSIGN_OR_RETURN(sweep.dtype, ParseDType(args.dtype));
  CCL_ASSIGN_OR_RETURN(sweep.reduce, ParseReduceOp(args.reduce));
  if (!args.step_bytes.empty()) {
    CCL_ASSIGN_OR_RETURN(sweep.step, ParseSize(args.step_bytes));
  }
  sweep.factor = args.factor > 0 ? args.factor : (sweep.step > 0 ? 0 : 2);
  if (sweep.min_bytes < 1 || sweep.max_bytes < sweep.min_bytes ||
      (sweep.factor > 0 && sweep.factor <= 1)) {
    return absl::InvalidArgumentError(
        "need 1 <= -b <= -e and a factor -f > 1 (or an increment -i)");
  }
  if (args.iters < 1 || args.warmup < 0 || args.graph_launches < 0) {
    return absl::InvalidArgumentError("-n must be >= 1, -w and -G >= 0");
  }
  return sweep;
}

// The group a sweep runs on and the temporaries it runs on there.
struct BenchTarget {
  ClusterClient& client;
  std::vector<int> members;
  int n = 0;
  std::string in_name, out_name;

  // Both names on every member, whatever was allocated where: after a
  // partial failure some ranks hold one or both, the rest answer NOT_FOUND.
  bool FreeAll() {
    return FreeTemporaries(client, {{in_name, members}, {out_name, members}});
  }
  // On each worker's own device; zeros.
  absl::Status Alloc(const std::string& name, DType dtype, int64_t numel) {
    for (const auto& r :
         client.Alloc(members, TensorSpec{name, dtype, {numel}})) {
      if (!r.result.ok()) return r.result.status();
    }
    return absl::OkStatus();
  }
};

// Out of place, then in place, each as one worker-timed bench per rank:
// the row's times, bandwidths and wrong counts. False after reporting a
// rank's error.
bool MeasureOnWorkers(BenchTarget& target, const BenchArgs& args,
                      const Sweep& sweep, int64_t in_count, int64_t out_count,
                      Row& row) {
  const BenchOp& op = *sweep.op;
  for (int in_place = 0; in_place < 2; ++in_place) {
    auto results = target.client.Bench([&](int rank) {
      BenchSpec spec;
      spec.iters = args.iters;
      spec.graph_launches = args.graph_launches;
      spec.warmup_iters = args.warmup;
      spec.check = args.check != 0;
      Op& o = spec.op;
      o.kind = op.kind;
      o.reduce = sweep.reduce;
      o.root = args.root;
      // In place follows nccl-tests: the large buffer is the only one.
      const bool grows = out_count > in_count;
      if (op.kind == OpKind::kSend) {
        const int first = target.members[0];
        const int second = target.members[1];
        o.kind = rank == first    ? OpKind::kSend
                 : rank == second ? OpKind::kRecv
                                  : OpKind::kNop;
        o.peer = rank == first ? second : first;
        o.input = rank == first ? target.in_name : target.out_name;
      } else if (in_place) {
        o.input = grows ? target.out_name : target.in_name;
      } else {
        o.input = target.in_name;
        o.output = target.out_name;
      }
      return spec;
    });
    if (ReportRankErrors(results)) return false;
    double slowest = 0;
    for (const auto& r : results) {
      slowest = std::max(slowest, r.result->time_us > 0 ? r.result->time_us
                                                        : r.result->avg_us);
      row.wrong[in_place] += r.result->wrong;
      if (in_place == 0) {
        row.op_min_us = row.op_min_us == 0
                            ? r.result->min_us
                            : std::min(row.op_min_us, r.result->min_us);
        row.op_max_us = std::max(row.op_max_us, r.result->max_us);
      }
    }
    row.time_us[in_place] = slowest;
    row.algbw[in_place] = slowest > 0 ? row.bytes / slowest / 1e3 : 0;
    row.busbw[in_place] = row.algbw[in_place] * op.bus_factor(target.n);
  }
  return true;
}

// --e2e, the client's view: sync ops one after another, RPCs included, and
// the same ops as one plan. False after reporting a rank's error.
bool MeasureAsClient(BenchTarget& target, const BenchArgs& args,
                     const Sweep& sweep, Row& row) {
  Op o;
  o.kind = sweep.op->kind;
  o.reduce = sweep.reduce;
  o.root = args.root;
  o.input = target.in_name;
  o.output = target.out_name;
  std::vector<double> times_us, total_us, queue_us, device_us;
  times_us.reserve(args.iters);
  for (int i = 0; i < args.iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const auto results = target.client.Collective(o);
    const auto end = std::chrono::steady_clock::now();
    if (ReportRankErrors(results)) return false;
    times_us.push_back(
        std::chrono::duration<double, std::micro>(end - start).count());
    OpTiming slowest;
    for (const auto& r : results) {
      const OpTiming& t = r.result->timing;
      if (t.total_us >= slowest.total_us) slowest = t;
    }
    total_us.push_back(slowest.total_us);
    queue_us.push_back(slowest.queue_us);
    device_us.push_back(slowest.device_us);
  }
  row.worker_total_p50_us = Percentile(total_us, 0.5);
  row.worker_queue_p50_us = Percentile(queue_us, 0.5);
  row.worker_device_p50_us = Percentile(device_us, 0.5);
  row.e2e_us =
      std::accumulate(times_us.begin(), times_us.end(), 0.0) / args.iters;
  // The same ops in one request per rank: what a scripted sweep pays.
  // One plan is one sample, and the first of its length also pays what
  // only a first one does (the workers' and the client's buffers of a
  // plan's length, their first touches): it runs untimed, and the
  // median of the next kPlanRounds is the figure.
  Plan plan;
  plan.steps.assign(args.iters, PlanStep::Collective(o));
  std::vector<double> plan_us;
  for (int round = 0; round <= kPlanRounds; ++round) {
    const auto plan_start = std::chrono::steady_clock::now();
    const auto planned = target.client.SubmitPlan(plan);
    const auto plan_end = std::chrono::steady_clock::now();
    if (ReportPlanErrors(planned)) return false;
    for (const auto& r : planned) {
      row.plan_emulated = row.plan_emulated || r.result->emulated;
    }
    if (round > 0) {
      plan_us.push_back(
          std::chrono::duration<double, std::micro>(plan_end - plan_start)
              .count() /
          args.iters);
    }
  }
  row.e2e_plan_us = Percentile(plan_us, 0.5);
  row.e2e_p50_us = Percentile(times_us, 0.5);
  row.e2e_p99_us = Percentile(times_us, 0.99);
  return true;
}

// What every output names besides the rows.
struct BenchHeader {
  const BenchOp* op = nullptr;
  int ranks = 0;
  std::string type_name, redop;
  int root = -1;
  std::string shared_gpu;
  double avg_busbw = 0;
  int64_t wrong_total = 0;
};

BenchHeader HeaderOf(const Sweep& sweep, const BenchArgs& args, int ranks,
                     const std::string& shared_gpu,
                     const std::vector<Row>& rows) {
  BenchHeader header;
  header.op = sweep.op;
  header.ranks = ranks;
  header.type_name = std::string(DTypeName(sweep.dtype));
  header.redop = IsReduction(sweep.op->kind)
                     ? std::string(ReduceOpName(sweep.reduce))
                     : "none";
  header.root = HasRoot(sweep.op->kind) ? args.root : -1;
  header.shared_gpu = shared_gpu;
  double busbw_sum = 0;
  for (const Row& row : rows) {
    busbw_sum += row.busbw[0] + row.busbw[1];
    header.wrong_total += row.wrong[0] + row.wrong[1];
  }
  header.avg_busbw = rows.empty() ? 0 : busbw_sum / (2.0 * rows.size());
  return header;
}

std::string CsvOf(const BenchHeader& h, const std::vector<Row>& rows) {
  std::string csv_text =
      "op,size,count,type,redop,root,time_us,algbw,busbw,wrong,"
      "ip_time_us,ip_algbw,ip_busbw,ip_wrong,e2e_us,op_min_us,op_max_us,"
      "e2e_p50_us,e2e_p99_us,worker_total_p50_us,worker_queue_p50_us,"
      "worker_device_p50_us,e2e_plan_us\n";
  for (const Row& r : rows) {
    csv_text += absl::StrFormat(
        "%s,%d,%d,%s,%s,%d,%.2f,%.3f,%.3f,%d,%.2f,%.3f,%.3f,%d,%.2f,%.2f,%."
        "2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f\n",
        h.op->name, r.bytes, r.count, h.type_name, h.redop, h.root,
        r.time_us[0], r.algbw[0], r.busbw[0], r.wrong[0], r.time_us[1],
        r.algbw[1], r.busbw[1], r.wrong[1], r.e2e_us, r.op_min_us, r.op_max_us,
        r.e2e_p50_us, r.e2e_p99_us, r.worker_total_p50_us,
        r.worker_queue_p50_us, r.worker_device_p50_us, r.e2e_plan_us);
  }
  return csv_text;
}

nlohmann::json JsonOf(const BenchHeader& h, const BenchArgs& args,
                      const std::vector<Row>& rows) {
  nlohmann::json document = {{"op", h.op->name},     {"ranks", h.ranks},
                             {"type", h.type_name},  {"redop", h.redop},
                             {"root", h.root},       {"iters", args.iters},
                             {"warmup", args.warmup}};
  // Keys beyond the ones the Python client's bench() shares only when the
  // options that give them are used, so the two documents stay alike.
  if (!h.shared_gpu.empty()) document["simulated_hosts"] = h.shared_gpu;
  if (args.graph_launches > 0) {
    document["graph_launches"] = args.graph_launches;
  }
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json row = {{"size", r.bytes},
                          {"count", r.count},
                          {"time_us", r.time_us[0]},
                          {"algbw", r.algbw[0]},
                          {"busbw", r.busbw[0]},
                          {"wrong", r.wrong[0]},
                          {"in_place",
                           {{"time_us", r.time_us[1]},
                            {"algbw", r.algbw[1]},
                            {"busbw", r.busbw[1]},
                            {"wrong", r.wrong[1]}}},
                          {"e2e_us", r.e2e_us},
                          {"op_min_us", r.op_min_us},
                          {"op_max_us", r.op_max_us}};
    if (args.e2e) {
      row["e2e_p50_us"] = r.e2e_p50_us;
      row["e2e_p99_us"] = r.e2e_p99_us;
      row["worker_total_p50_us"] = r.worker_total_p50_us;
      row["worker_queue_p50_us"] = r.worker_queue_p50_us;
      row["worker_device_p50_us"] = r.worker_device_p50_us;
      row["e2e_plan_us"] = r.e2e_plan_us;
      row["plan_emulated"] = r.plan_emulated;
    }
    out.push_back(row);
  }
  document["rows"] = out;
  document["avg_busbw"] = h.avg_busbw;
  return document;
}

// nccl-tests' table, its header and its closing lines.
void PrintTable(const BenchHeader& h, const BenchArgs& args,
                const std::vector<Row>& rows) {
  std::cout << absl::StrFormat(
      "# ccctl bench %s: %d ranks, %d iters, %d warmup, timed on the "
      "workers%s\n",
      h.op->name, h.ranks, args.iters, args.warmup,
      args.graph_launches > 0 ? absl::StrCat(", in a CUDA graph launched ",
                                             args.graph_launches, " times")
                              : "");
  if (!h.shared_gpu.empty()) std::cout << "# " << h.shared_gpu << "\n";
  std::cout << absl::StrFormat("#%77s%34s%s\n", "out-of-place", "in-place",
                               args.e2e ? "                     client" : "");
  std::cout << absl::StrFormat(
      "#%11s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s%s\n", "size",
      "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
      "time", "algbw", "busbw", "#wrong",
      args.e2e ? "     mean      p50      p99" : "");
  std::cout << absl::StrFormat(
      "#%11s %12s %8s %6s %6s %8s %7s %7s %6s %8s %7s %7s %6s%s\n", "(B)",
      "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
      "(GB/s)", "(GB/s)", "", args.e2e ? "     (us)     (us)     (us)" : "");
  for (const Row& r : rows) {
    std::cout << absl::StrFormat(
        "%12d %12d %8s %6s %6d %8.2f %7.2f %7.2f %6s %8.2f %7.2f %7.2f %6s",
        r.bytes, r.count, h.type_name, h.redop, h.root, r.time_us[0],
        r.algbw[0], r.busbw[0], args.check ? absl::StrCat(r.wrong[0]) : "N/A",
        r.time_us[1], r.algbw[1], r.busbw[1],
        args.check ? absl::StrCat(r.wrong[1]) : "N/A");
    if (args.e2e) {
      std::cout << absl::StrFormat(" %8.2f %8.2f %8.2f", r.e2e_us, r.e2e_p50_us,
                                   r.e2e_p99_us);
    }
    std::cout << "\n";
  }
  for (const Row& r : rows) {
    if (!args.e2e || r.e2e_p50_us <= 0) continue;
    std::cout << absl::StrFormat(
        "# client p50 at %d B: %.1f us = %.1f on the slowest worker (%.1f "
        "queued, %.1f moving data) + %.1f RPC and client\n",
        r.bytes, r.e2e_p50_us, r.worker_total_p50_us, r.worker_queue_p50_us,
        r.worker_device_p50_us, r.e2e_p50_us - r.worker_total_p50_us);
    std::cout << absl::StrFormat(
        "# client per op in a plan of %d at %d B: %.1f us (median of %d "
        "plans)%s\n",
        args.iters, r.bytes, r.e2e_plan_us, kPlanRounds,
        r.plan_emulated ? " (emulated: the workers have no SubmitPlan)" : "");
  }
  std::cout << "# Out of bounds values : " << h.wrong_total
            << (h.wrong_total == 0 ? " OK" : " FAILED") << "\n";
  std::cout << absl::StrFormat("# Avg bus bandwidth    : %g \n#\n",
                               h.avg_busbw);
}

int RunBench(Globals& globals, const BenchArgs& bench_args) {
  BenchArgs args = bench_args;
  auto sweep = ParseSweep(args);
  if (!sweep.ok()) return Fail(sweep.status(), true);
  const BenchOp& op = *sweep->op;
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  // With --group only its members take part and sizes follow the group;
  // --root is a world rank (-1, the default: the group's first member) and
  // sendrecv runs between the group's first two members.
  const std::string prefix = TemporaryPrefix("bench");
  BenchTarget target{**client, (*client)->GroupRanks(), (*client)->group_size(),
                     prefix + "in", prefix + "out"};
  const int n = target.n;
  if (op.kind == OpKind::kSend && n < 2) {
    return Fail(absl::FailedPreconditionError("sendrecv needs 2 ranks"));
  }
  if (args.root < 0) args.root = target.members.front();
  if (auto member = (*client)->GroupRank(args.root); !member.ok()) {
    return Fail(member.status(), true);
  }
  // Ranks of different hosts on one GPU (simulated hosts, NCCL_HOSTID): the
  // bytes go through host sockets and the GPU is time-shared, so the
  // figures say whether the op works, not how fast the hardware is.
  const std::string shared_gpu =
      SharedGpuNote((*client)->world(), target.members);
  const int64_t element = static_cast<int64_t>(DTypeSize(sweep->dtype));

  std::vector<Row> rows;
  const bool tty = isatty(STDERR_FILENO);
  for (int64_t bytes = sweep->min_bytes; bytes <= sweep->max_bytes;
       bytes = sweep->Next(bytes)) {
    // Round down so every rank's part is whole, as nccl-tests does.
    int64_t count = bytes / element;
    if (op.kind != OpKind::kAllReduce && op.kind != OpKind::kBroadcast &&
        op.kind != OpKind::kReduce && op.kind != OpKind::kSend) {
      count = count / n * n;
    }
    if (count == 0) continue;
    const auto [in_count, out_count] = op.buffers(count, n);
    if (tty && !globals.json()) {
      std::cerr << "\r[" << rows.size() + 1 << "] "
                << FormatBytes(count * element) << "    " << std::flush;
    }
    Row row;
    row.bytes = count * element;
    row.count = count;
    absl::Status status = target.Alloc(target.in_name, sweep->dtype, in_count);
    if (status.ok()) {
      status = target.Alloc(target.out_name, sweep->dtype, out_count);
    }
    if (!status.ok()) {
      target.FreeAll();
      return Fail(status);
    }
    if (!MeasureOnWorkers(target, args, *sweep, in_count, out_count, row) ||
        (args.e2e && op.kind != OpKind::kSend &&
         !MeasureAsClient(target, args, *sweep, row))) {
      target.FreeAll();
      return kExitFailure;
    }
    if (!target.FreeAll()) return kExitFailure;
    rows.push_back(row);
    if (sweep->OneSize()) break;
  }
  if (tty && !globals.json()) std::cerr << "\r" << std::string(40, ' ') << "\r";

  const BenchHeader header = HeaderOf(*sweep, args, n, shared_gpu, rows);
  const std::string csv_text = CsvOf(header, rows);
  if (!args.csv.empty()) std::ofstream(args.csv) << csv_text;
  bool plot_failed = false;
  if (!args.plot.empty()) {
    if (absl::Status plotted = Plot(csv_text, args.plot, n); !plotted.ok()) {
      Fail(plotted);
      plot_failed = true;
    }
  }
  if (globals.json()) {
    PrintJson(JsonOf(header, args, rows));
  } else {
    PrintTable(header, args, rows);
  }
  return header.wrong_total == 0 && !plot_failed ? kExitOk : kExitFailure;
}

}  // namespace

void AddBenchCommand(CLI::App& app, Globals& globals, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  auto* bench = app.add_subcommand(
      "bench", "nccl-tests-style sweep, timed on the workers");
  bench
      ->add_option("op", args->op_name,
                   "all_reduce, all_gather, reduce_scatter, broadcast, reduce, "
                   "alltoall, gather, scatter, sendrecv")
      ->required();
  bench->add_option("-b,--minbytes", args->min_bytes)->capture_default_str();
  bench->add_option("-e,--maxbytes", args->max_bytes)->capture_default_str();
  bench->add_option("-f,--stepfactor", args->factor,
                    "multiply the size (default 2)");
  bench->add_option("-i,--stepbytes", args->step_bytes, "add to the size");
  bench->add_option("-n,--iters", args->iters)->capture_default_str();
  bench->add_option("-w,--warmup_iters", args->warmup)->capture_default_str();
  bench->add_option("-d,--datatype", args->dtype)->capture_default_str();
  bench->add_option("--op", args->reduce, "reduce op (nccl-tests' -o)")
      ->capture_default_str();
  bench->add_option("-r,--root", args->root,
                    "root (a world rank; default: the group's first rank)");
  bench->add_option("-c,--check", args->check, "check results on the workers")
      ->capture_default_str();
  bench
      ->add_option("-G,--cudagraph", args->graph_launches,
                   "capture the timed loop in a CUDA graph and launch it "
                   "this many times (nccl-tests' -G; NCCL only)")
      ->capture_default_str();
  bench->add_flag("--e2e", args->e2e,
                  "add the time a client sees per op, one request each and "
                  "in one plan");
  bench->add_option("--csv", args->csv, "also write the rows to this CSV file");
  bench->add_option(
      "--plot", args->plot,
      "draw busbw against size into this PNG (python3-matplotlib)");
  bench->callback([&, args] { exit_code = RunBench(globals, *args); });
}

}  // namespace ccl::ctl
