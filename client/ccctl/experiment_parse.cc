// Parsing of an experiment document: YAML to the validated steps of
// experiment.h, every error with its "FILE:line N:".
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/experiment.h"
#include "client/ccctl/experiment_yaml.h"
#include "client/ccctl/format.h"

namespace ccl::ctl {

namespace {

struct OpName {
  const char* name;
  StepKind step;
  OpKind op;
};

// ccctl's names and torch.distributed's.
constexpr OpName kOpNames[] = {
    {"allreduce", StepKind::kOp, OpKind::kAllReduce},
    {"all_reduce", StepKind::kOp, OpKind::kAllReduce},
    {"broadcast", StepKind::kOp, OpKind::kBroadcast},
    {"reduce", StepKind::kOp, OpKind::kReduce},
    {"allgather", StepKind::kOp, OpKind::kAllGather},
    {"all_gather", StepKind::kOp, OpKind::kAllGather},
    {"all_gather_into_tensor", StepKind::kOp, OpKind::kAllGather},
    {"reducescatter", StepKind::kOp, OpKind::kReduceScatter},
    {"reduce_scatter", StepKind::kOp, OpKind::kReduceScatter},
    {"reduce_scatter_tensor", StepKind::kOp, OpKind::kReduceScatter},
    {"gather", StepKind::kOp, OpKind::kGather},
    {"scatter", StepKind::kOp, OpKind::kScatter},
    {"alltoall", StepKind::kOp, OpKind::kAllToAll},
    {"all_to_all", StepKind::kOp, OpKind::kAllToAll},
    {"all_to_all_single", StepKind::kOp, OpKind::kAllToAll},
    {"barrier", StepKind::kOp, OpKind::kBarrier},
    {"send", StepKind::kSend, OpKind::kSend},
    {"isend", StepKind::kSend, OpKind::kSend},
    {"recv", StepKind::kRecv, OpKind::kRecv},
    {"irecv", StepKind::kRecv, OpKind::kRecv},
};

constexpr std::pair<const char*, StepKind> kOtherKinds[] = {
    {"alloc", StepKind::kAlloc},   {"write", StepKind::kWrite},
    {"wait", StepKind::kWait},     {"read", StepKind::kRead},
    {"assert", StepKind::kAssert}, {"free", StepKind::kFree},
    {"sleep", StepKind::kSleep},   {"bench", StepKind::kBench},
    {"repeat", StepKind::kRepeat},
};

constexpr const char* kFills[] = {"zeros",  "ones",   "constant",    "rank",
                                  "rank+1", "arange", "arange+rank", "random",
                                  "affine", "empty"};

class Parser : private YamlReader {
 public:
  explicit Parser(std::string file) : YamlReader(std::move(file)) {}

  absl::Status Ranks(const YAML::Node& body, Step& step) {
    const YAML::Node rank = body["rank"], ranks = body["ranks"];
    if (rank && ranks) return Error(body, "give either 'rank' or 'ranks'");
    const YAML::Node node = rank ? rank : ranks;
    if (!node) return absl::OkStatus();
    if (node.IsScalar() && node.Scalar() == "all") return absl::OkStatus();
    auto list = ExprList(node, rank ? "rank" : "ranks", world_ids_);
    if (!list.ok()) return list.status();
    step.ranks.exprs = *list;
    return absl::OkStatus();
  }

  // `tensor` or its alias `name`.
  absl::StatusOr<std::string> TensorName(const YAML::Node& body,
                                         const std::string& kind,
                                         bool required = true) {
    const YAML::Node tensor = body["tensor"], name = body["name"];
    if (tensor && name) return Error(body, "give either 'tensor' or 'name'");
    const YAML::Node node = tensor ? tensor : name;
    if (!node) {
      if (!required) return std::string();
      return Error(body, kind + " needs 'tensor'");
    }
    auto text = Scalar(node, "tensor");
    if (text.ok() && text->empty()) return Error(node, "empty tensor name");
    return text;
  }

