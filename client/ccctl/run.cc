// ccctl run EXPERIMENT.yaml: scripted experiments. The document is parsed and
// validated in full (experiment.h) before any request reaches a worker; the
// steps then run in order and the run stops at the first failed one.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/bench_ops.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/experiment.h"
#include "client/ccctl/format.h"
#include "common/element.h"
#include "common/proto_convert.h"

namespace ccl::ctl {
namespace {

using Clock = std::chrono::steady_clock;

struct RunArgs {
  std::string file;
  bool check = false;
  bool keep = false;
  int world_size = 2;
  std::vector<std::string> sets;
};

// "12.3 us", "4.56 ms", "1.23 s".
std::string TimeText(double us) {
  if (us < 1000) return absl::StrFormat("%.1f us", us);
  if (us < 1e6) return absl::StrFormat("%.2f ms", us / 1e3);
  return absl::StrFormat("%.2f s", us / 1e6);
}

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

absl::StatusOr<v1::Fill> FillFor(const Step& step, const Vars& vars) {
  v1::Fill fill;
  if (auto kind = FillKindByName(step.fill)) fill.set_kind(*kind);
  auto value = step.fill_value.Evaluate(vars);
  if (!value.ok()) return value.status();
  auto rank_scale = step.fill_rank_scale.Evaluate(vars);
  if (!rank_scale.ok()) return rank_scale.status();
  auto increment = step.fill_step.Evaluate(vars);
  if (!increment.ok()) return increment.status();
  fill.set_value(*value);
  fill.set_rank_scale(*rank_scale);
  fill.set_step(*increment);
  fill.set_seed(step.seed);
  return fill;
}

std::string EncodeValues(DType dtype, const std::vector<double>& values) {
  std::string bytes(values.size() * DTypeSize(dtype), '\0');
  for (size_t i = 0; i < values.size(); ++i)
    StoreElement(dtype, bytes.data(), i, values[i]);
  return bytes;
}

DType SummaryDType(const v1::TensorSummary& summary) {
  auto dtype = FromProto(summary.info().spec().dtype());
  return dtype.ok() ? *dtype : DType::kFloat64;
}

class Runner {
 public:
  Runner(ClusterClient& client, Experiment& experiment, const Globals& globals,
         bool keep)
      : client_(client),
        experiment_(experiment),
        globals_(globals),
        keep_(keep) {}

  int Run() {
    auto infos = client_.FanOut<v1::WorkerInfo>(
        client_.AllRanks(), [&](int rank) { return client_.Info(rank); });
    for (const auto& info : infos) {
      if (!info.result.ok()) {
        return ccl::ctl::Fail(
            absl::Status(info.result.status().code(),
                         absl::StrCat("rank ", info.rank, ": ",
                                      info.result.status().message())));
      }
      devices_[info.rank] = info.result->device();
    }
    const auto start = Clock::now();
    if (!globals_.json()) {
      std::cout << "experiment "
                << (experiment_.name.empty() ? experiment_.file
                                             : experiment_.name)
                << ": " << experiment_.steps.size() << " steps on "
                << client_.world_size() << " ranks\n";
      if (!experiment_.description.empty())
        std::cout << "  " << experiment_.description << "\n";
      std::cout.flush();
    }
    const bool ok = RunSteps(experiment_.steps, "");
    Cleanup();
    const double total_us =
        std::chrono::duration<double, std::micro>(Clock::now() - start).count();
    if (globals_.json()) {
      nlohmann::json vars = nlohmann::json::object();
      for (const auto& [name, value] : experiment_.resolved_vars)
        vars[name] = value;
      nlohmann::json document = {{"experiment", experiment_.name},
                                 {"description", experiment_.description},
                                 {"file", experiment_.file},
                                 {"world_size", client_.world_size()},
                                 {"vars", vars},
                                 {"ok", ok},
                                 {"wall_us", total_us},
                                 {"steps", steps_json_}};
      if (!ok) document["failed"] = failed_json_;
      if (!cleanup_errors_.empty())
        document["cleanup_errors"] = cleanup_errors_;
      PrintJson(document);
    } else if (ok) {
      std::cout << "ok: " << total_steps_ << " steps passed in "
                << TimeText(total_us) << "\n";
    }
    if (!ok) std::cerr << "ccctl: " << failure_ << "\n";
    for (const auto& e : cleanup_errors_)
      std::cerr << "ccctl: cleanup: " << e << "\n";
    return ok ? kExitOk : kExitFailure;
  }

