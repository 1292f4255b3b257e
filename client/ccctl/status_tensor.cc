// ccctl status and ccctl tensor alloc|write|read|free|ls.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/documents.h"
#include "client/ccctl/format.h"
#include "client/ccctl/json.h"
#include "client/ccctl/values.h"

namespace ccl::ctl {
namespace {

std::string ShapeText(const TensorInfo& info) {
  return absl::StrCat("[", absl::StrJoin(info.shape, ","), "]");
}

// --ranks "0,2" or every rank.
absl::StatusOr<std::vector<int>> SelectRanks(const ClusterClient& client,
                                             const std::string& ranks_text) {
  if (ranks_text.empty() || ranks_text == "all") return client.AllRanks();
  auto parsed = ParseIntList(ranks_text);
  if (!parsed.ok()) return parsed.status();
  std::vector<int> ranks(parsed->begin(), parsed->end());
  if (absl::Status status = client.CheckRanks(ranks); !status.ok())
    return status;
  return ranks;
}

// The client and the ranks --ranks names: what every per-rank tensor
// command starts with. Empty when either fails, `exit_status` then Fail's.
struct RankedClient {
  std::unique_ptr<ClusterClient> client;
  std::vector<int> ranks;
};
std::optional<RankedClient> ConnectToRanks(const Globals& globals,
                                           const std::string& ranks_text,
                                           int& exit_status) {
  auto client = Connect(globals);
  if (!client.ok()) {
    exit_status = Fail(client.status());
    return std::nullopt;
  }
  auto ranks = SelectRanks(**client, ranks_text);
  if (!ranks.ok()) {
    exit_status = Fail(ranks.status(), true);
    return std::nullopt;
  }
  return RankedClient{*std::move(client), *std::move(ranks)};
}

// One JSON object per rank that answered: `entry` of its answer, with the
// rank added.
template <typename T, typename Entry>
nlohmann::json PerRankJson(const RankResults<T>& results, Entry entry) {
  nlohmann::json document = nlohmann::json::array();
  for (const auto& r : results) {
    if (!r.result.ok()) continue;
    nlohmann::json one = entry(*r.result, r.rank);
    one["rank"] = r.rank;
    document.push_back(std::move(one));
  }
  return document;
}

}  // namespace

nlohmann::json WorldDocument(ClusterClient& client) {
  nlohmann::json document = ToJson(client.world());
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& info : client.Info(client.AllRanks())) {
    workers.push_back(
        info.result.ok()
            ? ToJson(*info.result)
            : nlohmann::json{{"rank", info.rank},
                             {"error", StatusText(info.result.status())}});
  }
  document["workers"] = workers;
  return document;
}

namespace {

int Status(Globals& globals) {
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  if (globals.json()) {
    PrintJson(WorldDocument(**client));
    return kExitOk;
  }
  const World& world = (*client)->world();
  const auto infos = (*client)->Info((*client)->AllRanks());
  std::cout << "coordinator: " << (*client)->options().coordinator
            << "\ngeneration:  " << world.generation
            << "\nworld size:  " << world.world_size << " ("
            << WorldStateName(world.state) << ")\n";
  if (!world.reforming_reason.empty()) {
    std::cout << "re-forming:  " << world.reforming_reason << "\n";
  }
  std::cout << "\n";
  // HOST is what NCCL tells hosts apart by: ranks that share one talk
  // within it (NVLink, shared memory), others over the network.
  Table table({"RANK", "ADDRESS", "HOST", "DEVICE", "STATE", "HEARTBEAT",
               "BACKEND", "TENSORS", "BYTES"});
  for (const auto& member : world.members) {
    std::string backend = "-", tensors = "-", bytes = "-";
    for (const auto& info : infos) {
      if (info.rank != member.rank) continue;
      if (info.result.ok()) {
        backend = info.result->backend;
        tensors = absl::StrCat(info.result->tensor_count);
        bytes = FormatBytes(info.result->tensor_bytes);
      } else {
        backend = absl::StatusCodeToString(info.result.status().code());
      }
    }
    table.AddRow({absl::StrCat(member.rank), member.address,
                  member.host_id.empty() ? member.host
                                         : absl::StrCat("id:", member.host_id),
                  DeviceName(member.device),
                  std::string(MemberStateName(member.state)),
                  absl::StrCat(member.last_seen_age_ms, "ms ago"), backend,
                  tensors, bytes});
  }
  std::cout << table.Render() << "\n";
  PrintGroups(infos);
  return kExitOk;
}

struct AllocArgs {
  std::string name, shape = "1", dtype = "float32", fill = "zeros", ranks,
                    device;
  double value = 0, rank_scale = 0, step = 0;
  uint64_t seed = 0;
};

absl::StatusOr<Fill> ParseFill(const std::string& text, double value,
                               double rank_scale, double step, uint64_t seed) {
  Fill fill{FillKind::kZeros, value, rank_scale, step, seed};
  if (auto kind = FillKindByName(text)) {
    fill.kind = *kind;
    return fill;
  }
  // A bare number is a constant fill.
  double constant = 0;
  std::istringstream in(text);
  if (in >> constant && in.eof()) {
    fill.kind = FillKind::kConstant;
    fill.value = constant;
    return fill;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown fill '", text,
      "'; expected zeros, ones, constant (with --value), a number, rank, "
      "rank+1, arange, arange+rank, affine (with --value, --rank-scale, "
      "--step), random (with --seed) or empty"));
}

