// ccctl run EXPERIMENT.yaml: scripted experiments. The document is parsed and
// validated in full (experiment.h) before any request reaches a worker; the
// steps then run in order and the run stops at the first failed one.
#include "absl/strings/str_cat.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/experiment.h"
#include "client/ccctl/runner.h"

namespace ccl::ctl {
namespace {

struct RunArgs {
  std::string file;
  bool check = false;
  bool keep = false;
  int world_size = 2;
  std::vector<std::string> sets;
};

absl::StatusOr<Vars> ParseSets(const std::vector<std::string>& sets) {
  Vars vars;
  for (const auto& set : sets) {
    const size_t eq = set.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bad --set '", set, "'; expected NAME=VALUE"));
    }
    auto value = EvaluateExpression(set.substr(eq + 1), {});
    if (!value.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--set ", set, ": ", value.status().message()));
    }
    vars[set.substr(0, eq)] = *value;
  }
  return vars;
}

int RunExperiment(Globals& globals, const RunArgs& args) {
  auto experiment = LoadExperiment(args.file);
  if (!experiment.ok()) return Fail(experiment.status(), true);
  auto overrides = ParseSets(args.sets);
  if (!overrides.ok()) return Fail(overrides.status(), true);
  if (args.check) {
    if (auto s = ResolveExperiment(*experiment, args.world_size, *overrides);
        !s.ok()) {
      return Fail(s, true);
    }
    if (globals.json()) {
      PrintJson({{"file", args.file},
                 {"ok", true},
                 {"steps", experiment->steps.size()},
                 {"world_size", args.world_size}});
    } else {
      std::cout << args.file << ": ok (" << experiment->steps.size()
                << " steps, checked for " << args.world_size << " ranks)\n";
    }
    return kExitOk;
  }
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  if (auto s =
          ResolveExperiment(*experiment, (*client)->world_size(), *overrides);
      !s.ok()) {
    return Fail(s, true);
  }
  return Runner(**client, *experiment, globals, args.keep).Run();
}

}  // namespace

void AddRunCommand(CLI::App& app, Globals& globals, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  auto* run = app.add_subcommand(
      "run", "run a scripted experiment (YAML: vars and steps; see examples/)");
  run->add_option("experiment", args->file, "the experiment's YAML file")
      ->required();
  run->add_flag(
      "--check", args->check,
      "only validate the file (no cluster needed), for --world-size ranks");
  run->add_option("--world-size", args->world_size,
                  "world size assumed by --check")
      ->capture_default_str();
  run->add_option("--set", args->sets,
                  "override a var: NAME=VALUE (repeatable)");
  run->add_flag("--keep", args->keep,
                "keep the tensors the experiment allocated");
  run->footer("Steps: " + StepKindList() +
              ".\nExpected values may be expressions in rank, world_size, i "
              "(element index) "
              "and the vars.\nExit codes: 0 every step passed, 1 a step "
              "failed, 2 bad file.");
  run->callback([&, args] { exit_code = RunExperiment(globals, *args); });
}

}  // namespace ccl::ctl