 private:
  struct PendingWork {
    int rank;
    int64_t id;
    std::string name;  // `as`, or "" for anonymous
    std::string step;
  };

  Vars RankVars(int rank) const {
    Vars vars = experiment_.resolved_vars;
    vars["rank"] = rank;
    return vars;
  }

  bool RunSteps(const std::vector<Step>& steps, const std::string& prefix) {
    const size_t top = experiment_.steps.size();
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step& step = steps[i];
      const std::string id = prefix.empty() ? absl::StrCat(i + 1)
                                            : absl::StrCat(prefix, ".", i + 1);
      const std::string head =
          absl::StrCat("[", id, "/", top, "] ", DescribeStep(step));
      ++total_steps_;
      if (step.kind == StepKind::kRepeat) {
        if (!globals_.json()) std::cout << head << "\n" << std::flush;
        const auto start = Clock::now();
        for (int k = 0; k < step.times_resolved; ++k) {
          if (!RunSteps(step.steps, absl::StrCat(id, ".", k + 1))) return false;
        }
        steps_json_.push_back(
            {{"step", id},
             {"line", step.line},
             {"kind", step.kind_name},
             {"text", DescribeStep(step)},
             {"ok", true},
             {"times", step.times_resolved},
             {"wall_us",
              std::chrono::duration<double, std::micro>(Clock::now() - start)
                  .count()}});
        continue;
      }
      if (!globals_.json()) std::cout << head << " ... " << std::flush;
      const auto start = Clock::now();
      Outcome outcome = Execute(step, id);
      const double wall_us =
          std::chrono::duration<double, std::micro>(Clock::now() - start)
              .count();
      if (!globals_.json()) {
        const double shown =
            outcome.device_us >= 0 ? outcome.device_us : wall_us;
        std::cout << (outcome.ok ? "ok" : "FAILED") << " (" << TimeText(shown)
                  << ")\n";
        for (const auto& line : outcome.lines)
          std::cout << "    " << line << "\n";
        std::cout.flush();
      }
      nlohmann::json entry = {{"step", id},
                              {"line", step.line},
                              {"kind", step.kind_name},
                              {"text", DescribeStep(step)},
                              {"ok", outcome.ok},
                              {"wall_us", wall_us}};
      if (outcome.device_us >= 0) entry["device_us"] = outcome.device_us;
      for (auto& [key, value] : outcome.json.items()) entry[key] = value;
      if (!outcome.ok) entry["error"] = outcome.error;
      steps_json_.push_back(entry);
      if (!outcome.ok) {
        failure_ =
            absl::StrCat("step ", id, " (line ", step.line, ", ",
                         DescribeStep(step), ") failed: ", outcome.error);
        failed_json_ = {
            {"step", id}, {"line", step.line}, {"error", outcome.error}};
        return false;
      }
    }
    return true;
  }

  Outcome Execute(const Step& step, const std::string& id) {
    switch (step.kind) {
      case StepKind::kAlloc:
        return Alloc(step);
      case StepKind::kWrite:
        return Write(step);
      case StepKind::kOp:
        return Collective(step, id);
      case StepKind::kSend:
      case StepKind::kRecv:
        return PointToPoint(step, id);
      case StepKind::kWait:
        return Wait(step);
      case StepKind::kRead:
        return Read(step);
      case StepKind::kAssert:
        return Assert(step);
      case StepKind::kFree:
        return Free(step);
      case StepKind::kSleep:
        std::this_thread::sleep_for(step.duration);
        return {};
      case StepKind::kBench:
        return Bench(step);
      case StepKind::kRepeat:
        break;
    }
    return {};
  }

  template <typename T>
  void CollectErrors(const std::vector<RankResult<T>>& results,
                     Outcome& outcome) {
    for (const auto& r : results) {
      if (r.result.ok()) continue;
      const std::string text =
          absl::StrCat("rank ", r.rank, ": ", StatusText(r.result.status()));
      outcome.Fail(text);
      outcome.lines.push_back(text);
    }
  }