int Alloc(Globals& globals, const AllocArgs& args) {
  auto shape = ParseIntList(args.shape);
  if (!shape.ok()) return Fail(shape.status(), true);
  auto dtype = ParseDType(args.dtype);
  if (!dtype.ok()) return Fail(dtype.status(), true);
  auto fill =
      ParseFill(args.fill, args.value, args.rank_scale, args.step, args.seed);
  if (!fill.ok()) return Fail(fill.status(), true);
  int exit_status = kExitOk;
  auto target = ConnectToRanks(globals, args.ranks, exit_status);
  if (!target) return exit_status;
  // Tensors live on the worker's own device unless told otherwise.
  TensorSpec spec{args.name, *dtype, *shape, std::nullopt};
  if (!args.device.empty()) {
    auto device = ParseDevice(args.device);
    if (!device.ok()) return Fail(device.status(), true);
    spec.device = *device;
  }
  const auto results = target->client->Alloc(target->ranks, spec, *fill);
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    PrintJson(PerRankJson(results, [](const TensorInfo& info, int) {
      return nlohmann::json{{"tensor", ToJson(info)}};
    }));
  } else {
    Table table({"RANK", "NAME", "DTYPE", "SHAPE", "DEVICE", "BYTES"});
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      const TensorInfo& info = *r.result;
      table.AddRow({absl::StrCat(r.rank), info.name,
                    std::string(DTypeName(info.dtype)), ShapeText(info),
                    DeviceName(info.device), FormatBytes(info.bytes)});
    }
    std::cout << table.Render();
  }
  return failed ? kExitFailure : kExitOk;
}

struct WriteArgs {
  std::string name, values, file;
  int rank = 0;
  int64_t offset = 0;
};

