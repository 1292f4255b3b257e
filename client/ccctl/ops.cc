// The collective subcommands (allreduce ... barrier), send, recv, wait, test.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/format.h"
#include "client/ccctl/json.h"

namespace ccl::ctl {
namespace {

struct OpCommand {
  const char* name;
  OpKind kind;
  const char* help;
};

constexpr OpCommand kOpCommands[] = {
    {"allreduce", OpKind::kAllReduce,
     "reduce on every rank, result everywhere"},
    {"broadcast", OpKind::kBroadcast, "copy the root's tensor to every rank"},
    {"reduce", OpKind::kReduce, "reduce onto the root"},
    {"allgather", OpKind::kAllGather, "gather every rank's tensor everywhere"},
    {"reducescatter", OpKind::kReduceScatter,
     "reduce, then each rank keeps its chunk"},
    {"gather", OpKind::kGather, "gather every rank's tensor on the root"},
    {"scatter", OpKind::kScatter, "split the root's tensor across ranks"},
    {"alltoall", OpKind::kAllToAll, "chunk j of every rank goes to rank j"},
    {"barrier", OpKind::kBarrier, "wait until every rank arrives"},
};

struct OpArgs {
  std::string tensor, input, output, op = "sum", dtype = "float32";
  int root = 0;
  int64_t count = 1;
  int64_t limit = 8;
  double scale = 1.0;
  bool async = false;
  bool skip_agreement = false;
};

// How the hello-world mode sizes its temporary tensors: the input holds
// rank+1 in `in_chunks` * count elements, the output `out_chunks` * count.
struct Sizes {
  int64_t in_chunks = 1;
  int64_t out_chunks = 0;  // 0: in place
};

Sizes HelloSizes(OpKind kind, int world) {
  switch (kind) {
    case OpKind::kAllGather:
    case OpKind::kGather:
      return {1, world};
    case OpKind::kReduceScatter:
    case OpKind::kScatter:
      return {world, 1};
    case OpKind::kAllToAll:
      return {world, world};
    default:
      return {1, 0};
  }
}

// Ranks whose result the op defines (torch leaves the others unspecified).
bool ResultDefinedOn(OpKind kind, int rank, int root) {
  if (kind == OpKind::kReduce || kind == OpKind::kGather) return rank == root;
  return true;
}

std::string WorkIdText(int rank, int64_t id) {
  return absl::StrCat(rank, ":", id);
}

void PrintOpResults(const Globals& globals, ClusterClient& client,
                    const RankResults<OpResult>& results,
                    const std::string& result_tensor, OpKind kind, int root,
                    int64_t limit, bool async) {
  // The values of every rank that has them, in one request each.
  std::vector<int> shown;
  if (!async && !result_tensor.empty()) {
    for (const auto& r : results) {
      if (r.result.ok() && ResultDefinedOn(kind, r.rank, root)) {
        shown.push_back(r.rank);
      }
    }
  }
  std::map<int, absl::StatusOr<TensorSummary>> summaries;
  for (auto& s : client.Summarize(shown, result_tensor, limit)) {
    summaries.emplace(s.rank, std::move(s.result));
  }
  nlohmann::json document = nlohmann::json::array();
  Table table(async ? std::vector<std::string>{"RANK", "SEQ", "WORK"}
                    : std::vector<std::string>{"RANK", "VALUES", "TIME_US"});
  for (const auto& r : results) {
    if (!r.result.ok()) continue;
    nlohmann::json entry = {{"rank", r.rank},
                            {"seq", r.result->seq},
                            {"generation", r.result->generation}};
    if (async) {
      entry["work"] = WorkIdText(r.rank, r.result->work_id);
      table.AddRow({absl::StrCat(r.rank), absl::StrCat(r.result->seq),
                    WorkIdText(r.rank, r.result->work_id)});
      document.push_back(entry);
      continue;
    }
    const OpTiming& timing = r.result->timing;
    entry["time_us"] = timing.device_us;
    entry["queue_us"] = timing.queue_us;
    entry["total_us"] = timing.total_us;
    std::string values_text = "-";
    if (auto it = summaries.find(r.rank); it != summaries.end()) {
      const absl::StatusOr<TensorSummary>& summary = it->second;
      if (summary.ok()) {
        const ShownHead head =
            ExactHead(client, r.rank, result_tensor, *summary);
        entry["values"] = head.json;
        values_text = head.Render();
      } else {
        values_text = StatusText(summary.status());
      }
    }
    table.AddRow({absl::StrCat(r.rank), values_text,
                  absl::StrFormat("%.1f", timing.device_us)});
    document.push_back(entry);
  }
  if (globals.json()) {
    PrintJson(document);
  } else {
    std::cout << table.Render();
  }
}

int RunCollective(Globals& globals, const OpCommand& command,
                  const OpArgs& args) {
  auto reduce_op = ParseReduceOp(args.op);
  if (!reduce_op.ok()) return Fail(reduce_op.status(), true);
  auto dtype = ParseDType(args.dtype);
  if (!dtype.ok()) return Fail(dtype.status(), true);
  if (!args.tensor.empty() && (!args.input.empty() || !args.output.empty())) {
    return Fail(absl::InvalidArgumentError(
                    "use either --tensor (in place) or --input/--output"),
                true);
  }
  if (args.count < 1) {
    return Fail(absl::InvalidArgumentError("--count must be at least 1"), true);
  }
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  // Sizes follow the group; --src/--dst stay world ranks (torch's global
  // ranks), which the client translates to group ranks.
  const int world = (*client)->group_size();
  if (HasRoot(command.kind)) {
    if (auto s = (*client)->CheckRanks({args.root}); !s.ok()) {
      return Fail(s, true);
    }
    if (auto member = (*client)->GroupRank(args.root); !member.ok()) {
      return Fail(member.status(), true);
    }
  }

  Op op;
  op.kind = command.kind;
  op.reduce = *reduce_op;
  op.premul_scale = args.scale;
  op.root = args.root;
  op.async = args.async;
  op.skip_agreement = args.skip_agreement;

  // Hello world: temporary tensors holding rank+1, freed afterwards.
  const bool hello = args.tensor.empty() && args.input.empty() &&
                     command.kind != OpKind::kBarrier;
  std::vector<Temporary> temporaries;
  if (hello) {
    const Sizes sizes = HelloSizes(command.kind, world);
    const std::string prefix = TemporaryPrefix("op");
    auto alloc_all = [&](const std::string& name, int64_t numel,
                         FillKind fill) -> absl::Status {
      // On each worker's own device, which the world already names.
      const auto results =
          (*client)->Alloc((*client)->GroupRanks(),
                           TensorSpec{name, *dtype, {numel}}, Fill{fill});
      // Every rank but one that already held the name is ours to free: a
      // rank that failed may still have allocated (a deadline that passed
      // after the worker acted), and the others did.
      Temporary temporary{name, {}};
      absl::Status status;
      for (const auto& r : results) {
        if (!absl::IsAlreadyExists(r.result.status())) {
          temporary.ranks.push_back(r.rank);
        }
        if (!r.result.ok() && status.ok()) {
          // Which rank failed is what a person needs (a stopped or dead
          // worker shows up here first).
          status =
              absl::Status(r.result.status().code(),
                           absl::StrCat("rank ", r.rank, ": allocating ", name,
                                        ": ", r.result.status().message()));
        }
      }
      temporaries.push_back(std::move(temporary));
      return status;
    };
    absl::Status status = alloc_all(prefix + "in", sizes.in_chunks * args.count,
                                    FillKind::kRankPlusOne);
    if (status.ok() && sizes.out_chunks > 0) {
      status = alloc_all(prefix + "out", sizes.out_chunks * args.count,
                         FillKind::kZeros);
    }
    op.input = prefix + "in";
    if (sizes.out_chunks > 0) op.output = prefix + "out";
    if (!status.ok()) {
      FreeTemporaries(**client, temporaries);
      return Fail(status);
    }
  } else if (!args.tensor.empty()) {
    op.input = args.tensor;
  } else {
    op.input = args.input;
    op.output = args.output;
  }

  const auto results = (*client)->Collective(op);
  const bool failed = ReportRankErrors(results);
  const std::string result_tensor =
      command.kind == OpKind::kBarrier
          ? ""
          : (op.output.empty() ? op.input : op.output);
  if (!failed || globals.json()) {
    PrintOpResults(globals, **client, results, result_tensor, command.kind,
                   args.root, args.limit, args.async && !hello);
  }
  if (hello && args.async) {
    // The temporaries must outlive the op: wait before freeing them.
    std::vector<WorkRef> works;
    for (const auto& r : results) {
      if (r.result.ok()) {
        works.push_back({r.rank, r.result->work_id, r.result->worker_id});
      }
    }
    for (const auto& waited :
         (*client)->Wait(works, (*client)->options().timeout)) {
      if (!waited.result.ok()) {
        std::cerr << "ccctl: rank " << waited.rank << ": "
                  << StatusText(waited.result.status()) << "\n";
      }
    }
  }
  const bool freed = FreeTemporaries(**client, temporaries);
  return failed || !freed ? kExitFailure : kExitOk;
}

struct P2PArgs {
  std::string tensor;
  int from = 0, to = 1, rank = -1;
  bool async = false, no_recv = false;
  int64_t limit = 8;
};

int RunSend(Globals& globals, const P2PArgs& args) {
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  if (auto s = (*client)->CheckRanks({args.from, args.to}); !s.ok())
    return Fail(s, true);
  // --from/--to are world ranks; with --group both must be members.
  for (int rank : {args.from, args.to}) {
    if (auto member = (*client)->GroupRank(rank); !member.ok()) {
      return Fail(member.status(), true);
    }
  }
  if (args.from == args.to) {
    return Fail(absl::InvalidArgumentError("--from and --to must differ"),
                true);
  }
  std::map<int, Op> ops;
  Op send;
  send.kind = OpKind::kSend;
  send.input = args.tensor;
  send.peer = args.to;
  send.async = args.async;
  ops[args.from] = send;
  if (!args.no_recv) {
    Op recv;
    recv.kind = OpKind::kRecv;
    recv.input = args.tensor;
    recv.peer = args.from;
    recv.async = args.async;
    ops[args.to] = recv;
  }
  auto results = (*client)->PointToPoint(ops);
  RankResults<OpResult> involved;
  for (auto& r : results) {
    if (ops.count(r.rank)) involved.push_back(std::move(r));
  }
  const bool failed = ReportRankErrors(involved);
  if (!failed || globals.json()) {
    PrintOpResults(globals, **client, involved, args.no_recv ? "" : args.tensor,
                   OpKind::kRecv, args.to, args.limit, args.async);
  }
  return failed ? kExitFailure : kExitOk;
}

int RunRecv(Globals& globals, const P2PArgs& args) {
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  if (auto s = (*client)->CheckRanks({args.from, args.rank}); !s.ok())
    return Fail(s, true);
  for (int rank : {args.from, args.rank}) {
    if (auto member = (*client)->GroupRank(rank); !member.ok()) {
      return Fail(member.status(), true);
    }
  }
  Op recv;
  recv.kind = OpKind::kRecv;
  recv.input = args.tensor;
  recv.peer = args.from;
  recv.async = args.async;
  auto results = (*client)->PointToPoint({{args.rank, recv}});
  RankResults<OpResult> involved;
  for (auto& r : results) {
    if (r.rank == args.rank) involved.push_back(std::move(r));
  }
  const bool failed = ReportRankErrors(involved);
  if (!failed || globals.json()) {
    PrintOpResults(globals, **client, involved, args.tensor, OpKind::kRecv,
                   args.rank, args.limit, args.async);
  }
  return failed ? kExitFailure : kExitOk;
}

// "RANK:ID" as printed by --async.
absl::StatusOr<std::pair<int, int64_t>> ParseWorkId(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  int rank = 0;
  int64_t id = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &rank) ||
      !absl::SimpleAtoi(parts[1], &id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad work id '", text, "'; expected RANK:ID as printed by --async"));
  }
  return std::make_pair(rank, id);
}

int RunWait(Globals& globals, const std::vector<std::string>& ids,
            bool test_only) {
  std::vector<std::pair<int, int64_t>> works;
  for (const auto& text : ids) {
    auto parsed = ParseWorkId(text);
    if (!parsed.ok()) return Fail(parsed.status(), true);
    works.push_back(*parsed);
  }
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  std::vector<WorkRef> refs;
  for (const auto& [rank, id] : works) {
    if (auto s = (*client)->CheckRanks({rank}); !s.ok()) return Fail(s, true);
    refs.push_back({rank, id});
  }
  const auto results =
      test_only ? (*client)->Test(refs)
                : (*client)->Wait(refs, (*client)->options().timeout);
  bool failed = false;
  nlohmann::json document = nlohmann::json::array();
  Table table({"WORK", "OP", "SEQ", "STATE", "TIME_US"});
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const std::string work = WorkIdText(refs[i].rank, refs[i].work_id);
    if (!r.result.ok()) {
      std::cerr << "ccctl: work " << work << ": "
                << StatusText(r.result.status()) << "\n";
      failed = true;
      continue;
    }
    const WorkStatus& status = *r.result;
    nlohmann::json entry = ToJson(status);
    entry["work"] = work;
    entry["rank"] = refs[i].rank;
    document.push_back(entry);
    table.AddRow(
        {work, status.kind ? std::string(OpKindName(*status.kind)) : "?",
         absl::StrCat(status.seq), std::string(WorkStateName(status.state)),
         absl::StrFormat("%.1f", status.timing.device_us)});
  }
  if (globals.json()) {
    PrintJson(document);
  } else {
    std::cout << table.Render();
  }
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void AddOpCommands(CLI::App& app, Globals& globals, int& exit_code) {
  for (const OpCommand& command : kOpCommands) {
    auto args = std::make_shared<OpArgs>();
    auto* sub = app.add_subcommand(command.name, command.help);
    if (command.kind != OpKind::kBarrier) {
      sub->add_option("--tensor,-t", args->tensor,
                      "run in place on this tensor");
      sub->add_option("--input,-i", args->input, "input tensor (out of place)");
      sub->add_option("--output", args->output, "output tensor (out of place)");
      sub->add_option("--count,-c", args->count,
                      "elements of the hello-world tensor (without --tensor)")
          ->capture_default_str();
      sub->add_option("--dtype,-d", args->dtype,
                      "dtype of the hello-world tensor")
          ->capture_default_str();
      sub->add_option("--limit,-n", args->limit, "elements printed per rank")
          ->capture_default_str();
    }
    if (IsReduction(command.kind)) {
      sub->add_option("--op", args->op, "sum, prod, min, max, avg, premul_sum")
          ->capture_default_str();
      sub->add_option("--scale", args->scale, "factor of premul_sum");
    }
    if (command.kind == OpKind::kBroadcast ||
        command.kind == OpKind::kScatter) {
      sub->add_option("--src,--root", args->root,
                      "source rank (a world rank, also with --group)")
          ->capture_default_str();
    }
    if (command.kind == OpKind::kReduce || command.kind == OpKind::kGather) {
      sub->add_option("--dst,--root", args->root,
                      "destination rank (a world rank, also with --group)")
          ->capture_default_str();
    }
    sub->add_flag("--skip-agreement", args->skip_agreement,
                  "don't compare the op across ranks first (saves a small "
                  "exchange per op; a mismatch then hangs or corrupts "
                  "instead of failing cleanly)");
    sub->add_flag("--async", args->async,
                  "return work ids at once (see ccctl wait)");
    sub->callback([&, args, command] {
      exit_code = RunCollective(globals, command, *args);
    });
  }

  auto send_args = std::make_shared<P2PArgs>();
  auto* send = app.add_subcommand(
      "send",
      "send a tensor from one rank to another (with the matching recv)");
  send->add_option("--tensor,-t", send_args->tensor)->required();
  send->add_option("--from", send_args->from)->required();
  send->add_option("--to", send_args->to)->required();
  send->add_flag("--async", send_args->async);
  send->add_flag("--no-recv", send_args->no_recv,
                 "post the send alone (reproduces an unmatched send)");
  send->callback([&, send_args] { exit_code = RunSend(globals, *send_args); });

  auto recv_args = std::make_shared<P2PArgs>();
  auto* recv = app.add_subcommand(
      "recv", "post a lone recv (reproduces the unmatched-recv hang, bounded)");
  recv->add_option("--tensor,-t", recv_args->tensor)->required();
  recv->add_option("--rank,-r", recv_args->rank)->required();
  recv->add_option("--from", recv_args->from)->required();
  recv->add_flag("--async", recv_args->async);
  recv->callback([&, recv_args] { exit_code = RunRecv(globals, *recv_args); });

  auto wait_ids = std::make_shared<std::vector<std::string>>();
  auto* wait = app.add_subcommand("wait", "wait for async work ids (RANK:ID)");
  wait->add_option("ids", *wait_ids)->required();
  wait->callback(
      [&, wait_ids] { exit_code = RunWait(globals, *wait_ids, false); });

  auto test_ids = std::make_shared<std::vector<std::string>>();
  auto* test =
      app.add_subcommand("test", "poll async work ids without waiting");
  test->add_option("ids", *test_ids)->required();
  test->callback(
      [&, test_ids] { exit_code = RunWait(globals, *test_ids, true); });
}

}  // namespace ccl::ctl