  // A tensor step's start: only its `keys`, and the tensor it names.
  absl::Status TensorStep(const YAML::Node& body, const std::string& kind,
                          const std::set<std::string>& keys, Step& step) {
    CCL_RETURN_IF_ERROR(CheckKeys(body, kind, keys));
    CCL_ASSIGN_OR_RETURN(step.tensor, TensorName(body, kind));
    return absl::OkStatus();
  }
  // ... and the ranks it runs on.
  absl::Status RankedTensorStep(const YAML::Node& body, const std::string& kind,
                                const std::set<std::string>& keys, Step& step) {
    CCL_RETURN_IF_ERROR(TensorStep(body, kind, keys, step));
    return Ranks(body, step);
  }
  // `dtype`, when given, names a dtype.
  absl::Status DTypeOf(const YAML::Node& body, Step& step) {
    CCL_RETURN_IF_ERROR(Optional(body, "dtype", step.dtype));
    if (auto parsed = ParseDType(step.dtype); body["dtype"] && !parsed.ok()) {
      return Error(body["dtype"], std::string(parsed.status().message()));
    }
    return absl::OkStatus();
  }

  absl::Status ParseAlloc(const YAML::Node& body, Step& step) {
    CCL_RETURN_IF_ERROR(RankedTensorStep(
        body, "alloc",
        {"name", "tensor", "shape", "dtype", "fill", "value", "rank_scale",
         "step", "seed", "rank", "ranks", "values", "all"},
        step));
    if (body["shape"]) {
      auto shape = ExprList(body["shape"], "shape", world_ids_);
      if (!shape.ok()) return shape.status();
      step.shape = *shape;
    }
    CCL_RETURN_IF_ERROR(DTypeOf(body, step));
    if (auto s = ParseValues(body, step); !s.ok()) return s;
    if (!step.values.empty() || step.values_all) {
      if (body["fill"])
        return Error(body["fill"], "give either 'fill' or 'values'");
      step.fill = "empty";
      if (step.values_all && step.shape.empty()) {
        return Error(body, "alloc with 'all' needs 'shape'");
      }
    } else if (step.shape.empty()) {
      return Error(body, "alloc needs 'shape' (or 'values')");
    }
    if (body["fill"]) {
      auto fill = Scalar(body["fill"], "fill");
      if (!fill.ok()) return fill.status();
      bool known = false;
      for (const char* f : kFills) known |= *fill == f;
      if (!known) {
        auto constant = Expr(body["fill"], "fill", world_ids_);
        if (!constant.ok()) {
          return Error(
              body["fill"],
              absl::StrCat("unknown fill '", *fill, "'; expected ",
                           absl::StrJoin(kFills, ", "), " or a number"));
        }
        step.fill = "constant";
        step.fill_value = *constant;
      } else {
        step.fill = *fill;
      }
    }
    for (auto [key, target] : {std::pair{"value", &step.fill_value},
                               std::pair{"rank_scale", &step.fill_rank_scale},
                               std::pair{"step", &step.fill_step}}) {
      CCL_RETURN_IF_ERROR(Optional(body, key, world_ids_, *target));
    }
    return Optional(body, "seed", step.seed);
  }

  // `values: [..]` (leading elements) or `all: expr` (every element).
  absl::Status ParseValues(const YAML::Node& body, Step& step) {
    if (body["values"] && body["all"]) {
      return Error(body, "give either 'values' or 'all'");
    }
    if (body["values"]) {
      if (!body["values"].IsSequence()) {
        return Error(body["values"], "'values' must be a list (or use 'all')");
      }
      auto values = ExprList(body["values"], "values", element_ids_);
      if (!values.ok()) return values.status();
      if (values->empty()) return Error(body["values"], "'values' is empty");
      step.values = *values;
    }
    if (body["all"]) {
      auto all = Expr(body["all"], "all", element_ids_);
      if (!all.ok()) return all.status();
      step.values_all = *all;
    }
    return absl::OkStatus();
  }

  absl::Status ParseWrite(const YAML::Node& body, Step& step) {
    CCL_RETURN_IF_ERROR(RankedTensorStep(
        body, "write",
        {"name", "tensor", "rank", "ranks", "values", "all", "offset"}, step));
    if (auto s = ParseValues(body, step); !s.ok()) return s;
    if (step.values.empty() && !step.values_all) {
      return Error(body, "write needs 'values' or 'all'");
    }
    return Optional(body, "offset", step.offset);
  }

  absl::Status ParseAsync(const YAML::Node& body, Step& step) {
    CCL_RETURN_IF_ERROR(Optional(body, "async", step.async));
    if (body["as"]) {
      auto as = Scalar(body["as"], "as");
      if (!as.ok()) return as.status();
      if (as->empty() || *as == "all")
        return Error(body["as"], "bad work name");
      step.as = *as;
      step.async = true;  // naming works only makes sense for async ops
      if (body["async"] && !body["async"].as<bool>()) {
        return Error(body["as"], "'as' names async works; the op is not async");
      }
      works_.insert(step.as);
    }
    return absl::OkStatus();
  }

