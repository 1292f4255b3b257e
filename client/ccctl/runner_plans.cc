// Runs of consecutive sync ops in `ccctl run` as plans: each rank gets the
// run's ops in one SubmitPlan and runs them back to back, so an experiment
// of many small ops pays the RPC once, not per op. The report is the same
// as for ops sent one by one (a line and a JSON entry per step), written
// once the plan is back; a step's wall time is its share of the plan's.
#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "client/ccctl/runner.h"

namespace ccl::ctl {
namespace {

// The most ops one plan request carries; a longer run goes out as several.
constexpr size_t kMaxPlanSteps = 1024;

// Every rank refused the plan before running any of it (an RPC error that
// is not a transport failure or a deadline, after which some op may have
// run).
bool Refused(const RankResults<PlanResult>& results) {
  for (const auto& r : results) {
    switch (r.result.status().code()) {
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kNotFound:
      case absl::StatusCode::kAlreadyExists:
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kOutOfRange:
      case absl::StatusCode::kResourceExhausted:
      case absl::StatusCode::kPermissionDenied:
      case absl::StatusCode::kUnauthenticated:
        break;
      default:
        return false;
    }
  }
  return !results.empty();
}

}  // namespace

bool Runner::Plannable(const Step& step) const {
  // A root or peer outside the group fails before anything is sent; alone,
  // its step reports that error as its own.
  auto in_group = [&](int rank) { return client_.GroupRank(rank).ok(); };
  switch (step.kind) {
    case StepKind::kOp:
      return !step.async && (!HasRoot(step.op) || in_group(step.root_resolved));
    case StepKind::kSend:
    case StepKind::kRecv:
      return !step.async && in_group(step.root_resolved) &&
             in_group(step.peer_resolved);
    case StepKind::kRepeat:
      return std::all_of(step.steps.begin(), step.steps.end(),
                         [&](const Step& s) { return Plannable(s); });
    default:
      return false;
  }
}

void Runner::Expand(const Step& step, const std::string& id,
                    std::vector<PlannedEntry>& out) {
  if (step.kind != StepKind::kRepeat) {
    out.push_back({PlannedEntry::Type::kOp, &step, id});
    return;
  }
  out.push_back({PlannedEntry::Type::kRepeatBegin, &step, id});
  for (int k = 0; k < step.times_resolved; ++k) {
    const std::string prefix = absl::StrCat(id, ".", k + 1);
    for (size_t j = 0; j < step.steps.size(); ++j) {
      Expand(step.steps[j], StepId(prefix, j), out);
    }
  }
  out.push_back({PlannedEntry::Type::kRepeatEnd, &step, id});
}

size_t Runner::CountOps(const std::vector<PlannedEntry>& entries) {
  return std::count_if(entries.begin(), entries.end(), [](const auto& e) {
    return e.type == PlannedEntry::Type::kOp;
  });
}

bool Runner::RunPlanned(const std::vector<PlannedEntry>& entries) {
  std::vector<size_t> ops;
  for (size_t e = 0; e < entries.size(); ++e) {
    if (entries[e].type == PlannedEntry::Type::kOp) ops.push_back(e);
  }
  const std::set<int> group(client_.GroupRanks().begin(),
                            client_.GroupRanks().end());
  std::vector<Outcome> outcomes(entries.size());
  std::vector<double> wall_us(entries.size(), 0);
  bool failed = false;
  // Entries from here on run one request each (see below).
  size_t alone_from = entries.size();
  for (size_t first = 0; first < ops.size() && !failed;
       first += kMaxPlanSteps) {
    const size_t n = std::min(kMaxPlanSteps, ops.size() - first);
    Plan plan;
    std::vector<std::set<int>> involved(n);
    for (size_t k = 0; k < n; ++k) {
      const Step& step = *entries[ops[first + k]].step;
      if (step.kind == StepKind::kOp) {
        plan.steps.push_back(PlanStep::Collective(CollectiveOp(step)));
        involved[k] = group;
      } else {
        std::map<int, Op> p2p = PointToPointOps(step);
        for (const auto& [rank, op] : p2p) involved[k].insert(rank);
        plan.steps.push_back(PlanStep::PointToPoint(std::move(p2p)));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const auto results = client_.SubmitPlan(plan);
    if (Refused(results)) {
      // The workers check a plan's every op before running any: a refused
      // plan ran nothing. Its ops, and the rest, go one by one, so the step
      // at fault says so itself.
      alone_from = ops[first];
      break;
    }
    const double share = std::chrono::duration<double, std::micro>(
                             std::chrono::steady_clock::now() - start)
                             .count() /
                         static_cast<double>(n);
    for (size_t k = 0; k < n && !failed; ++k) {
      Outcome& outcome = outcomes[ops[first + k]];
      RecordPlanned(results, k, involved[k], outcome);
      outcome.json["plan_steps"] = n;
      wall_us[ops[first + k]] = share;
      failed = !outcome.ok;  // the plan's later ops did not run
    }
  }

  // The report, in step order; repeats get their entry once their ops are in.
  std::vector<double> repeat_wall;
  for (size_t e = 0; e < entries.size(); ++e) {
    const PlannedEntry& entry = entries[e];
    switch (entry.type) {
      case PlannedEntry::Type::kRepeatBegin:
        ++total_steps_;
        if (!globals_.json()) std::cout << Head(*entry.step, entry.id) << "\n";
        repeat_wall.push_back(0);
        break;
      case PlannedEntry::Type::kRepeatEnd: {
        const double wall = repeat_wall.back();
        repeat_wall.pop_back();
        if (!repeat_wall.empty()) repeat_wall.back() += wall;
        ReportRepeat(*entry.step, entry.id, wall);
        break;
      }
      case PlannedEntry::Type::kOp:
        if (e >= alone_from) {
          const auto start = std::chrono::steady_clock::now();
          if (!RunStep(*entry.step, entry.id)) return false;
          wall_us[e] = std::chrono::duration<double, std::micro>(
                           std::chrono::steady_clock::now() - start)
                           .count();
        } else {
          ++total_steps_;
          if (!Report(*entry.step, entry.id, outcomes[e], wall_us[e],
                      /*head_shown=*/false)) {
            return false;
          }
        }
        if (!repeat_wall.empty()) repeat_wall.back() += wall_us[e];
        break;
    }
  }
  return true;
}

void Runner::RecordPlanned(const RankResults<PlanResult>& results, size_t index,
                           const std::set<int>& involved, Outcome& outcome) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : results) {
    if (!involved.count(r.rank)) continue;
    absl::Status status = r.result.status();
    const WorkStatus* work = nullptr;
    if (status.ok()) {
      if (index < r.result->steps.size()) {
        work = &r.result->steps[index];
        status = work->error;
        if (status.ok() && work->state == WorkState::kFailed) {
          status = absl::UnknownError("the op failed without a reason");
        }
      } else {
        status = absl::InternalError(
            absl::StrCat("the worker answered ", r.result->steps.size(),
                         " results for a plan of more steps"));
      }
    }
    if (!status.ok()) {
      const std::string text =
          absl::StrCat("rank ", r.rank, ": ", StatusText(status));
      outcome.Fail(text);
      outcome.lines.push_back(text);
      ranks.push_back({{"rank", r.rank}, {"error", StatusText(status)}});
      continue;
    }
    ranks.push_back({{"rank", r.rank},
                     {"seq", work->seq},
                     {"device_us", work->timing.device_us}});
    outcome.device_us = std::max(outcome.device_us, work->timing.device_us);
  }
  outcome.json["ranks"] = ranks;
}

}  // namespace ccl::ctl
