// ccctl status and ccctl tensor alloc|write|read|free|ls.
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/format.h"
#include "common/element.h"
#include "common/proto_convert.h"

namespace ccl::ctl {
namespace {

std::string MemberStateName(v1::MemberState state) {
  switch (state) {
    case v1::MEMBER_STATE_JOINING:
      return "joining";
    case v1::MEMBER_STATE_READY:
      return "ready";
    case v1::MEMBER_STATE_LOST:
      return "lost";
    case v1::MEMBER_STATE_LEFT:
      return "left";
    default:
      return "unknown";
  }
}

std::string WorldStateName(v1::WorldState state) {
  switch (state) {
    case v1::WORLD_STATE_FORMING:
      return "forming";
    case v1::WORLD_STATE_COMPLETE:
      return "complete";
    case v1::WORLD_STATE_DEGRADED:
      return "degraded";
    default:
      return "unknown";
  }
}

std::string DeviceText(const v1::Device& device) {
  auto native = FromProto(device);
  return native.ok() ? DeviceName(*native) : "?";
}

std::string ShapeText(const v1::TensorSpec& spec) {
  return absl::StrCat("[", absl::StrJoin(spec.shape(), ","), "]");
}

std::string DTypeText(v1::DType dtype) {
  auto native = FromProto(dtype);
  return native.ok() ? std::string(DTypeName(*native)) : "?";
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

int Status(Globals& globals) {
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  const v1::World& world = (*client)->world();
  auto infos = (*client)->FanOut<v1::WorkerInfo>(
      (*client)->AllRanks(), [&](int rank) { return (*client)->Info(rank); });
  if (globals.json()) {
    nlohmann::json document = ProtoToJson(world);
    nlohmann::json workers = nlohmann::json::array();
    for (const auto& info : infos) {
      workers.push_back(
          info.result.ok()
              ? ProtoToJson(*info.result)
              : nlohmann::json{{"rank", info.rank},
                               {"error", StatusText(info.result.status())}});
    }
    document["workers"] = workers;
    PrintJson(document);
    return kExitOk;
  }
  std::cout << "coordinator: " << (*client)->options().coordinator
            << "\ngeneration:  " << world.generation()
            << "\nworld size:  " << world.world_size() << " ("
            << WorldStateName(world.state()) << ")\n\n";
  Table table({"RANK", "ADDRESS", "DEVICE", "STATE", "HEARTBEAT", "BACKEND",
               "TENSORS", "BYTES"});
  for (const auto& member : world.members()) {
    std::string backend = "-", tensors = "-", bytes = "-";
    for (const auto& info : infos) {
      if (info.rank != member.rank()) continue;
      if (info.result.ok()) {
        backend = info.result->backend();
        tensors = absl::StrCat(info.result->tensor_count());
        bytes = FormatBytes(info.result->tensor_bytes());
      } else {
        backend = absl::StatusCodeToString(info.result.status().code());
      }
    }
    table.AddRow({absl::StrCat(member.rank()), member.address(),
                  DeviceText(member.device()), MemberStateName(member.state()),
                  absl::StrCat(member.last_seen_age_ms(), "ms ago"), backend,
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

absl::StatusOr<v1::Fill> ParseFill(const std::string& text, double value,
                                   double rank_scale, double step,
                                   uint64_t seed) {
  v1::Fill fill;
  fill.set_value(value);
  fill.set_rank_scale(rank_scale);
  fill.set_step(step);
  fill.set_seed(seed);
  if (auto kind = FillKindByName(text)) {
    fill.set_kind(*kind);
    return fill;
  }
  // A bare number is a constant fill.
  double constant = 0;
  std::istringstream in(text);
  if (in >> constant && in.eof()) {
    fill.set_kind(v1::FILL_KIND_CONSTANT);
    fill.set_value(constant);
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
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  auto ranks = SelectRanks(**client, args.ranks);
  if (!ranks.ok()) return Fail(ranks.status(), true);
  auto results = (*client)->FanOut<v1::TensorInfo>(*ranks, [&](int rank) {
    v1::AllocTensorRequest request;
    request.mutable_spec()->set_name(args.name);
    request.mutable_spec()->set_dtype(ToProto(*dtype));
    for (int64_t dim : *shape) request.mutable_spec()->add_shape(dim);
    absl::StatusOr<v1::WorkerInfo> info;
    if (args.device.empty()) {
      // Tensors live on the worker's own device unless told otherwise.
      info = (*client)->Info(rank);
      if (!info.ok()) return absl::StatusOr<v1::TensorInfo>(info.status());
      *request.mutable_spec()->mutable_device() = info->device();
    } else {
      auto device = ParseDevice(args.device);
      if (!device.ok()) return absl::StatusOr<v1::TensorInfo>(device.status());
      *request.mutable_spec()->mutable_device() = ToProto(*device);
    }
    *request.mutable_fill() = *fill;
    return (*client)->Alloc(rank, request);
  });
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    nlohmann::json document = nlohmann::json::array();
    for (const auto& r : results) {
      if (r.result.ok()) {
        document.push_back(
            {{"rank", r.rank}, {"tensor", ProtoToJson(*r.result)}});
      }
    }
    PrintJson(document);
  } else {
    Table table({"RANK", "NAME", "DTYPE", "SHAPE", "DEVICE", "BYTES"});
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      const auto& spec = r.result->spec();
      table.AddRow({absl::StrCat(r.rank), spec.name(), DTypeText(spec.dtype()),
                    ShapeText(spec), DeviceText(spec.device()),
                    FormatBytes(r.result->bytes())});
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
  auto summary = (*client)->Summarize(args.rank, args.name, 0);
  if (!summary.ok()) return Fail(summary.status());
  auto dtype = FromProto(summary->info().spec().dtype());
  if (!dtype.ok()) return Fail(dtype.status());
  const size_t element = DTypeSize(*dtype);
  std::string bytes;
  if (!args.file.empty()) {
    std::ifstream in(args.file, std::ios::binary);
    if (!in) {
      return Fail(absl::NotFoundError(absl::StrCat("cannot read ", args.file)),
                  true);
    }
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  } else {
    auto values = ParseDoubleList(args.values);
    if (!values.ok()) return Fail(values.status(), true);
    bytes.resize(values->size() * element);
    for (size_t i = 0; i < values->size(); ++i) {
      StoreElement(*dtype, bytes.data(), i, (*values)[i]);
    }
  }
  auto info = (*client)->Write(
      args.rank, args.name, args.offset * static_cast<int64_t>(element), bytes);
  if (!info.ok()) return Fail(info.status());
  if (globals.json()) {
    PrintJson({{"rank", args.rank},
               {"written_bytes", bytes.size()},
               {"tensor", ProtoToJson(*info)}});
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
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  auto ranks = SelectRanks(**client, args.ranks);
  if (!ranks.ok()) return Fail(ranks.status(), true);
  auto results = (*client)->FanOut<v1::TensorSummary>(*ranks, [&](int rank) {
    return (*client)->Summarize(rank, args.name, args.limit);
  });
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    nlohmann::json document = nlohmann::json::array();
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      nlohmann::json entry = ProtoToJson(*r.result);
      entry["rank"] = r.rank;
      entry["values"] = entry["head"];
      document.push_back(entry);
    }
    PrintJson(document);
  } else {
    Table table({"RANK", "DTYPE", "SHAPE", "VALUES", "SUM", "MIN", "MAX"});
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      auto dtype = FromProto(r.result->info().spec().dtype());
      const DType shown = dtype.ok() ? *dtype : DType::kFloat64;
      std::vector<double> head(r.result->head().begin(),
                               r.result->head().end());
      table.AddRow(
          {absl::StrCat(r.rank), DTypeText(r.result->info().spec().dtype()),
           ShapeText(r.result->info().spec()),
           FormatValues(
               head, shown,
               r.result->info().numel() > static_cast<int64_t>(head.size())),
           FormatValue(r.result->sum(),
                       IsFloatingPoint(shown) ? DType::kFloat64 : shown),
           FormatValue(r.result->min(), shown),
           FormatValue(r.result->max(), shown)});
    }
    std::cout << table.Render();
  }
  return failed ? kExitFailure : kExitOk;
}

int Free(Globals& globals, const std::string& name,
         const std::string& ranks_text) {
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  auto ranks = SelectRanks(**client, ranks_text);
  if (!ranks.ok()) return Fail(ranks.status(), true);
  auto results = (*client)->FanOut<int64_t>(
      *ranks, [&](int rank) { return (*client)->Free(rank, name); });
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    nlohmann::json document = nlohmann::json::array();
    for (const auto& r : results) {
      if (r.result.ok())
        document.push_back({{"rank", r.rank}, {"freed_bytes", *r.result}});
    }
    PrintJson(document);
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
  auto client = Connect(globals);
  if (!client.ok()) return Fail(client.status());
  auto ranks = SelectRanks(**client, ranks_text);
  if (!ranks.ok()) return Fail(ranks.status(), true);
  auto results = (*client)->FanOut<v1::ListTensorsResponse>(
      *ranks, [&](int rank) { return (*client)->List(rank); });
  const bool failed = ReportRankErrors(results);
  if (globals.json()) {
    nlohmann::json document = nlohmann::json::array();
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      nlohmann::json entry = ProtoToJson(*r.result);
      entry["rank"] = r.rank;
      document.push_back(entry);
    }
    PrintJson(document);
  } else {
    Table table({"RANK", "NAME", "DTYPE", "SHAPE", "DEVICE", "BYTES"});
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      for (const auto& tensor : r.result->tensors()) {
        table.AddRow(
            {absl::StrCat(r.rank), tensor.spec().name(),
             DTypeText(tensor.spec().dtype()), ShapeText(tensor.spec()),
             DeviceText(tensor.spec().device()), FormatBytes(tensor.bytes())});
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