  absl::Status ParseOp(const YAML::Node& body, Step& step) {
    const bool barrier = step.op == OpKind::kBarrier;
    if (barrier && (!body || body.IsNull())) return absl::OkStatus();
    if (!barrier && body.IsScalar()) {  // `allreduce: x`
      step.tensor = body.Scalar();
      return absl::OkStatus();
    }
    std::set<std::string> keys = {"async", "as"};
    if (!barrier) keys.insert({"tensor", "input", "output"});
    if (IsReduction(step.op)) keys.insert({"op", "scale"});
    if (HasRoot(step.op)) keys.insert({"src", "dst", "root"});
    if (auto s = CheckKeys(body, step.kind_name, keys); !s.ok()) return s;
    if (!barrier) {
      for (auto [key, target] :
           {std::pair{"tensor", &step.tensor}, std::pair{"input", &step.input},
            std::pair{"output", &step.output}}) {
        CCL_RETURN_IF_ERROR(Optional(body, key, *target));
      }
      if (!step.tensor.empty() &&
          (!step.input.empty() || !step.output.empty())) {
        return Error(body,
                     "give either 'tensor' (in place) or 'input'/'output'");
      }
      if (step.tensor.empty() && step.input.empty()) {
        return Error(body, step.kind_name + " needs 'tensor' or 'input'");
      }
    }
    if (body["op"]) {
      auto op = Scalar(body["op"], "op");
      if (!op.ok()) return op.status();
      auto parsed = ParseReduceOp(*op);
      if (!parsed.ok())
        return Error(body["op"], std::string(parsed.status().message()));
      step.reduce = *parsed;
    }
    CCL_RETURN_IF_ERROR(Optional(body, "scale", world_ids_, step.scale));
    int roots = 0;
    for (const char* key : {"src", "dst", "root"}) {
      if (!body[key]) continue;
      ++roots;
      CCL_RETURN_IF_ERROR(Optional(body, key, world_ids_, step.root));
    }
    if (roots > 1) return Error(body, "give one of 'src', 'dst', 'root'");
    return ParseAsync(body, step);
  }

  absl::Status ParseSend(const YAML::Node& body, Step& step) {
    CCL_RETURN_IF_ERROR(TensorStep(
        body, step.kind_name,
        {"tensor", "name", "output", "from", "to", "async", "as", "recv"},
        step));
    CCL_RETURN_IF_ERROR(Optional(body, "output", step.output));
    CCL_RETURN_IF_ERROR(Optional(body, "recv", step.paired));
    return ParsePointToPoint(body, step, "send", "from", "to");
  }

  absl::Status ParseRecv(const YAML::Node& body, Step& step) {
    CCL_RETURN_IF_ERROR(
        TensorStep(body, step.kind_name,
                   {"tensor", "name", "rank", "from", "async", "as"}, step));
    return ParsePointToPoint(body, step, "recv", "rank", "from");
  }

  // The rest of a `verb` step (send or recv, or their i- forms, which are
  // async): the rank that runs it from `root_key` (step.root), its peer
  // from `peer_key` (step.peer), then the async options.
  absl::Status ParsePointToPoint(const YAML::Node& body, Step& step,
                                 const std::string& verb,
                                 const std::string& root_key,
                                 const std::string& peer_key) {
    if (!body[root_key] || !body[peer_key]) {
      return Error(body, absl::StrCat(verb, " needs '", root_key, "' and '",
                                      peer_key, "'"));
    }
    auto root = Expr(body[root_key], root_key, world_ids_);
    if (!root.ok()) return root.status();
    auto peer = Expr(body[peer_key], peer_key, world_ids_);
    if (!peer.ok()) return peer.status();
    step.root = *root;
    step.peer = *peer;
    if (step.kind_name == "i" + verb) step.async = true;
    return ParseAsync(body, step);
  }

