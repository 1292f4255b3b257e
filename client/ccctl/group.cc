// `ccctl group create NAME --ranks 0,2`, `ccctl group destroy NAME` and
// `ccctl group ls`: subgroups of the world, as torch.distributed.new_group
// and destroy_process_group. Ranks are world ranks; inside
// a group they are numbered 0..k-1 in the order given.
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/format.h"
#include "client/ccctl/json.h"

namespace ccl::ctl {
namespace {

struct GroupArgs {
  std::string name;
  std::string ranks;
};

std::string RanksText(const GroupInfo& group) {
  return absl::StrJoin(group.ranks, ",");
}

// One entry per rank: `to_json` of its result, or its error, with "rank".
template <typename T, typename ToJsonFn>
nlohmann::json PerRankJson(const RankResults<T>& results, ToJsonFn to_json) {
  nlohmann::json document = nlohmann::json::array();
  for (const auto& r : results) {
    nlohmann::json entry =
        r.result.ok()
            ? to_json(*r.result)
            : nlohmann::json{{"error", StatusText(r.result.status())}};
    entry["rank"] = r.rank;
    document.push_back(std::move(entry));
  }
  return document;
}

int CreateGroup(Globals& globals, const GroupArgs& args) {
  auto parsed = ParseIntList(args.ranks);
  if (!parsed.ok()) return Fail(parsed.status(), true);
  std::vector<int> ranks(parsed->begin(), parsed->end());
  Globals world = globals;
  world.group = "world";  // the split is an op of the world group
  auto client = Connect(world);
  if (!client.ok()) return Fail(client.status());
  auto results = (*client)->CreateGroup(args.name, ranks);
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    PrintJson(PerRankJson(
        results, [](const GroupInfo& group) { return ToJson(group); }));
  } else if (!failed) {
    std::cout << "group " << args.name << ": world ranks "
              << absl::StrJoin(ranks, ",") << " are group ranks 0.."
              << ranks.size() - 1 << "\n";
  }
  return failed ? kExitFailure : kExitOk;
}

int DestroyGroup(Globals& globals, const std::string& name) {
  Globals world = globals;
  world.group = "world";  // every worker holds a view of the group
  auto client = Connect(world);
  if (!client.ok()) return Fail(client.status());
  auto results = (*client)->DestroyGroup(name);
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    PrintJson(PerRankJson(results, [](const std::string& destroyed) {
      return nlohmann::json{{"destroyed", destroyed}};
    }));
  } else if (!failed) {
    std::cout << "group " << name << ": destroyed on every rank\n";
  }
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

// One row per group, merged over the workers' views: the member ranks'
// group ranks, next seqs and states.
void PrintGroups(const RankResults<WorkerInfo>& infos) {
  struct Row {
    GroupInfo info;
    std::map<std::string, int> states;
    int64_t min_seq = -1, max_seq = -1;
  };
  std::vector<Row> rows;
  for (const auto& r : infos) {
    if (!r.result.ok()) continue;
    for (const GroupInfo& group : r.result->groups) {
      Row* row = nullptr;
      for (auto& existing : rows) {
        if (existing.info.name == group.name) row = &existing;
      }
      if (!row) {
        rows.push_back(Row{group, {}, -1, -1});
        row = &rows.back();
      }
      if (group.group_rank < 0) continue;
      row->states[group.state]++;
      if (row->min_seq < 0 || group.next_seq < row->min_seq)
        row->min_seq = group.next_seq;
      row->max_seq = std::max(row->max_seq, group.next_seq);
      row->info.backend = group.backend;
    }
  }
  Table table({"GROUP", "WORLD RANKS", "SIZE", "BACKEND", "NEXT SEQ", "STATE"});
  for (const auto& row : rows) {
    std::vector<std::string> states;
    for (const auto& [state, n] : row.states) {
      states.push_back(absl::StrCat(state, " x", n));
    }
    table.AddRow({row.info.name, RanksText(row.info),
                  absl::StrCat(row.info.ranks.size()), row.info.backend,
                  row.min_seq == row.max_seq
                      ? absl::StrCat(row.min_seq)
                      : absl::StrCat(row.min_seq, "..", row.max_seq),
                  states.empty() ? "-" : absl::StrJoin(states, ", ")});
  }
  std::cout << table.Render();
}

void AddGroupCommands(CLI::App& app, Globals& globals, int& exit_code) {
  auto* group = app.add_subcommand(
      "group", "subgroups of the world (torch.distributed.new_group)");
  group->require_subcommand(1);

  auto args = std::make_shared<GroupArgs>();
  auto* create = group->add_subcommand(
      "create",
      "make a subgroup of the given world ranks (every worker takes part); "
      "then run ops on it with --group NAME");
  create->add_option("name", args->name, "the group's name")->required();
  create
      ->add_option("--ranks,-r", args->ranks,
                   "world ranks, comma-separated; group rank i is the i-th")
      ->required();
  create->callback([&, args] { exit_code = CreateGroup(globals, *args); });

  auto destroyed = std::make_shared<std::string>();
  auto* destroy = group->add_subcommand(
      "destroy",
      "drop a subgroup on every worker, once no op of it is outstanding; it "
      "is not made again at re-forms");
  destroy->add_option("name", *destroyed, "the group's name")->required();
  destroy->callback(
      [&, destroyed] { exit_code = DestroyGroup(globals, *destroyed); });

  auto* ls = group->add_subcommand("ls", "list the groups the workers know");
  ls->callback([&] {
    Globals world = globals;
    world.group = "world";
    auto client = Connect(world);
    if (!client.ok()) {
      exit_code = Fail(client.status());
      return;
    }
    const auto infos = (*client)->Info((*client)->AllRanks());
    const bool failed = ReportRankErrors(infos);
    if (globals.json()) {
      auto groups = (*client)->Groups();
      nlohmann::json document = nlohmann::json::array();
      if (groups.ok()) {
        for (const auto& g : *groups) document.push_back(ToJson(g));
      }
      PrintJson(document);
    } else {
      PrintGroups(infos);
    }
    exit_code = failed ? kExitFailure : kExitOk;
  });
}

}  // namespace ccl::ctl