  absl::StatusOr<v1::TensorInfo> AllocOn(int rank, const std::string& name,
                                         DType dtype,
                                         const std::vector<int64_t>& shape,
                                         const v1::Fill& fill) {
    v1::AllocTensorRequest request;
    request.mutable_spec()->set_name(name);
    request.mutable_spec()->set_dtype(ToProto(dtype));
    for (int64_t dim : shape) request.mutable_spec()->add_shape(dim);
    *request.mutable_spec()->mutable_device() = devices_[rank];
    *request.mutable_fill() = fill;
    auto info = client_.Alloc(rank, request);
    if (info.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      allocated_.insert({rank, name});
    }
    return info;
  }

  Outcome Alloc(const Step& step) {
    Outcome outcome;
    const DType dtype = *ParseDType(step.dtype);
    auto results = client_.FanOut<v1::TensorInfo>(
        step.ranks.resolved, [&](int rank) -> absl::StatusOr<v1::TensorInfo> {
          const Vars vars = RankVars(rank);
          auto fill = FillFor(step, vars);
          if (!fill.ok()) return fill.status();
          auto info =
              AllocOn(rank, step.tensor, dtype, step.shape_resolved, *fill);
          if (!info.ok() || (step.values.empty() && !step.values_all))
            return info;
          auto values = ValuesToWrite(step, info->numel(), vars);
          if (!values.ok()) return values.status();
          return client_.Write(rank, step.tensor, 0,
                               EncodeValues(dtype, *values));
        });
    CollectErrors(results, outcome);
    return outcome;
  }

  Outcome Write(const Step& step) {
    Outcome outcome;
    auto results = client_.FanOut<v1::TensorInfo>(
        step.ranks.resolved, [&](int rank) -> absl::StatusOr<v1::TensorInfo> {
          auto summary = client_.Summarize(rank, step.tensor, 0);
          if (!summary.ok()) return summary.status();
          const DType dtype = SummaryDType(*summary);
          auto values =
              ValuesToWrite(step, summary->info().numel(), RankVars(rank));
          if (!values.ok()) return values.status();
          return client_.Write(
              rank, step.tensor,
              step.offset * static_cast<int64_t>(DTypeSize(dtype)),
              EncodeValues(dtype, *values));
        });
    CollectErrors(results, outcome);
    return outcome;
  }

