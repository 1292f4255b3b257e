// ccctl debug ops: every rank's flight recorder for a group, side by side,
// and what it says about where the ranks diverge.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/diagnose.h"
#include "client/ccctl/documents.h"
#include "client/ccctl/format.h"
#include "client/ccctl/json.h"

namespace ccl::ctl {
namespace {

std::vector<int> GroupOrWorld(const ClusterClient& client) {
  return client.GroupRanks().empty() ? client.AllRanks() : client.GroupRanks();
}

}  // namespace

nlohmann::json OpsDocument(ClusterClient& client, int limit) {
  const std::vector<int> ranks = GroupOrWorld(client);
  std::vector<OpLog> logs;
  nlohmann::json out = nlohmann::json::array();
  nlohmann::json errors = nlohmann::json::array();
  for (const auto& r : client.OpLogs(ranks, client.group(), limit)) {
    if (r.result.ok()) {
      logs.push_back(*r.result);
      out.push_back(ToJson(*r.result));
    } else {
      errors.push_back(
          {{"rank", r.rank}, {"error", StatusText(r.result.status())}});
    }
  }
  return {{"group", client.group()},
          {"ranks", out},
          {"diagnosis", Diagnose(logs, ranks)},
          {"errors", errors}};
}

namespace {

int DebugOps(Globals& globals, int limit) {
  if (limit < 0) {
    return Fail(absl::InvalidArgumentError("--limit must be >= 0"), true);
  }
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  if (globals.json()) {
    const nlohmann::json document = OpsDocument(**client, limit);
    for (const auto& error : document["errors"]) {
      std::cerr << "ccctl: rank " << error["rank"].get<int>() << ": "
                << error["error"].get<std::string>() << "\n";
    }
    PrintJson(document);
    return document["errors"].empty() ? kExitOk : kExitFailure;
  }
  const std::vector<int> ranks = GroupOrWorld(**client);
  const auto results = (*client)->OpLogs(ranks, globals.group, limit);
  const bool failed = ReportRankErrors(results);
  std::vector<OpLog> logs;
  for (const auto& r : results) {
    if (r.result.ok()) logs.push_back(*r.result);
  }
  const std::vector<std::string> diagnosis = Diagnose(logs, ranks);
  Table table({"RANK", "SEQ", "OP", "STATE", "TIME_US", "AGE", "ERROR"});
  for (const OpLog& log : logs) {
    for (const OpRecord& record : log.records) {
      const double age_s =
          (log.now_unix_us - record.timing.enqueued_unix_us) / 1e6;
      std::string error;
      if (!record.error.ok()) {
        error =
            absl::StrCat(absl::StatusCodeToString(record.error.code()), ": ",
                         std::string(record.error.message()).substr(0, 80));
      }
      table.AddRow(
          {absl::StrCat(log.rank), absl::StrCat(record.seq),
           DescribeRecord(record), std::string(WorkStateName(record.state)),
           absl::StrFormat("%.1f", record.timing.device_us),
           record.timing.enqueued_unix_us > 0 ? absl::StrFormat("%.1fs", age_s)
                                              : "-",
           error});
    }
  }
  std::cout << "group " << globals.group << ", last " << limit
            << " ops per rank\n\n"
            << table.Render() << "\n";
  for (const std::string& line : diagnosis) std::cout << "- " << line << "\n";
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void AddDebugCommands(CLI::App& app, Globals& globals, int& exit_code) {
  auto* debug = app.add_subcommand("debug", "look inside a running cluster");
  debug->require_subcommand(1);
  auto limit = std::make_shared<int>(10);
  auto* ops = debug->add_subcommand(
      "ops", "every rank's last ops of a group, and where the ranks diverge");
  ops->add_option("--limit,-n", *limit, "ops per rank")->capture_default_str();
  ops->callback([&, limit] { exit_code = DebugOps(globals, *limit); });
  AddDebugTraceCommand(*debug, globals, exit_code);
}

}  // namespace ccl::ctl
