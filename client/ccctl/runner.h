// The runner of `ccctl run`: executes a resolved experiment's steps in
// order against a cluster and reports each one (a table, or JSON), stopping
// at the first that fails. runner.cc holds the loop, its plans and its
// report; runner_steps.cc what each kind of step does.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/ccctl/ccctl.h"
#include "client/ccctl/experiment.h"
#include "nlohmann/json.hpp"

namespace ccl::ctl {

// What one step did, as the report shows it.
struct Outcome {
  bool ok = true;
  std::string error;               // the first failure, "rank R: ..."
  double device_us = -1;           // max over ranks, for ops
  std::vector<std::string> lines;  // details printed under the step line
  nlohmann::json json = nlohmann::json::object();

  void Fail(const std::string& what) {
    if (ok) error = what;
    ok = false;
  }
};

// The op of a collective step.
Op CollectiveOp(const Step& step);
// The ops of a send or recv step, by world rank.
std::map<int, Op> PointToPointOps(const Step& step);

class Runner {
 public:
  Runner(ClusterClient& client, Experiment& experiment, const Globals& globals,
         bool keep)
      : client_(client),
        experiment_(experiment),
        globals_(globals),
        keep_(keep) {}

  // Runs every step, then completes what is in flight and frees what the
  // run allocated (unless kept); the exit code.
  int Run();

 private:
  struct PendingWork {
    int rank;
    int64_t id;
    std::string name;  // `as`, or "" for anonymous
    std::string step;
    std::string worker_id;  // who issued `id` (OpResult::worker_id)
  };

  // A step of a run of sync ops expanded for plans: an op, or where a
  // repeat of them begins or ends (for the report).
  struct PlannedEntry {
    enum class Type { kOp, kRepeatBegin, kRepeatEnd };
    Type type;
    const Step* step;
    std::string id;
  };

  // runner.cc: the loop and its report.
  static std::vector<WorkRef> WorkRefs(const std::vector<PendingWork>& works);
  Vars RankVars(int rank) const;
  // Runs `steps` (ids under `prefix`); false at the first failure.
  bool RunSteps(const std::vector<Step>& steps, const std::string& prefix);
  bool RunStep(const Step& step, const std::string& id);
  static std::string StepId(const std::string& prefix, size_t index);
  std::string Head(const Step& step, const std::string& id) const;
  // Prints and records one step's outcome; false if it failed.
  bool Report(const Step& step, const std::string& id, const Outcome& outcome,
              double wall_us, bool head_shown);
  void ReportRepeat(const Step& step, const std::string& id, double wall_us);
  Outcome Execute(const Step& step, const std::string& id);

  // runner_plans.cc: runs of sync ops as plans.
  // Sync ops (a plan has no work ids to wait on) and repeats of only them.
  bool Plannable(const Step& step) const;
  static void Expand(const Step& step, const std::string& id,
                     std::vector<PlannedEntry>& out);
  static size_t CountOps(const std::vector<PlannedEntry>& entries);
  // Sends the entries' ops as plans (at most kMaxPlanSteps each), then
  // reports every step in order; false at the first failed op.
  bool RunPlanned(const std::vector<PlannedEntry>& entries);
  void RecordPlanned(const RankResults<PlanResult>& results, size_t index,
                     const std::set<int>& involved, Outcome& outcome);
  void RecordOp(const Step& step, const std::string& id,
                const RankResults<OpResult>& results,
                const std::set<int>& involved, Outcome& outcome);
  // Completes what the run left in flight and frees what it allocated, so
  // that an experiment can run again on the same cluster.
  void Cleanup();

  // runner_steps.cc: one function per kind of step.
  template <typename T>
  void CollectErrors(const RankResults<T>& results, Outcome& outcome) {
    for (const auto& r : results) {
      if (r.result.ok()) continue;
      const std::string text =
          absl::StrCat("rank ", r.rank, ": ", StatusText(r.result.status()));
      outcome.Fail(text);
      outcome.lines.push_back(text);
    }
  }
  // Allocates on each rank of `allocs` at once (on the worker's own
  // device), remembering what to free; the results in the same order.
  RankResults<TensorInfo> AllocAll(const std::vector<TensorAlloc>& allocs);
  // Writes each rank's values of a write step (or an alloc with values)
  // into its tensor of `numel[rank]` elements, one request per rank, all
  // at once.
  void WriteValues(const Step& step, DType dtype,
                   const std::map<int, int64_t>& numel, Outcome& outcome);
  Outcome Alloc(const Step& step);
  Outcome Write(const Step& step);
  Outcome Collective(const Step& step, const std::string& id);
  Outcome PointToPoint(const Step& step, const std::string& id);
  Outcome Wait(const Step& step);
  Outcome Read(const Step& step);
  Outcome Assert(const Step& step);
  // The first `count` elements of an int64 tensor as they are (its summary's
  // doubles do not hold every int64).
  absl::StatusOr<std::vector<Number>> ExactIntegers(int rank,
                                                    const std::string& name,
                                                    size_t count);
  Outcome Free(const Step& step);
  Outcome Bench(const Step& step);
  void FreeEverywhere(const std::string& name);

  ClusterClient& client_;
  Experiment& experiment_;
  const Globals& globals_;
  const bool keep_;
  std::set<std::pair<int, std::string>> allocated_;
  std::vector<PendingWork> pending_;
  nlohmann::json steps_json_ = nlohmann::json::array();
  nlohmann::json failed_json_;
  std::vector<std::string> cleanup_errors_;
  std::string failure_;
  int total_steps_ = 0;
};

}  // namespace ccl::ctl
