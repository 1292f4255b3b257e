#include "client/ccctl/runner.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ccl::ctl {
namespace {

using Clock = std::chrono::steady_clock;

// "12.3 us", "4.56 ms", "1.23 s".
std::string TimeText(double us) {
  if (us < 1000) return absl::StrFormat("%.1f us", us);
  if (us < 1e6) return absl::StrFormat("%.2f ms", us / 1e3);
  return absl::StrFormat("%.2f s", us / 1e6);
}

}  // namespace

int Runner::Run() {
  const auto start = Clock::now();
  if (!globals_.json()) {
    std::cout << "experiment "
              << (experiment_.name.empty() ? experiment_.file
                                           : experiment_.name)
              << ": " << experiment_.steps.size() << " steps on "
              << client_.world_size() << " ranks\n";
    if (!experiment_.description.empty())
      std::cout << "  " << experiment_.description << "\n";
    std::cout.flush();
  }
  const bool ok = RunSteps(experiment_.steps, "");
  Cleanup();
  const double total_us =
      std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (globals_.json()) {
    nlohmann::json vars = nlohmann::json::object();
    for (const auto& [name, value] : experiment_.resolved_vars)
      vars[name] = value;
    nlohmann::json document = {{"experiment", experiment_.name},
                               {"description", experiment_.description},
                               {"file", experiment_.file},
                               {"world_size", client_.world_size()},
                               {"vars", vars},
                               {"ok", ok},
                               {"wall_us", total_us},
                               {"steps", steps_json_}};
    if (!ok) document["failed"] = failed_json_;
    if (!cleanup_errors_.empty()) document["cleanup_errors"] = cleanup_errors_;
    PrintJson(document);
  } else if (ok) {
    std::cout << "ok: " << total_steps_ << " steps passed in "
              << TimeText(total_us) << "\n";
  }
  if (!ok) std::cerr << "ccctl: " << failure_ << "\n";
  for (const auto& e : cleanup_errors_)
    std::cerr << "ccctl: cleanup: " << e << "\n";
  return ok ? kExitOk : kExitFailure;
}

std::vector<WorkRef> Runner::WorkRefs(const std::vector<PendingWork>& works) {
  std::vector<WorkRef> refs;
  for (const PendingWork& w : works) {
    refs.push_back({w.rank, w.id, w.worker_id});
  }
  return refs;
}

Vars Runner::RankVars(int rank) const {
  Vars vars = experiment_.resolved_vars;
  vars["rank"] = rank;
  return vars;
}

bool Runner::RunSteps(const std::vector<Step>& steps,
                      const std::string& prefix) {
  for (size_t i = 0; i < steps.size();) {
    // Consecutive sync ops, repeats of them included, go out as plans: one
    // request per rank for the lot instead of one per op.
    std::vector<PlannedEntry> planned;
    size_t end = i;
    for (; end < steps.size() && Plannable(steps[end]); ++end) {
      Expand(steps[end], StepId(prefix, end), planned);
    }
    if (CountOps(planned) >= 2) {
      if (!RunPlanned(planned)) return false;
      i = end;
      continue;
    }
    if (!RunStep(steps[i], StepId(prefix, i))) return false;
    ++i;
  }
  return true;
}

std::string Runner::StepId(const std::string& prefix, size_t index) {
  return prefix.empty() ? absl::StrCat(index + 1)
                        : absl::StrCat(prefix, ".", index + 1);
}

std::string Runner::Head(const Step& step, const std::string& id) const {
  return absl::StrCat("[", id, "/", experiment_.steps.size(), "] ",
                      DescribeStep(step));
}

bool Runner::RunStep(const Step& step, const std::string& id) {
  ++total_steps_;
  if (step.kind == StepKind::kRepeat) {
    if (!globals_.json()) std::cout << Head(step, id) << "\n" << std::flush;
    const auto start = Clock::now();
    for (int k = 0; k < step.times_resolved; ++k) {
      if (!RunSteps(step.steps, absl::StrCat(id, ".", k + 1))) return false;
    }
    ReportRepeat(step, id,
                 std::chrono::duration<double, std::micro>(Clock::now() - start)
                     .count());
    return true;
  }
  if (!globals_.json()) std::cout << Head(step, id) << " ... " << std::flush;
  const auto start = Clock::now();
  const Outcome outcome = Execute(step, id);
  const double wall_us =
      std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  return Report(step, id, outcome, wall_us, /*head_shown=*/true);
}