  void RecordOp(const Step& step, const std::string& id,
                const std::vector<RankResult<v1::OpResponse>>& results,
                const std::set<int>& involved, Outcome& outcome) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : results) {
      if (!involved.count(r.rank)) continue;
      if (!r.result.ok()) {
        const std::string text =
            absl::StrCat("rank ", r.rank, ": ", StatusText(r.result.status()));
        outcome.Fail(text);
        outcome.lines.push_back(text);
        ranks.push_back(
            {{"rank", r.rank}, {"error", StatusText(r.result.status())}});
        continue;
      }
      nlohmann::json entry = {{"rank", r.rank}, {"seq", r.result->seq()}};
      if (step.async) {
        entry["work_id"] = r.result->work_id();
        pending_.push_back({r.rank, r.result->work_id(), step.as, id});
      } else {
        entry["device_us"] = r.result->timing().device_us();
        outcome.device_us =
            std::max(outcome.device_us, r.result->timing().device_us());
      }
      ranks.push_back(entry);
    }
    outcome.json["ranks"] = ranks;
  }

  Outcome Collective(const Step& step, const std::string& id) {
    Outcome outcome;
    v1::OpRequest op;
    op.set_kind(ToProto(step.op));
    op.set_reduce_op(ToProto(step.reduce));
    op.set_premul_scale(step.scale_resolved);
    op.set_root(step.root_resolved);
    op.set_async(step.async);
    op.set_input(step.tensor.empty() ? step.input : step.tensor);
    op.set_output(step.output);
    auto results = client_.Collective(op);
    // With --group only the group's members take part.
    const auto all = client_.GroupRanks();
    RecordOp(step, id, results, std::set<int>(all.begin(), all.end()), outcome);
    return outcome;
  }

  Outcome PointToPoint(const Step& step, const std::string& id) {
    Outcome outcome;
    std::map<int, v1::OpRequest> ops;
    v1::OpRequest op;
    op.set_input(step.tensor);
    op.set_async(step.async);
    if (step.kind == StepKind::kSend) {
      op.set_kind(v1::OP_KIND_SEND);
      op.set_peer(step.peer_resolved);
      ops[step.root_resolved] = op;
      if (step.paired) {
        op.set_kind(v1::OP_KIND_RECV);
        op.set_peer(step.root_resolved);
        op.set_output(step.output);
        ops[step.peer_resolved] = op;
      }
    } else {
      op.set_kind(v1::OP_KIND_RECV);
      op.set_peer(step.peer_resolved);
      ops[step.root_resolved] = op;
    }
    auto results = client_.PointToPoint(ops);
    std::set<int> involved;
    for (const auto& [rank, unused] : ops) involved.insert(rank);
    RecordOp(step, id, results, involved, outcome);
    return outcome;
  }

  Outcome Wait(const Step& step) {
    Outcome outcome;
    std::vector<PendingWork> works, rest;
    for (const auto& w : pending_) {
      const bool selected =
          step.names.empty() || std::find(step.names.begin(), step.names.end(),
                                          w.name) != step.names.end();
      (selected ? works : rest).push_back(w);
    }
    pending_ = rest;
    std::vector<int> indexes;
    for (size_t i = 0; i < works.size(); ++i)
      indexes.push_back(static_cast<int>(i));
    auto results = client_.FanOut<v1::WorkStatus>(indexes, [&](int i) {
      return client_.Wait(works[i].rank, works[i].id,
                          client_.options().timeout);
    });
    nlohmann::json list = nlohmann::json::array();
    for (const auto& r : results) {
      const PendingWork& w = works[r.rank];
      const std::string label =
          absl::StrCat(w.name.empty() ? "work" : "work '" + w.name + "'",
                       " of step ", w.step, " on rank ", w.rank);
      nlohmann::json entry = {{"rank", w.rank},
                              {"work_id", w.id},
                              {"name", w.name},
                              {"step", w.step}};
      if (!r.result.ok()) {
        outcome.Fail(absl::StrCat(label, ": ", StatusText(r.result.status())));
        outcome.lines.push_back(
            absl::StrCat(label, ": ", StatusText(r.result.status())));
        entry["error"] = StatusText(r.result.status());
      } else if (r.result->state() == v1::WORK_STATE_FAILED) {
        const std::string text =
            absl::StrCat(label, ": ", r.result->error_message());
        outcome.Fail(text);
        outcome.lines.push_back(text);
        entry["error"] = r.result->error_message();
      } else {
        outcome.device_us =
            std::max(outcome.device_us, r.result->timing().device_us());
        entry["device_us"] = r.result->timing().device_us();
      }
      list.push_back(entry);
    }
    if (works.empty()) outcome.lines.push_back("(no outstanding works)");
    outcome.json["works"] = list;
    return outcome;
  }

  Outcome Read(const Step& step) {
    Outcome outcome;
    auto results =
        client_.FanOut<v1::TensorSummary>(step.ranks.resolved, [&](int rank) {
          return client_.Summarize(rank, step.tensor, step.limit);
        });
    CollectErrors(results, outcome);
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      std::vector<double> head(r.result->head().begin(),
                               r.result->head().end());
      const bool truncated =
          r.result->info().numel() > static_cast<int64_t>(head.size());
      outcome.lines.push_back(
          absl::StrCat("rank ", r.rank, ": ",
                       FormatValues(head, SummaryDType(*r.result), truncated)));
      ranks.push_back({{"rank", r.rank},
                       {"values", head},
                       {"numel", r.result->info().numel()},
                       {"sum", r.result->sum()}});
    }
    outcome.json["ranks"] = ranks;
    return outcome;
  }

  Outcome Assert(const Step& step) {
    Outcome outcome;
    constexpr int64_t kMaxHead = 1 << 20;
    const int64_t head = step.expected_all
                             ? kMaxHead
                             : static_cast<int64_t>(step.expected.size());
    auto results = client_.FanOut<v1::TensorSummary>(
        step.ranks.resolved,
        [&](int rank) { return client_.Summarize(rank, step.tensor, head); });
    CollectErrors(results, outcome);
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : results) {
      if (!r.result.ok()) continue;
      std::vector<double> got(r.result->head().begin(), r.result->head().end());
      const absl::Status check =
          CheckValues(step, got, r.result->info().numel(), RankVars(r.rank));
      nlohmann::json entry = {{"rank", r.rank}, {"ok", check.ok()}};
      if (got.size() > 64) got.resize(64);
      entry["values"] = got;
      if (!check.ok()) {
        const std::string text =
            absl::StrCat("rank ", r.rank, ": ", check.message());
        outcome.Fail(text);
        outcome.lines.push_back(text);
        entry["error"] = std::string(check.message());
      }
      if (step.expected_all && r.result->info().numel() > kMaxHead) {
        outcome.lines.push_back(
            absl::StrCat("rank ", r.rank, ": checked the first ", kMaxHead,
                         " of ", r.result->info().numel(), " elements"));
      }
      ranks.push_back(entry);
    }
    outcome.json["ranks"] = ranks;
    return outcome;
  }

  Outcome Free(const Step& step) {
    Outcome outcome;
    for (const auto& name : step.names) {
      auto results =
          client_.FanOut<int64_t>(step.ranks.resolved, [&](int rank) {
            auto freed = client_.Free(rank, name);
            if (freed.ok()) {
              std::lock_guard<std::mutex> lock(mutex_);
              allocated_.erase({rank, name});
            }
            return freed;
          });
      CollectErrors(results, outcome);
    }
    return outcome;
  }

  Outcome Bench(const Step& step) {
    Outcome outcome;
    const BenchOp* shape = BenchOpFor(ToProto(step.op));
    if (shape == nullptr) {
      outcome.Fail(absl::StrCat(std::string(OpKindName(step.op)),
                                " cannot be benchmarked"));
      return outcome;
    }
    const DType dtype = *ParseDType(step.dtype);
    // With --group: only members, sizes by the group, sendrecv between its
    // first two members.
    const int n = client_.group_size();
    const std::vector<int>& members = client_.GroupRanks();
    const int64_t element = static_cast<int64_t>(DTypeSize(dtype));
    const std::string prefix = TemporaryPrefix("run.bench");
    nlohmann::json rows = nlohmann::json::array();
    outcome.lines.push_back(
        absl::StrFormat("%12s %12s %10s %12s %10s %10s %8s", "size(B)", "count",
                        "type", "time(us)", "algbw", "busbw", "#wrong"));
    for (int64_t bytes = step.min_bytes; bytes <= step.max_bytes && outcome.ok;
         bytes *= 2) {
      const int64_t count = std::max<int64_t>(n, bytes / element / n * n);
      const auto [in, out] = shape->buffers(count, n);
      const std::string in_name = prefix + "in", out_name = prefix + "out";
      v1::Fill zeros;
      zeros.set_kind(v1::FILL_KIND_ZEROS);
      auto allocs =
          client_.FanOut<bool>(members, [&](int rank) -> absl::StatusOr<bool> {
            auto a = AllocOn(rank, in_name, dtype, {in}, zeros);
            if (!a.ok()) return a.status();
            auto b = AllocOn(rank, out_name, dtype, {out}, zeros);
            if (!b.ok()) return b.status();
            return true;
          });
      CollectErrors(allocs, outcome);
      if (outcome.ok) {
        auto results = client_.Bench([&](int rank) {
          v1::BenchRequest request;
          request.set_iters(step.iters);
          request.set_warmup_iters(step.warmup);
          request.set_check(step.check);
          v1::OpRequest& op = *request.mutable_op();
          op.set_kind(ToProto(step.op));
          op.set_reduce_op(v1::REDUCE_OP_SUM);
          op.set_premul_scale(1.0);
          op.set_root(step.root_resolved);
          if (step.op == OpKind::kSend) {
            const int first = members[0];
            const int second = members.size() > 1 ? members[1] : first;
            op.set_kind(rank == first    ? v1::OP_KIND_SEND
                        : rank == second ? v1::OP_KIND_RECV
                                         : v1::OP_KIND_NOP);
            op.set_peer(rank == first ? second : first);
            op.set_input(rank == first ? in_name : out_name);
          } else {
            op.set_input(in_name);
            op.set_output(out_name);
          }
          return request;
        });
        CollectErrors(results, outcome);
        double time_us = 0;
        int64_t wrong = 0;
        for (const auto& r : results) {
          if (!r.result.ok()) continue;
          time_us = std::max(time_us, r.result->avg_us());
          wrong += r.result->wrong();
        }
        const int64_t size = count * element;
        const double algbw = time_us > 0 ? size / time_us / 1e3 : 0;
        const double busbw = algbw * shape->bus_factor(n);
        outcome.device_us = std::max(outcome.device_us, time_us);
        outcome.lines.push_back(absl::StrFormat(
            "%12d %12d %10s %12.2f %10.2f %10.2f %8s", size, count,
            std::string(DTypeName(dtype)), time_us, algbw, busbw,
            step.check ? absl::StrCat(wrong) : "N/A"));
        rows.push_back({{"size", size},
                        {"count", count},
                        {"type", std::string(DTypeName(dtype))},
                        {"time_us", time_us},
                        {"algbw", algbw},
                        {"busbw", busbw},
                        {"wrong", wrong}});
        if (outcome.ok && wrong > 0) {
          outcome.Fail(
              absl::StrCat(wrong, " wrong elements at ", size, " bytes"));
        }
      }
      FreeEverywhere(in_name);
      FreeEverywhere(out_name);
    }
    outcome.json["rows"] = rows;
    return outcome;
  }

  void FreeEverywhere(const std::string& name) {
    std::vector<int> ranks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [rank, n] : allocated_) {
        if (n == name) ranks.push_back(rank);
      }
    }
    client_.FanOut<int64_t>(ranks, [&](int rank) {
      auto freed = client_.Free(rank, name);
      std::lock_guard<std::mutex> lock(mutex_);
      allocated_.erase({rank, name});
      return freed;
    });
  }

  // Completes what the run left in flight and frees what it allocated, so
  // that an experiment can run again on the same cluster.
  void Cleanup() {
    if (!pending_.empty()) {
      std::vector<int> indexes;
      for (size_t i = 0; i < pending_.size(); ++i)
        indexes.push_back(static_cast<int>(i));
      auto results = client_.FanOut<v1::WorkStatus>(indexes, [&](int i) {
        return client_.Wait(pending_[i].rank, pending_[i].id,
                            client_.options().timeout);
      });
      for (const auto& r : results) {
        if (!r.result.ok()) {
          cleanup_errors_.push_back(absl::StrCat(
              "work of step ", pending_[r.rank].step, " on rank ",
              pending_[r.rank].rank, ": ", StatusText(r.result.status())));
        }
      }
      pending_.clear();
    }
    if (keep_) return;
    std::vector<std::pair<int, std::string>> left(allocated_.begin(),
                                                  allocated_.end());
    std::vector<int> indexes;
    for (size_t i = 0; i < left.size(); ++i)
      indexes.push_back(static_cast<int>(i));
    auto results = client_.FanOut<int64_t>(indexes, [&](int i) {
      return client_.Free(left[i].first, left[i].second);
    });
    for (const auto& r : results) {
      if (!r.result.ok()) {
        cleanup_errors_.push_back(absl::StrCat(
            "free ", left[r.rank].second, " on rank ", left[r.rank].first, ": ",
            StatusText(r.result.status())));
      }
    }
    allocated_.clear();
  }

  ClusterClient& client_;
  Experiment& experiment_;
  const Globals& globals_;
  const bool keep_;
  std::map<int, v1::Device> devices_;
  std::mutex mutex_;
  std::set<std::pair<int, std::string>> allocated_;
  std::vector<PendingWork> pending_;
  nlohmann::json steps_json_ = nlohmann::json::array();
  nlohmann::json failed_json_;
  std::vector<std::string> cleanup_errors_;
  std::string failure_;
  int total_steps_ = 0;
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
