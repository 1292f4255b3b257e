// ccctl doctor: finds the slow or broken rank, link or host of a running
// group. Every pair of ranks is measured both ways at a large size
// (bandwidth) and a small one (latency), in rounds of disjoint pairs that
// run at once, each with the workers' on-device check of the bytes; then a
// run of all_reduces shows which rank the others wait for. The judging is
// doctor_judge's, the outputs doctor_report's. docs/doctor.md says what
// each check measures, how it decides and what it cannot see.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <ctime>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ccctl/bench_ops.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/doctor_judge.h"
#include "client/ccctl/doctor_report.h"
#include "client/ccctl/format.h"
#include "common/status_macros.h"

namespace ccl::ctl {
namespace {

using Clock = std::chrono::steady_clock;

struct DoctorArgs {
  std::string size = "16M";
  std::string latency_size = "8";
  int iters = 10, latency_iters = 200, warmup = 2;
  int skew_ops = 20;
  std::string skew_size = "1M";
  std::string budget = "10m";
  // --bisect: a search from a few rounds instead of the whole matrix.
  bool bisect = false;
  int sample_rounds = 3, partners = 4;
  doctor::Thresholds thresholds;
  std::string baseline, save_baseline, svg, prom;
  bool check = true;
  bool quiet = false;
};

// Ctrl-C: the round in flight finishes (its benches end together on every
// rank), the temporaries are freed, and the run ends; a second Ctrl-C ends
// ccctl at once (the workers then stop the bench at their next checkpoint,
// as for any client that went away).
std::atomic<bool> interrupted{false};
extern "C" void OnInterrupt(int) {
  interrupted = true;
  std::signal(SIGINT, SIG_DFL);
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  // Write then rename, so a scraper never reads half a file.
  const std::string partial = path + ".partial";
  {
    std::ofstream out(partial);
    out << text;
    if (!out.flush()) {
      return absl::UnavailableError(absl::StrCat("cannot write ", partial));
    }
  }
  if (std::rename(partial.c_str(), path.c_str()) != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", partial, " to ", path));
  }
  return absl::OkStatus();
}

// Rounds of disjoint pairs (world ranks) at one size: per round, each
// pair's lower rank sends to the higher, then the other way; every pair of
// a round at once. Each directed pair's time reaches `put`.
absl::Status MeasurePairs(
    ClusterClient& client,
    const std::vector<std::vector<std::pair<int, int>>>& rounds,
    const std::string& in_name, const std::string& out_name, int iters,
    int warmup, bool check, bool fastest_batch, const std::string& what,
    bool quiet, Clock::time_point give_up,
    const std::function<void(int src, int dst, const absl::StatusOr<double>&,
                             int64_t wrong)>& put) {
  for (size_t round = 0; round < rounds.size(); ++round) {
    if (interrupted) {
      return absl::CancelledError(
          absl::StrCat("interrupted after ", round, " of ", rounds.size(), " ",
                       what, " rounds; the temporaries were freed"));
    }
    if (Clock::now() >= give_up) {
      return absl::DeadlineExceededError(
          absl::StrCat("the --budget ran out after ", round, " of ",
                       rounds.size(), " ", what, " rounds"));
    }
    const auto start = Clock::now();
    for (int reverse = 0; reverse < 2; ++reverse) {
      // World rank -> (peer, sends).
      std::map<int, std::pair<int, bool>> role;
      for (const auto& [lo, hi] : rounds[round]) {
        const int sender = reverse ? hi : lo, receiver = reverse ? lo : hi;
        role[sender] = {receiver, true};
        role[receiver] = {sender, false};
      }
      const auto results = client.Bench([&](int rank) {
        BenchSpec spec;
        spec.iters = iters;
        spec.warmup_iters = warmup;
        spec.check = check;
        auto it = role.find(rank);
        if (it == role.end()) {
          spec.op.kind = OpKind::kNop;
          return spec;
        }
        spec.op.kind = it->second.second ? OpKind::kSend : OpKind::kRecv;
        spec.op.peer = it->second.first;
        spec.op.input = it->second.second ? in_name : out_name;
        return spec;
      });
      std::map<int, const RankResult<BenchResult>*> by_rank;
      for (const auto& r : results) by_rank[r.rank] = &r;
      for (const auto& [rank, peer_and_sends] : role) {
        if (!peer_and_sends.second) continue;
        const int src = rank, dst = peer_and_sends.first;
        absl::StatusOr<double> time_us = 0.0;
        int64_t wrong = 0;
        for (int end : {src, dst}) {
          auto it = by_rank.find(end);
          if (it == by_rank.end()) {
            time_us =
                absl::InternalError(absl::StrCat("no answer from rank ", end));
            break;
          }
          const auto& result = it->second->result;
          if (!result.ok()) {
            time_us = absl::Status(
                result.status().code(),
                absl::StrCat("rank ", end, ": ", result.status().message()));
            break;
          }
          wrong += result->wrong;
          // Bandwidth: nccl-tests' time (wall over instances). Latency: the
          // fastest batch's time per instance (batches of up to 64), so
          // that one stall of a busy host does not make a link look slow;
          // a slow link is slow in every batch.
          const double t = fastest_batch && result->min_us > 0 ? result->min_us
                           : result->time_us > 0               ? result->time_us
                                                               : result->avg_us;
          time_us = std::max(*time_us, t);
        }
        put(src, dst, time_us, wrong);
      }
    }
    if (!quiet) {
      std::cerr << absl::StrFormat(
          "ccctl doctor: %s round %d/%d: %d pairs both ways in %.2f s\n", what,
          round + 1, rounds.size(), rounds[round].size(),
          std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  return absl::OkStatus();
}

// The message sizes and the budget, from the flags.
struct DoctorSizes {
  int64_t bandwidth = 0, latency = 0, skew = 0;
  Clock::duration budget{};
};

// INVALID_ARGUMENT (a usage error) for flags that make no run.
absl::StatusOr<DoctorSizes> ParseDoctorArgs(const DoctorArgs& args) {
  DoctorSizes sizes;
  CCL_ASSIGN_OR_RETURN(sizes.bandwidth, ParseSize(args.size));
  CCL_ASSIGN_OR_RETURN(sizes.latency, ParseSize(args.latency_size));
  CCL_ASSIGN_OR_RETURN(sizes.skew, ParseSize(args.skew_size));
  CCL_ASSIGN_OR_RETURN(sizes.budget, ParseDuration(args.budget));
  if (sizes.bandwidth < 4 || sizes.latency < 4 || sizes.skew < 4 ||
      args.iters < 1 || args.latency_iters < 1 || args.warmup < 0 ||
      args.skew_ops < 0 || args.sample_rounds < 1 || args.partners < 1) {
    return absl::InvalidArgumentError(
        "sizes must be at least 4 bytes (one float32), -n, "
        "--latency-iters, --sample-rounds and --partners at least "
        "1, -w and --skew-ops at least 0");
  }
  const doctor::Thresholds& t = args.thresholds;
  if (t.bandwidth_tolerance <= 0 || t.bandwidth_tolerance >= 1 ||
      t.latency_tolerance <= 0 || t.sigmas < 0 || t.baseline_tolerance <= 0 ||
      t.baseline_tolerance >= 1) {
    return absl::InvalidArgumentError(
        "--tolerance and --baseline-tolerance must be in (0, 1), "
        "--latency-tolerance above 0, --sigmas at least 0");
  }
  return sizes;
}

// The saved run of --baseline; null without one.
absl::StatusOr<nlohmann::json> ReadBaseline(const std::string& path) {
  if (path.empty()) return nlohmann::json();
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read the baseline ", path));
  }
  nlohmann::json saved = nlohmann::json::parse(in, nullptr, false);
  if (saved.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     " is not JSON; save a baseline with "
                     "ccctl doctor --save-baseline FILE"));
  }
  return saved;
}

// The run's description before anything is measured: the group, its
// ranks by host, the sizes.
doctor::Run NewRun(ClusterClient& client, const DoctorArgs& args,
                   const DoctorSizes& sizes, const std::vector<int>& members) {
  doctor::Run run;
  run.group = client.group();
  run.generation = client.world().generation;
  run.bandwidth_bytes = sizes.bandwidth / 4 * 4;
  run.latency_bytes = sizes.latency / 4 * 4;
  run.iters = args.iters;
  run.latency_iters = args.latency_iters;
  run.skew_ops = members.size() >= 3 ? args.skew_ops : 0;
  run.skew_bytes = sizes.skew / 4 * 4;
  run.thresholds = args.thresholds;
  run.simulated_hosts = SharedGpuNote(client.world(), members);
  for (int rank : members) {
    doctor::Rank r{rank, ""};
    for (const client::Member& m : client.world().members) {
      if (m.rank == rank) r.host = m.host_id.empty() ? m.host : m.host_id;
    }
    run.ranks.push_back(r);
  }
  return run;
}

// The doctor's temporaries on every member: a large pair (bandwidth), a
// small pair (latency) and the arrival-skew tensor.
struct DoctorTensors {
  ClusterClient& client;
  std::vector<int> members;
  std::string prefix = TemporaryPrefix("doctor");
  std::string big_in = prefix + "in", big_out = prefix + "out";
  std::string small_in = prefix + "lat_in", small_out = prefix + "lat_out";
  std::string skew = prefix + "skew";