  // A name, a list of names, or a map with name(s) and ranks.
  absl::Status ParseNames(const YAML::Node& body, Step& step,
                          const std::string& kind, bool allow_empty) {
    const YAML::Node list =
        body.IsMap() ? body["name"] ? body["name"] : body["tensor"] : body;
    if (body.IsMap()) {
      if (auto s = CheckKeys(body, kind, {"name", "tensor", "rank", "ranks"});
          !s.ok()) {
        return s;
      }
      if (body["name"] && body["tensor"])
        return Error(body, "give either 'tensor' or 'name'");
      if (auto s = Ranks(body, step); !s.ok()) return s;
    }
    if (!list || list.IsNull()) {
      if (allow_empty) return absl::OkStatus();
      return Error(body, kind + " needs a name");
    }
    if (list.IsScalar()) {
      step.names.push_back(list.Scalar());
    } else if (list.IsSequence()) {
      for (const auto& item : list) {
        auto text = Scalar(item, "name");
        if (!text.ok()) return text.status();
        step.names.push_back(*text);
      }
    } else {
      return Error(list, kind + " needs a name or a list of names");
    }
    return absl::OkStatus();
  }

  absl::Status ParseWait(const YAML::Node& body, Step& step) {
    if (body && body.IsMap())
      return Error(body, "wait takes a work name or a list of names");
    if (auto s = ParseNames(body, step, "wait", true); !s.ok()) return s;
    if (step.names.size() == 1 && step.names[0] == "all") step.names.clear();
    for (const auto& name : step.names) {
      if (!works_.count(name)) {
        return Error(body,
                     absl::StrCat("wait: no earlier async op is named '", name,
                                  "' (name one with 'as: ", name, "')"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ParseRead(const YAML::Node& body, Step& step) {
    if (body.IsScalar()) {
      step.tensor = body.Scalar();
      return absl::OkStatus();
    }
    CCL_RETURN_IF_ERROR(RankedTensorStep(
        body, "read", {"name", "tensor", "rank", "ranks", "limit"}, step));
    return Optional(body, "limit", step.limit);
  }

  absl::Status ParseAssert(const YAML::Node& body, Step& step) {
    CCL_RETURN_IF_ERROR(
        RankedTensorStep(body, "assert",
                         {"name", "tensor", "rank", "ranks", "equal", "close",
                          "all", "expr", "tol"},
                         step));
    int given = 0;
    for (const char* key : {"equal", "close", "all", "expr"}) {
      const YAML::Node node = body[key];
      if (!node) continue;
      ++given;
      if (std::string(key) == "close") step.tol = 1e-6;
      if (node.IsSequence()) {
        if (std::string(key) == "all" || std::string(key) == "expr") {
          return Error(node, absl::StrCat("'", key, "' takes one expression"));
        }
        auto list = ExprList(node, key, element_ids_);
        if (!list.ok()) return list.status();
        if (list->empty())
          return Error(node, absl::StrCat("'", key, "' is empty"));
        step.expected = *list;
      } else {
        // A single value or expression applies to every element.
        auto e = Expr(node, key, element_ids_);
        if (!e.ok()) return e.status();
        step.expected_all = *e;
      }
    }
    if (given != 1) {
      return Error(body,
                   "assert needs one of 'equal', 'close', 'all' (or 'expr')");
    }
    if (body["tol"]) {
      auto tol = Expr(body["tol"], "tol", {});
      if (!tol.ok()) return tol.status();
      step.tol = *tol->Evaluate({});
      if (*step.tol < 0)
        return Error(body["tol"], "'tol' must not be negative");
    }
    return absl::OkStatus();
  }

  absl::Status ParseBench(const YAML::Node& body, Step& step) {
    if (auto s = CheckKeys(body, "bench",
                           {"op", "bytes", "minbytes", "maxbytes", "iters",
                            "warmup", "dtype", "root", "check"});
        !s.ok()) {
      return s;
    }
    if (body["op"]) {
      auto op = Scalar(body["op"], "op");
      if (!op.ok()) return op.status();
      bool known = *op == "sendrecv";
      if (known) step.op = OpKind::kSend;
      for (const auto& entry : kOpNames) {
        if (*op == entry.name && entry.step == StepKind::kOp &&
            entry.op != OpKind::kBarrier) {
          known = true;
          step.op = entry.op;
        }
      }
      if (!known) return Error(body["op"], "unknown bench op '" + *op + "'");
      step.bench_op = *op;
    }
    if (body["bytes"] && (body["minbytes"] || body["maxbytes"])) {
      return Error(body, "give either 'bytes' or 'minbytes'/'maxbytes'");
    }
    for (auto [key, target] : {std::pair{"bytes", &step.min_bytes},
                               std::pair{"minbytes", &step.min_bytes},
                               std::pair{"maxbytes", &step.max_bytes}}) {
      if (!body[key]) continue;
      auto size = ParseSize(body[key].IsScalar() ? body[key].Scalar() : "");
      if (!size.ok() || *size <= 0) {
        return Error(body[key],
                     absl::StrCat("bad size for '", key, "' (e.g. 4K, 1M)"));
      }
      *target = *size;
      if (std::string(key) == "bytes") step.max_bytes = *size;
    }
    if (body["minbytes"] && !body["maxbytes"]) step.max_bytes = step.min_bytes;
    if (body["maxbytes"] && !body["minbytes"]) step.min_bytes = step.max_bytes;
    if (step.min_bytes > step.max_bytes) {
      return Error(body, "'minbytes' is larger than 'maxbytes'");
    }
    CCL_RETURN_IF_ERROR(Optional(body, "iters", step.iters));
    CCL_RETURN_IF_ERROR(Optional(body, "warmup", step.warmup));
    if (step.iters < 1)
      return Error(body["iters"], "'iters' must be at least 1");
    CCL_RETURN_IF_ERROR(DTypeOf(body, step));
    CCL_RETURN_IF_ERROR(Optional(body, "root", world_ids_, step.root));
    return Optional(body, "check", step.check);
  }

  absl::Status ParseRepeat(const YAML::Node& body, Step& step) {
    if (auto s = CheckKeys(body, "repeat", {"times", "steps"}); !s.ok())
      return s;
    if (!body["times"]) return Error(body, "repeat needs 'times'");
    auto times = Expr(body["times"], "times", world_ids_);
    if (!times.ok()) return times.status();
    step.times = *times;
    if (!body["steps"]) return Error(body, "repeat needs 'steps'");
    auto steps = ParseSteps(body["steps"]);
    if (!steps.ok()) return steps.status();
    step.steps = std::move(*steps);
    return absl::OkStatus();
  }

  absl::Status ParseFree(const YAML::Node& body, Step& step) {
    return ParseNames(body, step, "free", false);
  }

  absl::Status ParseSleep(const YAML::Node& body, Step& step) {
    auto text = Scalar(body, "sleep");
    if (!text.ok()) return text.status();
    auto duration = ParseDuration(*text);
    if (!duration.ok()) {
      return Error(body, std::string(duration.status().message()));
    }
    step.duration = *duration;
    return absl::OkStatus();
  }

  // A bench step's options are all optional.
  absl::Status ParseBenchStep(const YAML::Node& body, Step& step) {
    if (!body || body.IsNull()) return absl::OkStatus();
    return ParseBench(body, step);
  }

  // What reads the body of a step of `kind`.
  using BodyParse = absl::Status (Parser::*)(const YAML::Node&, Step&);
  static BodyParse BodyParser(StepKind kind) {
    switch (kind) {
      case StepKind::kAlloc:
        return &Parser::ParseAlloc;
      case StepKind::kWrite:
        return &Parser::ParseWrite;
      case StepKind::kOp:
        return &Parser::ParseOp;
      case StepKind::kSend:
        return &Parser::ParseSend;
      case StepKind::kRecv:
        return &Parser::ParseRecv;
      case StepKind::kWait:
        return &Parser::ParseWait;
      case StepKind::kRead:
        return &Parser::ParseRead;
      case StepKind::kAssert:
        return &Parser::ParseAssert;
      case StepKind::kFree:
        return &Parser::ParseFree;
      case StepKind::kSleep:
        return &Parser::ParseSleep;
      case StepKind::kBench:
        return &Parser::ParseBenchStep;
      case StepKind::kRepeat:
        return &Parser::ParseRepeat;
    }
    return &Parser::ParseAlloc;  // unreachable: every kind is listed
  }

  absl::StatusOr<Step> ParseStep(const YAML::Node& item) {
    if (!item.IsMap() || item.size() != 1) {
      return Error(item, "a step is a map with one key, the step kind (" +
                             StepKindList() + ")");
    }
    const auto entry = *item.begin();
    const YAML::Node body = entry.second;
    Step step;
    step.kind_name = entry.first.Scalar();
    step.line = entry.first.Mark().line + 1;
    bool known = false;
    for (const auto& op : kOpNames) {
      if (step.kind_name == op.name) {
        step.kind = op.step;
        step.op = op.op;
        known = true;
      }
    }
    for (const auto& [name, kind] : kOtherKinds) {
      if (step.kind_name == name) {
        step.kind = kind;
        known = true;
      }
    }
    if (!known) {
      return Error(entry.first,
                   absl::StrCat("unknown step kind '", step.kind_name,
                                "'; expected one of ", StepKindList()));
    }
    const bool null_ok =
        step.kind == StepKind::kWait ||
        (step.kind == StepKind::kOp && step.op == OpKind::kBarrier) ||
        step.kind == StepKind::kBench;
    if ((!body || body.IsNull()) && !null_ok) {
      return Error(entry.first, step.kind_name + " needs options");
    }
    // Error marks of a missing key point at the body; give it the step's line
    // when the body is null.
    if (absl::Status s = (this->*BodyParser(step.kind))(body, step); !s.ok()) {
      return s;
    }
    return step;
  }

  absl::StatusOr<std::vector<Step>> ParseSteps(const YAML::Node& node) {
    if (!node.IsSequence())
      return Error(node, "'steps' must be a list of steps");
    std::vector<Step> steps;
    for (const auto& item : node) {
      auto step = ParseStep(item);
      if (!step.ok()) return step.status();
      steps.push_back(std::move(*step));
    }
    return steps;
  }

  absl::StatusOr<Experiment> Parse(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::ParserException& e) {
      return Error(e.mark, "bad YAML: " + e.msg);
    } catch (const YAML::Exception& e) {
      return Error(e.mark, e.msg);
    }
    try {
      return ParseDocument(root);
    } catch (const YAML::Exception& e) {
      // Conversions we did not guard; still report where.
      return Error(e.mark, e.msg);
    }
  }

  absl::StatusOr<Experiment> ParseDocument(const YAML::Node& root) {
    Experiment experiment;
    experiment.file = file();
    if (!root.IsMap()) {
      return Error(root,
                   "an experiment is a map with 'steps' (and optionally "
                   "'name', 'description', 'vars')");
    }
    if (auto s = CheckKeys(root, "the experiment",
                           {"name", "description", "vars", "steps"});
        !s.ok()) {
      return s;
    }
    for (auto [key, target] :
         {std::pair{"name", &experiment.name},
          std::pair{"description", &experiment.description}}) {
      if (!root[key]) continue;
      auto text = Scalar(root[key], key);
      if (!text.ok()) return text.status();
      *target = *text;
    }
    world_ids_ = {"world_size"};
    if (const YAML::Node vars = root["vars"]) {
      if (!vars.IsMap())
        return Error(vars, "'vars' must be a map of name: value");
      for (const auto& entry : vars) {
        const std::string name = entry.first.Scalar();
        auto check = Expression::Parse(name);
        if (name.empty() || !check.ok() || check->identifiers().size() != 1 ||
            *check->identifiers().begin() != name) {
          return Error(entry.first, "bad variable name '" + name + "'");
        }
        if (name == "rank" || name == "world_size" || name == "i" ||
            world_ids_.count(name)) {
          return Error(entry.first,
                       "variable '" + name + "' is built in or repeated");
        }
        auto value = Expr(entry.second, name, world_ids_);
        if (!value.ok()) return value.status();
        experiment.vars.emplace_back(name, *value);
        world_ids_.insert(name);
      }
    }
    rank_ids_ = world_ids_;
    rank_ids_.insert("rank");
    element_ids_ = rank_ids_;
    element_ids_.insert("i");
    if (!root["steps"]) return Error(root, "the experiment has no 'steps'");
    auto steps = ParseSteps(root["steps"]);
    if (!steps.ok()) return steps.status();
    if (steps->empty()) return Error(root["steps"], "'steps' is empty");
    experiment.steps = std::move(*steps);
    return experiment;
  }

 private:
  std::set<std::string> world_ids_, rank_ids_, element_ids_;
  std::set<std::string> works_;  // `as` names seen so far
};

}  // namespace

std::string StepKindList() {
  return "alloc, write, allreduce, broadcast, reduce, allgather, "
         "reducescatter, "
         "gather, scatter, alltoall, barrier (or the torch names all_reduce, "
         "all_gather_into_tensor, ...), send, recv, isend, irecv, wait, read, "
         "assert, free, sleep, bench, repeat";
}

absl::StatusOr<Experiment> ParseExperiment(const std::string& yaml_text,
                                           const std::string& file) {
  return Parser(file).Parse(yaml_text);
}

absl::StatusOr<Experiment> LoadExperiment(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseExperiment(text.str(), path);
}

}  // namespace ccl::ctl