bool Runner::Report(const Step& step, const std::string& id,
                    const Outcome& outcome, double wall_us, bool head_shown) {
  if (!globals_.json()) {
    if (!head_shown) std::cout << Head(step, id) << " ... ";
    const double shown = outcome.device_us >= 0 ? outcome.device_us : wall_us;
    std::cout << (outcome.ok ? "ok" : "FAILED") << " (" << TimeText(shown)
              << ")\n";
    for (const auto& line : outcome.lines) std::cout << "    " << line << "\n";
    std::cout.flush();
  }
  nlohmann::json entry = {{"step", id},
                          {"line", step.line},
                          {"kind", step.kind_name},
                          {"text", DescribeStep(step)},
                          {"ok", outcome.ok},
                          {"wall_us", wall_us}};
  if (outcome.device_us >= 0) entry["device_us"] = outcome.device_us;
  for (auto& [key, value] : outcome.json.items()) entry[key] = value;
  if (!outcome.ok) entry["error"] = outcome.error;
  steps_json_.push_back(entry);
  if (!outcome.ok) {
    failure_ = absl::StrCat("step ", id, " (line ", step.line, ", ",
                            DescribeStep(step), ") failed: ", outcome.error);
    failed_json_ = {
        {"step", id}, {"line", step.line}, {"error", outcome.error}};
    return false;
  }
  return true;
}

void Runner::ReportRepeat(const Step& step, const std::string& id,
                          double wall_us) {
  steps_json_.push_back({{"step", id},
                         {"line", step.line},
                         {"kind", step.kind_name},
                         {"text", DescribeStep(step)},
                         {"ok", true},
                         {"times", step.times_resolved},
                         {"wall_us", wall_us}});
}

Outcome Runner::Execute(const Step& step, const std::string& id) {
  switch (step.kind) {
    case StepKind::kAlloc:
      return Alloc(step);
    case StepKind::kWrite:
      return Write(step);
    case StepKind::kOp:
      return Collective(step, id);
    case StepKind::kSend:
    case StepKind::kRecv:
      return PointToPoint(step, id);
    case StepKind::kWait:
      return Wait(step);
    case StepKind::kRead:
      return Read(step);
    case StepKind::kAssert:
      return Assert(step);
    case StepKind::kFree:
      return Free(step);
    case StepKind::kSleep:
      std::this_thread::sleep_for(step.duration);
      return {};
    case StepKind::kBench:
      return Bench(step);
    case StepKind::kRepeat:
      break;
  }
  return {};
}

void Runner::RecordOp(const Step& step, const std::string& id,
                      const RankResults<OpResult>& results,
                      const std::set<int>& involved, Outcome& outcome) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : results) {
    if (!involved.count(r.rank)) continue;
    if (!r.result.ok()) {
      const std::string text =
          absl::StrCat("rank ", r.rank, ": ", StatusText(r.result.status()));
      outcome.Fail(text);
      outcome.lines.push_back(text);
      ranks.push_back(
          {{"rank", r.rank}, {"error", StatusText(r.result.status())}});
      continue;
    }
    nlohmann::json entry = {{"rank", r.rank}, {"seq", r.result->seq}};
    if (step.async) {
      entry["work_id"] = r.result->work_id;
      pending_.push_back(
          {r.rank, r.result->work_id, step.as, id, r.result->worker_id});
    } else {
      entry["device_us"] = r.result->timing.device_us;
      outcome.device_us =
          std::max(outcome.device_us, r.result->timing.device_us);
    }
    ranks.push_back(entry);
  }
  outcome.json["ranks"] = ranks;
}

void Runner::Cleanup() {
  if (!pending_.empty()) {
    const auto results =
        client_.Wait(WorkRefs(pending_), client_.options().timeout);
    for (size_t i = 0; i < results.size(); ++i) {
      if (!results[i].result.ok()) {
        cleanup_errors_.push_back(absl::StrCat(
            "work of step ", pending_[i].step, " on rank ", pending_[i].rank,
            ": ", StatusText(results[i].result.status())));
      }
    }
    pending_.clear();
  }
  if (keep_) return;
  // One request per rank for each name.
  std::map<std::string, std::vector<int>> by_name;
  for (const auto& [rank, name] : allocated_) by_name[name].push_back(rank);
  for (const auto& [name, ranks] : by_name) {
    for (const auto& r : client_.Free(ranks, name)) {
      if (!r.result.ok()) {
        cleanup_errors_.push_back(absl::StrCat("free ", name, " on rank ",
                                               r.rank, ": ",
                                               StatusText(r.result.status())));
      }
    }
  }
  allocated_.clear();
}

}  // namespace ccl::ctl