  // Each name on every member, whatever was allocated where.
  bool FreeAll() {
    return FreeTemporaries(client, {{big_in, members},
                                    {big_out, members},
                                    {small_in, members},
                                    {small_out, members},
                                    {skew, members}});
  }
  absl::Status AllocAll(const doctor::Run& run) {
    for (const auto& [name, bytes] :
         std::vector<std::pair<std::string, int64_t>>{
             {big_in, run.bandwidth_bytes},
             {big_out, run.bandwidth_bytes},
             {small_in, run.latency_bytes},
             {small_out, run.latency_bytes},
             {skew, run.skew_bytes}}) {
      for (const auto& r : client.Alloc(
               members, TensorSpec{name, DType::kFloat32, {bytes / 4}})) {
        if (!r.result.ok()) {
          return absl::Status(
              r.result.status().code(),
              absl::StrCat("rank ", r.rank, ": ", r.result.status().message()));
        }
      }
    }
    return absl::OkStatus();
  }
};

// Both sizes over `rounds`, each directed pair's figures into one cell.
doctor::MeasureFn Measurer(ClusterClient& client, const DoctorArgs& args,
                           const doctor::Run& run, const DoctorTensors& tensors,
                           Clock::time_point give_up) {
  return [&client, &args, &run, &tensors, give_up](
             const doctor::Rounds& rounds, const std::string& label,
             std::vector<doctor::Cell>& out) {
    std::map<std::pair<int, int>, doctor::Cell> cells;
    auto record = [&](bool bandwidth) {
      return
          [&, bandwidth](int src, int dst,
                         const absl::StatusOr<double>& time_us, int64_t wrong) {
            doctor::Cell& cell = cells[{src, dst}];
            cell.src = src;
            cell.dst = dst;
            cell.wrong += wrong;
            if (!time_us.ok()) {
              if (cell.error.empty()) cell.error = StatusText(time_us.status());
              return;
            }
            if (*time_us <= 0) return;
            if (bandwidth) {
              cell.bandwidth_gbps = run.bandwidth_bytes / *time_us / 1e3;
            } else {
              cell.latency_us = *time_us;
            }
          };
    };
    absl::Status status =
        MeasurePairs(client, rounds, tensors.big_in, tensors.big_out,
                     args.iters, args.warmup, args.check,
                     /*fastest_batch=*/false, absl::StrCat(label, "bandwidth"),
                     args.quiet, give_up, record(true));
    if (status.ok()) {
      status =
          MeasurePairs(client, rounds, tensors.small_in, tensors.small_out,
                       args.latency_iters, args.warmup, args.check,
                       /*fastest_batch=*/true, absl::StrCat(label, "latency"),
                       args.quiet, give_up, record(false));
    }
    for (auto& [key, cell] : cells) out.push_back(std::move(cell));
    return status;
  };
}

// One request per rank of back-to-back all_reduces: a rank that is slow to
// start each one shows as the one the others wait for. Empty, with
// run.skew_error set, if they failed.
std::vector<doctor::CollectiveTimes> MeasureArrivals(
    ClusterClient& client, const DoctorArgs& args,
    const std::vector<int>& members, const std::string& skew,
    doctor::Run& run) {
  std::vector<doctor::CollectiveTimes> collectives;
  if (run.skew_ops <= 0) return collectives;
  Op op;
  op.kind = OpKind::kAllReduce;
  op.input = skew;
  Plan plan;
  plan.steps.assign(run.skew_ops, PlanStep::Collective(op));
  const auto planned = client.SubmitPlan(plan);
  collectives.resize(run.skew_ops);
  for (auto& c : collectives) c.device_us.assign(members.size(), 0);
  for (const auto& r : planned) {
    if (!r.result.ok()) {
      run.skew_error =
          absl::StrCat("rank ", r.rank, ": ", StatusText(r.result.status()));
      break;
    }
    const auto it = std::find(members.begin(), members.end(), r.rank);
    for (size_t k = 0;
         k < r.result->steps.size() && k < static_cast<size_t>(run.skew_ops);
         ++k) {
      const WorkStatus& step = r.result->steps[k];
      if (!step.error.ok()) {
        run.skew_error =
            absl::StrCat("rank ", r.rank, ": ", StatusText(step.error));
        break;
      }
      collectives[k].device_us[it - members.begin()] = step.timing.device_us;
    }
  }
  if (!run.skew_error.empty()) collectives.clear();
  if (!args.quiet) {
    std::cerr << "ccctl doctor: " << run.skew_ops << " all_reduces for the "
              << "arrival skew" << (run.skew_error.empty() ? "" : " failed")
              << "\n";
  }
  return collectives;
}

// --save-baseline, --svg and --prom; false if one could not be written.
bool WriteOutputs(const DoctorArgs& args, const doctor::Run& run,
                  const nlohmann::json& document) {
  bool wrote = true;
  auto write = [&](const std::string& path, const std::string& text) {
    if (path.empty()) return;
    if (absl::Status s = WriteFile(path, text); !s.ok()) {
      Fail(s);
      wrote = false;
    }
  };
  write(args.save_baseline, document.dump(2) + "\n");
  write(args.svg, doctor::RenderSvg(run));
  write(args.prom, doctor::RenderPrometheus(run));
  return wrote;
}

int RunDoctor(Globals& globals, const DoctorArgs& args) {
  auto sizes = ParseDoctorArgs(args);
  if (!sizes.ok()) return Fail(sizes.status(), true);
  auto saved_baseline = ReadBaseline(args.baseline);
  if (!saved_baseline.ok()) return Fail(saved_baseline.status(), true);
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  const std::vector<int> members = (*client)->GroupRanks();
  if (members.size() < 2) {
    return Fail(absl::FailedPreconditionError(
        "the doctor measures pairs: the group needs at least 2 ranks"));
  }
  const auto started = Clock::now();
  doctor::Run run = NewRun(**client, args, *sizes, members);
  std::vector<doctor::Cell> baseline_cells;
  if (!args.baseline.empty()) {
    auto cells = doctor::BaselineCells(*saved_baseline, run);
    if (!cells.ok()) return Fail(cells.status(), true);
    baseline_cells = *std::move(cells);
    run.baseline_file = args.baseline;
  }

  DoctorTensors tensors{**client, members};
  if (absl::Status s = tensors.AllocAll(run); !s.ok()) {
    tensors.FreeAll();
    return Fail(s);
  }
  std::signal(SIGINT, OnInterrupt);
  const std::vector<doctor::CollectiveTimes> collectives =
      MeasureArrivals(**client, args, members, tensors.skew, run);
  doctor::SearchOptions options;
  options.sample_rounds = args.bisect ? args.sample_rounds : 0;
  options.partners = args.partners;
  options.thresholds = args.thresholds;
  if (!args.baseline.empty()) options.baseline = &baseline_cells;
  doctor::Search search;
  absl::Status measured = doctor::Examine(
      run.ranks, collectives, options,
      Measurer(**client, args, run, tensors, started + sizes->budget), search);
  run.cells = std::move(search.cells);
  run.verdict = std::move(search.verdict);
  // An arrival measured once may be chance, as a pair's figure may: the
  // all_reduces run again, and a rank is named late only if late again.
  if (measured.ok() && !interrupted &&
      std::any_of(
          run.verdict.findings.begin(), run.verdict.findings.end(),
          [](const doctor::Finding& f) { return f.metric == "arrival"; })) {
    const std::string first_error = run.skew_error;
    const auto again =
        MeasureArrivals(**client, args, members, tensors.skew, run);
    run.skew_error = first_error;
    run.verdict = doctor::ConfirmedArrivals(std::move(run.verdict), run.ranks,
                                            again, args.thresholds);
  }
  run.rounds = search.rounds;
  run.remeasured_pairs = search.remeasured_pairs;
  run.search = search.sampled ? "bisect" : "matrix";
  const bool freed = tensors.FreeAll();
  std::signal(SIGINT, SIG_DFL);
  if (!measured.ok()) return Fail(measured);
  run.elapsed_s = std::chrono::duration<double>(Clock::now() - started).count();
  run.finished_unix_s = static_cast<int64_t>(std::time(nullptr));

  const nlohmann::json document = doctor::ToJson(run);
  const bool wrote = WriteOutputs(args, run, document);
  if (globals.json()) {
    PrintJson(document);
  } else {
    std::cout << doctor::RenderTable(run);
  }
  if (!wrote || !freed) return kExitFailure;
  return run.verdict.findings.empty() ? kExitOk : kExitFindings;
}

}  // namespace

void AddDoctorCommand(CLI::App& app, Globals& globals, int& exit_code) {
  auto args = std::make_shared<DoctorArgs>();
  auto* doctor = app.add_subcommand(
      "doctor",
      "find the slow or broken rank, link or host of the group (exit 0: "
      "healthy, 3: something found, 1: could not run)");
  doctor->add_option("--size", args->size, "bandwidth message size")
      ->capture_default_str();
  doctor
      ->add_option("--latency-size", args->latency_size, "latency message size")
      ->capture_default_str();
  doctor->add_option("-n,--iters", args->iters, "timed sends per pair")
      ->capture_default_str();
  doctor->add_option("--latency-iters", args->latency_iters)
      ->capture_default_str();
  doctor->add_option("-w,--warmup_iters", args->warmup)->capture_default_str();
  doctor
      ->add_option("--skew-ops", args->skew_ops,
                   "all_reduces that show who arrives late (0: none)")
      ->capture_default_str();
  doctor->add_option("--skew-size", args->skew_size)->capture_default_str();
  doctor
      ->add_option("--budget", args->budget,
                   "give up after this long in all (each request is bounded "
                   "by --timeout)")
      ->capture_default_str();
  doctor
      ->add_option("--tolerance", args->thresholds.bandwidth_tolerance,
                   "a bandwidth this share below comparable links' median is "
                   "slow")
      ->capture_default_str();
  doctor
      ->add_option("--latency-tolerance", args->thresholds.latency_tolerance,
                   "a latency this share above comparable links' median is "
                   "slow")
      ->capture_default_str();
  doctor
      ->add_option("--sigmas", args->thresholds.sigmas,
                   "and further from it than this many robust standard "
                   "deviations")
      ->capture_default_str();
  doctor->add_option("--baseline", args->baseline,
                     "judge each pair against this saved run");
  doctor
      ->add_option("--baseline-tolerance", args->thresholds.baseline_tolerance,
                   "a pair this share below its baseline is slow")
      ->capture_default_str();
  doctor->add_option("--save-baseline", args->save_baseline,
                     "write this run's document (the JSON) to FILE");
  doctor->add_option("--svg", args->svg, "write the heatmap to FILE");
  doctor->add_option("--prom", args->prom,
                     "write the figures as Prometheus gauges to FILE "
                     "(node_exporter's textfile collector)");
  doctor
      ->add_flag("--bisect", args->bisect,
                 "search instead of measuring every pair: --sample-rounds of "
                 "the schedule, then each suspect with --partners ranks it has "
                 "not met, until what is slow is seen twice (a slow rank or "
                 "host of any group in about 7 rounds; a slow link only if "
                 "its pair is sampled)")
      ->capture_default_str();
  doctor->add_option("--sample-rounds", args->sample_rounds)
      ->capture_default_str();
  doctor->add_option("--partners", args->partners)->capture_default_str();
  doctor->add_flag("!--no-check", args->check,
                   "skip the on-device check of the bytes");
  doctor->add_flag("-q,--quiet", args->quiet, "no progress lines");
  doctor->callback(
      [&globals, &exit_code, args] { exit_code = RunDoctor(globals, *args); });
}

}  // namespace ccl::ctl
