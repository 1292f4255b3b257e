// Resolution of a parsed experiment against a world size: vars, ranks,
// roots, shapes and repeat counts evaluated and range-checked before any
// request reaches a worker.
#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/ccctl/experiment.h"

namespace ccl::ctl {

namespace {

absl::Status StepError(const Experiment& experiment, const Step& step,
                       const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(experiment.file.empty() ? "" : experiment.file + ":",
                   "line ", step.line, ": ", step.kind_name, ": ", what));
}

absl::StatusOr<int64_t> EvalInt(const Experiment& experiment, const Step& step,
                                const Expression& e, const std::string& what) {
  auto v = e.Evaluate(experiment.resolved_vars);
  if (!v.ok())
    return StepError(experiment, step, std::string(v.status().message()));
  if (*v != std::floor(*v) || std::abs(*v) > 1e15) {
    return StepError(
        experiment, step,
        absl::StrCat(what, " '", e.text(), "' is ", *v, ", not an integer"));
  }
  return static_cast<int64_t>(*v);
}

absl::StatusOr<int> EvalRank(const Experiment& experiment, const Step& step,
                             const Expression& e, const std::string& what,
                             int world) {
  auto v = EvalInt(experiment, step, e, what);
  if (!v.ok()) return v.status();
  if (*v < 0 || *v >= world) {
    return StepError(
        experiment, step,
        absl::StrCat(what, " '", e.text(), "' is ", *v,
                     ", out of range for a world of ", world, " ranks"));
  }
  return static_cast<int>(*v);
}

absl::Status ResolveSteps(Experiment& experiment, std::vector<Step>& steps,
                          int world) {
  for (Step& step : steps) {
    step.ranks.resolved.clear();
    if (step.ranks.exprs) {
      for (const auto& e : *step.ranks.exprs) {
        auto rank = EvalRank(experiment, step, e, "rank", world);
        if (!rank.ok()) return rank.status();
        for (int seen : step.ranks.resolved) {
          if (seen == *rank) {
            return StepError(experiment, step,
                             absl::StrCat("rank ", seen, " listed twice"));
          }
        }
        step.ranks.resolved.push_back(*rank);
      }
    } else {
      for (int r = 0; r < world; ++r) step.ranks.resolved.push_back(r);
    }
    switch (step.kind) {
      case StepKind::kAlloc: {
        step.shape_resolved.clear();
        int64_t numel = 1;
        for (const auto& e : step.shape) {
          auto dim = EvalInt(experiment, step, e, "shape");
          if (!dim.ok()) return dim.status();
          if (*dim < 0)
            return StepError(experiment, step, "negative dimension");
          step.shape_resolved.push_back(*dim);
          numel *= *dim;
        }
        if (step.shape.empty()) {
          step.shape_resolved = {static_cast<int64_t>(step.values.size())};
          numel = static_cast<int64_t>(step.values.size());
        }
        if (static_cast<int64_t>(step.values.size()) > numel) {
          return StepError(experiment, step,
                           absl::StrCat(step.values.size(), " values for ",
                                        numel, " elements"));
        }
        for (const Expression* e :
             {&step.fill_value, &step.fill_rank_scale, &step.fill_step}) {
          if (auto v = e->Evaluate(experiment.resolved_vars); !v.ok()) {
            return StepError(experiment, step,
                             std::string(v.status().message()));
          }
        }
        break;
      }
      case StepKind::kOp:
      case StepKind::kBench: {
        if (step.kind == StepKind::kBench && step.bench_op == "sendrecv" &&
            world < 2) {
          return StepError(experiment, step, "sendrecv needs 2 ranks");
        }
        auto root = EvalRank(experiment, step, step.root, "root", world);
        if (!root.ok()) return root.status();
        step.root_resolved = *root;
        if (step.kind == StepKind::kOp) {
          auto scale = step.scale.Evaluate(experiment.resolved_vars);
          if (!scale.ok()) {
            return StepError(experiment, step,
                             std::string(scale.status().message()));
          }
          step.scale_resolved = *scale;
        }
        break;
      }
      case StepKind::kSend:
      case StepKind::kRecv: {
        const bool send = step.kind == StepKind::kSend;
        auto root = EvalRank(experiment, step, step.root,
                             send ? "from" : "rank", world);
        if (!root.ok()) return root.status();
        auto peer =
            EvalRank(experiment, step, step.peer, send ? "to" : "from", world);
        if (!peer.ok()) return peer.status();
        if (*root == *peer) {
          return StepError(
              experiment, step,
              absl::StrCat("a rank cannot ", send ? "send to" : "receive from",
                           " itself (rank ", *root, ")"));
        }
        step.root_resolved = *root;
        step.peer_resolved = *peer;
        break;
      }
      case StepKind::kRepeat: {
        auto times = EvalInt(experiment, step, step.times, "times");
        if (!times.ok()) return times.status();
        if (*times < 0 || *times > 1000000) {
          return StepError(experiment, step, "'times' must be in [0, 1000000]");
        }
        step.times_resolved = static_cast<int>(*times);
        if (auto s = ResolveSteps(experiment, step.steps, world); !s.ok())
          return s;
        break;
      }
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ResolveExperiment(Experiment& experiment, int world_size,
                               const Vars& overrides) {
  if (world_size < 1)
    return absl::InvalidArgumentError("the world has no ranks");
  for (const auto& [name, value] : overrides) {
    bool known = false;
    for (const auto& var : experiment.vars) known |= var.first == name;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--set ", name, ": the experiment has no var '", name, "'"));
    }
  }
  experiment.resolved_vars = {{"world_size", world_size}};
  for (const auto& [name, e] : experiment.vars) {
    if (auto it = overrides.find(name); it != overrides.end()) {
      experiment.resolved_vars[name] = it->second;
      continue;
    }
    auto value = e.Evaluate(experiment.resolved_vars);
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(experiment.file.empty() ? "" : experiment.file + ":",
                       "var ", name, ": ", value.status().message()));
    }
    experiment.resolved_vars[name] = *value;
  }
  return ResolveSteps(experiment, experiment.steps, world_size);
}

}  // namespace ccl::ctl