int Write(Globals& globals, const WriteArgs& args) {
  if (args.values.empty() == args.file.empty()) {
    return Fail(absl::InvalidArgumentError(
                    "tensor write needs exactly one of --values and --file"),
                true);
  }
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  if (auto s = (*client)->CheckRanks({args.rank}); !s.ok())
    return Fail(s, true);
  // The dtype from the tensor list, not a SummarizeTensor: that one folds
  // the whole tensor (0.17 s of a 64 MiB write's 2 s) for a field.
  auto listed = (*client)->List(args.rank);
  if (!listed.ok()) return Fail(listed.status());
  auto meta = std::find_if(
      listed->tensors.begin(), listed->tensors.end(),
      [&](const TensorInfo& info) { return info.name == args.name; });
  if (meta == listed->tensors.end()) {
    return Fail(absl::NotFoundError(absl::StrCat(
        "rank ", args.rank, ": no tensor named '", args.name, "'")));
  }
  const DType dtype = meta->dtype;
  const size_t element = DTypeSize(dtype);
  std::string bytes;
  if (!args.file.empty()) {
    std::ifstream in(args.file, std::ios::binary | std::ios::ate);
    if (!in) {
      return Fail(absl::NotFoundError(absl::StrCat("cannot read ", args.file)),
                  true);
    }
    // One read of the whole file (an istreambuf_iterator goes a byte at a
    // time).
    bytes.resize(static_cast<size_t>(in.tellg()));
    in.seekg(0);
    if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
      return Fail(absl::DataLossError(absl::StrCat("cannot read ", args.file)),
                  true);
    }
  } else {
    auto encoded = EncodeValues(dtype, args.values);
    if (!encoded.ok()) return Fail(encoded.status(), true);
    bytes = *std::move(encoded);
  }
  auto info = (*client)->Write(
      args.rank, args.name, args.offset * static_cast<int64_t>(element), bytes);
  if (!info.ok()) return Fail(info.status());
  if (globals.json()) {
    PrintJson({{"rank", args.rank},
               {"written_bytes", bytes.size()},
               {"tensor", ToJson(*info)}});
  } else {
    std::cout << "rank " << args.rank << ": wrote " << bytes.size()
              << " bytes into " << args.name << "\n";
  }
  return kExitOk;
}

struct ReadArgs {
  std::string name, ranks;
  int64_t limit = 16;
};

int Read(Globals& globals, const ReadArgs& args) {
  int exit_status = kExitOk;
  auto target = ConnectToRanks(globals, args.ranks, exit_status);
  if (!target) return exit_status;
  ClusterClient& client = *target->client;
  const auto results = client.Summarize(target->ranks, args.name, args.limit);
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    PrintJson(PerRankJson(results, [&](const TensorSummary& summary, int rank) {
      nlohmann::json entry = ToJson(summary);
      entry["values"] = ExactHead(client, rank, args.name, summary).json;
      return entry;
    }));
  } else {
    Table table({"RANK", "DTYPE", "SHAPE", "VALUES", "SUM", "MIN", "MAX"});
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      const TensorSummary& summary = *r.result;
      const DType shown = summary.info.dtype;
      const std::string values =
          ExactHead(client, r.rank, args.name, summary).Render();
      // Sum, min and max are the worker's, as doubles: beyond 2^53 an int64
      // one is near, not exact, and says so.
      auto approximate = [&](double value, DType dtype) {
        std::string text = FormatValue(value, dtype);
        if (!DoubleHoldsEveryValue(shown) &&
            std::fabs(value) > 9007199254740992.0) {
          text = "~" + text;
        }
        return text;
      };
      table.AddRow(
          {absl::StrCat(r.rank), std::string(DTypeName(shown)),
           ShapeText(summary.info), values,
           approximate(summary.sum,
                       IsFloatingPoint(shown) ? DType::kFloat64 : shown),
           approximate(summary.min, shown), approximate(summary.max, shown)});
    }
    std::cout << table.Render();
  }
  return failed ? kExitFailure : kExitOk;
}

int Free(Globals& globals, const std::string& name,
         const std::string& ranks_text) {
  int exit_status = kExitOk;
  auto target = ConnectToRanks(globals, ranks_text, exit_status);
  if (!target) return exit_status;
  const auto results = target->client->Free(target->ranks, name);
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    PrintJson(PerRankJson(results, [](int64_t freed, int) {
      return nlohmann::json{{"freed_bytes", freed}};
    }));
  } else {
    for (const auto& r : results) {
      if (r.result.ok()) {
        std::cout << "rank " << r.rank << ": freed " << name << " ("
                  << FormatBytes(*r.result) << ")\n";
      }
    }
  }
  return failed ? kExitFailure : kExitOk;
}

