// The collective subcommands (allreduce ... barrier), send, recv, wait, test.
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/format.h"
#include "common/proto_convert.h"

namespace ccl::ctl {
namespace {

struct OpCommand {
  const char* name;
  v1::OpKind kind;
  const char* help;
};

constexpr OpCommand kOpCommands[] = {
    {"allreduce", v1::OP_KIND_ALL_REDUCE,
     "reduce on every rank, result everywhere"},
    {"broadcast", v1::OP_KIND_BROADCAST,
     "copy the root's tensor to every rank"},
    {"reduce", v1::OP_KIND_REDUCE, "reduce onto the root"},
    {"allgather", v1::OP_KIND_ALL_GATHER,
     "gather every rank's tensor everywhere"},
    {"reducescatter", v1::OP_KIND_REDUCE_SCATTER,
     "reduce, then each rank keeps its chunk"},
    {"gather", v1::OP_KIND_GATHER, "gather every rank's tensor on the root"},
    {"scatter", v1::OP_KIND_SCATTER, "split the root's tensor across ranks"},
    {"alltoall", v1::OP_KIND_ALL_TO_ALL,
     "chunk j of every rank goes to rank j"},
    {"barrier", v1::OP_KIND_BARRIER, "wait until every rank arrives"},
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

Sizes HelloSizes(v1::OpKind kind, int world) {
  switch (kind) {
    case v1::OP_KIND_ALL_GATHER:
    case v1::OP_KIND_GATHER:
      return {1, world};
    case v1::OP_KIND_REDUCE_SCATTER:
    case v1::OP_KIND_SCATTER:
      return {world, 1};
    case v1::OP_KIND_ALL_TO_ALL:
      return {world, world};
    default:
      return {1, 0};
  }
}

// Ranks whose result the op defines (torch leaves the others unspecified).
bool ResultDefinedOn(v1::OpKind kind, int rank, int root) {
  if (kind == v1::OP_KIND_REDUCE || kind == v1::OP_KIND_GATHER)
    return rank == root;
  return true;
}

std::string WorkIdText(int rank, int64_t id) {
  return absl::StrCat(rank, ":", id);
}

void PrintOpResults(const Globals& globals, ClusterClient& client,
                    const std::vector<RankResult<v1::OpResponse>>& results,
                    const std::string& result_tensor, v1::OpKind kind, int root,
                    int64_t limit, bool async) {
  nlohmann::json document = nlohmann::json::array();
  Table table(async ? std::vector<std::string>{"RANK", "SEQ", "WORK"}
                    : std::vector<std::string>{"RANK", "VALUES", "TIME_US"});
  for (const auto& r : results) {
    if (!r.result.ok()) continue;
    nlohmann::json entry = {{"rank", r.rank},
                            {"seq", r.result->seq()},
                            {"generation", r.result->generation()}};
    if (async) {
      entry["work"] = WorkIdText(r.rank, r.result->work_id());
      table.AddRow({absl::StrCat(r.rank), absl::StrCat(r.result->seq()),
                    WorkIdText(r.rank, r.result->work_id())});
      document.push_back(entry);
      continue;
    }
    const auto& timing = r.result->timing();
    entry["time_us"] = timing.device_us();
    entry["queue_us"] = timing.queue_us();
    entry["total_us"] = timing.total_us();
    std::string values_text = "-";
    if (!result_tensor.empty() && ResultDefinedOn(kind, r.rank, root)) {
      auto summary = client.Summarize(r.rank, result_tensor, limit);
      if (summary.ok()) {
        std::vector<double> head(summary->head().begin(),
                                 summary->head().end());
        auto dtype = FromProto(summary->info().spec().dtype());
        entry["values"] = head;
        values_text = FormatValues(
            head, dtype.ok() ? *dtype : DType::kFloat64,
            summary->info().numel() > static_cast<int64_t>(head.size()));
      } else {
        values_text = StatusText(summary.status());
      }
    }
    table.AddRow({absl::StrCat(r.rank), values_text,
                  absl::StrFormat("%.1f", timing.device_us())});
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
  if (command.kind == v1::OP_KIND_BROADCAST ||
      command.kind == v1::OP_KIND_SCATTER ||
      command.kind == v1::OP_KIND_REDUCE ||
      command.kind == v1::OP_KIND_GATHER) {
    if (auto s = (*client)->CheckRanks({args.root}); !s.ok()) {
      return Fail(s, true);
    }
    if (auto member = (*client)->GroupRank(args.root); !member.ok()) {
      return Fail(member.status(), true);
    }
  }

  v1::OpRequest op;
  op.set_kind(command.kind);
  op.set_reduce_op(ToProto(*reduce_op));
  op.set_premul_scale(args.scale);
  op.set_root(args.root);
  op.set_async(args.async);
  op.set_skip_agreement(args.skip_agreement);

  // Hello world: temporary tensors holding rank+1, freed afterwards.
  const bool hello = args.tensor.empty() && args.input.empty() &&
                     command.kind != v1::OP_KIND_BARRIER;
  std::vector<Temporary> temporaries;
  if (hello) {
    const Sizes sizes = HelloSizes(command.kind, world);
    const std::string prefix = TemporaryPrefix("op");
    auto alloc_all = [&](const std::string& name, int64_t numel,
                         v1::FillKind fill) -> absl::Status {
      auto results = (*client)->FanOut<v1::TensorInfo>(
          (*client)->GroupRanks(), [&](int rank) {
            auto info = (*client)->Info(rank);
            if (!info.ok())
              return absl::StatusOr<v1::TensorInfo>(info.status());
            v1::AllocTensorRequest request;
            request.mutable_spec()->set_name(name);
            request.mutable_spec()->set_dtype(ToProto(*dtype));
            request.mutable_spec()->add_shape(numel);
            *request.mutable_spec()->mutable_device() = info->device();
            request.mutable_fill()->set_kind(fill);
            return (*client)->Alloc(rank, request);
          });
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
          status = absl::Status(
              r.result.status().code(),
              absl::StrCat("rank ", r.rank, ": allocating ", name, ": ",
                           r.result.status().message()));
        }
      }
      temporaries.push_back(std::move(temporary));
      return status;
    };
    absl::Status status = alloc_all(prefix + "in", sizes.in_chunks * args.count,
                                    v1::FILL_KIND_RANK_PLUS_ONE);
    if (status.ok() && sizes.out_chunks > 0) {
      status = alloc_all(prefix + "out", sizes.out_chunks * args.count,
                         v1::FILL_KIND_ZEROS);
    }
    op.set_input(prefix + "in");
    if (sizes.out_chunks > 0) op.set_output(prefix + "out");
    if (!status.ok()) {
      FreeTemporaries(**client, temporaries);
      return Fail(status);
    }
  } else if (!args.tensor.empty()) {
    op.set_input(args.tensor);
  } else {
    op.set_input(args.input);
    op.set_output(args.output);
  }

  auto results = (*client)->Collective(op);
  const bool failed = ReportRankErrors(results);
  const std::string result_tensor =
      command.kind == v1::OP_KIND_BARRIER
          ? ""
          : (op.output().empty() ? op.input() : op.output());
  if (!failed || globals.json()) {
    PrintOpResults(globals, **client, results, result_tensor, command.kind,
                   args.root, args.limit, args.async && !hello);
  }
  if (hello && args.async) {
    // The temporaries must outlive the op: wait before freeing them.
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      auto waited = (*client)->Wait(r.rank, r.result->work_id(),
                                    (*client)->options().timeout);
      if (!waited.ok()) {
        std::cerr << "ccctl: rank " << r.rank << ": "
                  << StatusText(waited.status()) << "\n";
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
  std::map<int, v1::OpRequest> ops;
  v1::OpRequest send;
  send.set_kind(v1::OP_KIND_SEND);
  send.set_input(args.tensor);
  send.set_peer(args.to);
  send.set_async(args.async);
  ops[args.from] = send;
  if (!args.no_recv) {
    v1::OpRequest recv;
    recv.set_kind(v1::OP_KIND_RECV);
    recv.set_input(args.tensor);
    recv.set_peer(args.from);
    recv.set_async(args.async);
    ops[args.to] = recv;
  }
  auto results = (*client)->PointToPoint(ops);
  std::vector<RankResult<v1::OpResponse>> involved;
  for (auto& r : results) {
    if (ops.count(r.rank)) involved.push_back(std::move(r));
  }
  const bool failed = ReportRankErrors(involved);
  if (!failed || globals.json()) {
    PrintOpResults(globals, **client, involved, args.no_recv ? "" : args.tensor,
                   v1::OP_KIND_RECV, args.to, args.limit, args.async);
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
  v1::OpRequest recv;
  recv.set_kind(v1::OP_KIND_RECV);
  recv.set_input(args.tensor);
  recv.set_peer(args.from);
  recv.set_async(args.async);
  auto results = (*client)->PointToPoint({{args.rank, recv}});
  std::vector<RankResult<v1::OpResponse>> involved;
  for (auto& r : results) {
    if (r.rank == args.rank) involved.push_back(std::move(r));
  }
  const bool failed = ReportRankErrors(involved);
  if (!failed || globals.json()) {
    PrintOpResults(globals, **client, involved, args.tensor, v1::OP_KIND_RECV,
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
  std::vector<int> indexes;
  for (size_t i = 0; i < works.size(); ++i) {
    if (auto s = (*client)->CheckRanks({works[i].first}); !s.ok())
      return Fail(s, true);
    indexes.push_back(static_cast<int>(i));
  }
  auto results = (*client)->FanOut<v1::WorkStatus>(indexes, [&](int i) {
    const auto& [rank, id] = works[i];
    return test_only ? (*client)->Test(rank, id)
                     : (*client)->Wait(rank, id, (*client)->options().timeout);
  });
  bool failed = false;
  nlohmann::json document = nlohmann::json::array();
  Table table({"WORK", "OP", "SEQ", "STATE", "TIME_US"});
  for (const auto& r : results) {
    const auto& [rank, id] = works[r.rank];
    const std::string work = WorkIdText(rank, id);
    if (!r.result.ok()) {
      std::cerr << "ccctl: work " << work << ": "
                << StatusText(r.result.status()) << "\n";
      failed = true;
      continue;
    }
    auto kind = FromProto(r.result->kind());
    nlohmann::json entry = ProtoToJson(*r.result);
    entry["work"] = work;
    entry["rank"] = rank;
    document.push_back(entry);
    table.AddRow({work, kind.ok() ? std::string(OpKindName(*kind)) : "?",
                  absl::StrCat(r.result->seq()),
                  WorkStateName(r.result->state()),
                  absl::StrFormat("%.1f", r.result->timing().device_us())});
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
    if (command.kind != v1::OP_KIND_BARRIER) {
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
    if (command.kind == v1::OP_KIND_ALL_REDUCE ||
        command.kind == v1::OP_KIND_REDUCE ||
        command.kind == v1::OP_KIND_REDUCE_SCATTER) {
      sub->add_option("--op", args->op, "sum, prod, min, max, avg, premul_sum")
          ->capture_default_str();
      sub->add_option("--scale", args->scale, "factor of premul_sum");
    }
    if (command.kind == v1::OP_KIND_BROADCAST ||
        command.kind == v1::OP_KIND_SCATTER) {
      sub->add_option("--src,--root", args->root,
                      "source rank (a world rank, also with --group)")
          ->capture_default_str();
    }
    if (command.kind == v1::OP_KIND_REDUCE ||
        command.kind == v1::OP_KIND_GATHER) {
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