int List(Globals& globals, const std::string& ranks_text) {
  int exit_status = kExitOk;
  auto target = ConnectToRanks(globals, ranks_text, exit_status);
  if (!target) return exit_status;
  const auto results = target->client->List(target->ranks);
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    PrintJson(PerRankJson(
        results, [](const TensorList& list, int) { return ToJson(list); }));
  } else {
    Table table({"RANK", "NAME", "DTYPE", "SHAPE", "DEVICE", "BYTES"});
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      for (const TensorInfo& tensor : r.result->tensors) {
        table.AddRow({absl::StrCat(r.rank), tensor.name,
                      std::string(DTypeName(tensor.dtype)), ShapeText(tensor),
                      DeviceName(tensor.device), FormatBytes(tensor.bytes)});
      }
    }
    std::cout << table.Render();
  }
  return failed ? kExitFailure : kExitOk;
}

}  // namespace

void AddStatusCommand(CLI::App& app, Globals& globals, int& exit_code) {
  auto* status = app.add_subcommand(
      "status", "the world: generation, ranks, addresses, devices, states");
  status->callback([&] { exit_code = Status(globals); });
}

void AddTensorCommands(CLI::App& app, Globals& globals, int& exit_code) {
  auto* tensor =
      app.add_subcommand("tensor", "allocate, write, read, free, list tensors");
  tensor->require_subcommand(1);

  auto alloc_args = std::make_shared<AllocArgs>();
  auto* alloc = tensor->add_subcommand("alloc", "allocate a tensor on ranks");
  alloc->add_option("name", alloc_args->name, "tensor name")->required();
  alloc->add_option("--shape", alloc_args->shape, "e.g. 2,3")
      ->capture_default_str();
  alloc->add_option("--dtype,-d", alloc_args->dtype)->capture_default_str();
  alloc
      ->add_option("--fill", alloc_args->fill,
                   "zeros, ones, constant, rank, rank+1, arange, arange+rank, "
                   "random, empty, or a number")
      ->capture_default_str();
  alloc->add_option("--value", alloc_args->value, "value of a constant fill");
  alloc->add_option("--seed", alloc_args->seed, "seed of a random fill");
  alloc->add_option("--rank-scale", alloc_args->rank_scale,
                    "affine fill: value + rank * rank-scale + i * step");
  alloc->add_option("--step", alloc_args->step,
                    "affine fill: see --rank-scale");
  alloc->add_option("--ranks", alloc_args->ranks, "e.g. 0,2 (default: all)");
  alloc->add_option("--device", alloc_args->device,
                    "cpu or cuda:N (default: the worker's device)");
  alloc->callback([&, alloc_args] { exit_code = Alloc(globals, *alloc_args); });

  auto write_args = std::make_shared<WriteArgs>();
  auto* write = tensor->add_subcommand("write", "write values into a tensor");
  write->add_option("name", write_args->name)->required();
  write->add_option("--rank,-r", write_args->rank)->required();
  write->add_option("--values", write_args->values, "e.g. 1,2,3");
  write->add_option("--file", write_args->file,
                    "raw bytes in the tensor's dtype");
  write->add_option("--offset", write_args->offset, "first element to write");
  write->callback([&, write_args] { exit_code = Write(globals, *write_args); });

  auto read_args = std::make_shared<ReadArgs>();
  auto* read =
      tensor->add_subcommand("read", "print values and a summary per rank");
  read->add_option("name", read_args->name)->required();
  read->add_option("--rank,-r,--ranks", read_args->ranks, "default: all");
  read->add_option("--limit,-n", read_args->limit, "leading elements to print")
      ->capture_default_str();
  read->callback([&, read_args] { exit_code = Read(globals, *read_args); });

  auto free_args = std::make_shared<std::pair<std::string, std::string>>();
  auto* free = tensor->add_subcommand("free", "free a tensor");
  free->add_option("name", free_args->first)->required();
  free->add_option("--ranks", free_args->second, "default: all");
  free->callback([&, free_args] {
    exit_code = Free(globals, free_args->first, free_args->second);
  });

  auto ls_ranks = std::make_shared<std::string>();
  auto* ls = tensor->add_subcommand("ls", "list tensors per rank");
  ls->add_option("--ranks", *ls_ranks, "default: all");
  ls->callback([&, ls_ranks] { exit_code = List(globals, *ls_ranks); });
}

}  // namespace ccl::ctl
