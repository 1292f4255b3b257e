// What each kind of step of `ccctl run` does: a request to every rank it
// names, all at once, and what the report says about the answers.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/ccctl/bench_ops.h"
#include "client/ccctl/format.h"
#include "client/ccctl/runner.h"
#include "client/ccctl/values.h"
#include "common/element.h"

namespace ccl::ctl {
namespace {

absl::StatusOr<Fill> FillFor(const Step& step, const Vars& vars) {
  Fill fill;
  if (auto kind = FillKindByName(step.fill)) fill.kind = *kind;
  auto value = step.fill_value.Evaluate(vars);
  if (!value.ok()) return value.status();
  auto rank_scale = step.fill_rank_scale.Evaluate(vars);
  if (!rank_scale.ok()) return rank_scale.status();
  auto increment = step.fill_step.Evaluate(vars);
  if (!increment.ok()) return increment.status();
  fill.value = *value;
  fill.rank_scale = *rank_scale;
  fill.step = *increment;
  fill.seed = step.seed;
  return fill;
}

}  // namespace

// The op of a collective step.
Op CollectiveOp(const Step& step) {
  Op op;
  op.kind = step.op;
  op.reduce = step.reduce;
  op.premul_scale = step.scale_resolved;
  op.root = step.root_resolved;
  op.async = step.async;
  op.input = step.tensor.empty() ? step.input : step.tensor;
  op.output = step.output;
  return op;
}

// The ops of a send or recv step, by world rank.
std::map<int, Op> PointToPointOps(const Step& step) {
  std::map<int, Op> ops;
  Op op;
  op.input = step.tensor;
  op.async = step.async;
  if (step.kind == StepKind::kSend) {
    op.kind = OpKind::kSend;
    op.peer = step.peer_resolved;
    ops[step.root_resolved] = op;
    if (step.paired) {
      op.kind = OpKind::kRecv;
      op.peer = step.root_resolved;
      op.output = step.output;
      ops[step.peer_resolved] = op;
    }
  } else {
    op.kind = OpKind::kRecv;
    op.peer = step.peer_resolved;
    ops[step.root_resolved] = op;
  }
  return ops;
}

RankResults<TensorInfo> Runner::AllocAll(
    const std::vector<TensorAlloc>& allocs) {
  auto results = client_.Alloc(allocs);
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].result.ok()) {
      allocated_.insert({allocs[i].rank, allocs[i].spec.name});
    }
  }
  return results;
}

void Runner::WriteValues(const Step& step, DType dtype,
                         const std::map<int, int64_t>& numel,
                         Outcome& outcome) {
  std::vector<TensorWrite> writes;
  for (const auto& [rank, count] : numel) {
    auto values = ValuesToWrite(step, count, RankVars(rank));
    if (!values.ok()) {
      CollectErrors(RankResults<int>{{rank, values.status()}}, outcome);
      continue;
    }
    auto bytes = EncodeNumbers(dtype, *values);
    if (!bytes.ok()) {
      CollectErrors(RankResults<int>{{rank, bytes.status()}}, outcome);
      continue;
    }
    writes.push_back({rank, step.tensor,
                      step.offset * static_cast<int64_t>(DTypeSize(dtype)),
                      *std::move(bytes)});
  }
  CollectErrors(client_.Write(writes), outcome);
}

Outcome Runner::Alloc(const Step& step) {
  Outcome outcome;
  const DType dtype = *ParseDType(step.dtype);
  std::vector<TensorAlloc> allocs;
  for (int rank : step.ranks.resolved) {
    auto fill = FillFor(step, RankVars(rank));
    if (!fill.ok()) {
      CollectErrors(RankResults<int>{{rank, fill.status()}}, outcome);
      continue;
    }
    allocs.push_back(
        {rank, TensorSpec{step.tensor, dtype, step.shape_resolved}, *fill});
  }
  const auto results = AllocAll(allocs);
  CollectErrors(results, outcome);
  if (step.values.empty() && !step.values_all) return outcome;
  std::map<int, int64_t> numel;
  for (const auto& r : results) {
    if (r.result.ok()) numel[r.rank] = r.result->numel;
  }
  WriteValues(step, dtype, numel, outcome);
  return outcome;
}

Outcome Runner::Write(const Step& step) {
  Outcome outcome;
  const auto summaries = client_.Summarize(step.ranks.resolved, step.tensor, 0);
  CollectErrors(summaries, outcome);
  // Ranks of one tensor name may differ in dtype: one write per dtype.
  std::map<DType, std::map<int, int64_t>> numel;
  for (const auto& r : summaries) {
    if (r.result.ok()) {
      numel[r.result->info.dtype][r.rank] = r.result->info.numel;
    }
  }
  for (const auto& [dtype, counts] : numel) {
    WriteValues(step, dtype, counts, outcome);
  }
  return outcome;
}

Outcome Runner::Collective(const Step& step, const std::string& id) {
  Outcome outcome;
  auto results = client_.Collective(CollectiveOp(step));
  // With --group only the group's members take part.
  const auto all = client_.GroupRanks();
  RecordOp(step, id, results, std::set<int>(all.begin(), all.end()), outcome);
  return outcome;
}

Outcome Runner::PointToPoint(const Step& step, const std::string& id) {
  Outcome outcome;
  const std::map<int, Op> ops = PointToPointOps(step);
  auto results = client_.PointToPoint(ops);
  std::set<int> involved;
  for (const auto& [rank, unused] : ops) involved.insert(rank);
  RecordOp(step, id, results, involved, outcome);
  return outcome;
}

Outcome Runner::Wait(const Step& step) {
  Outcome outcome;
  std::vector<PendingWork> works, rest;
  for (const auto& w : pending_) {
    const bool selected =
        step.names.empty() || std::find(step.names.begin(), step.names.end(),
                                        w.name) != step.names.end();
    (selected ? works : rest).push_back(w);
  }
  pending_ = rest;
  const auto results = client_.Wait(WorkRefs(works), client_.options().timeout);
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const PendingWork& w = works[i];
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
    } else if (r.result->state == WorkState::kFailed) {
      const std::string message(r.result->error.message());
      const std::string text = absl::StrCat(label, ": ", message);
      outcome.Fail(text);
      outcome.lines.push_back(text);
      entry["error"] = message;
    } else {
      outcome.device_us =
          std::max(outcome.device_us, r.result->timing.device_us);
      entry["device_us"] = r.result->timing.device_us;
    }
    list.push_back(entry);
  }
  if (works.empty()) outcome.lines.push_back("(no outstanding works)");
  outcome.json["works"] = list;
  return outcome;
}

Outcome Runner::Read(const Step& step) {
  Outcome outcome;
  const auto results =
      client_.Summarize(step.ranks.resolved, step.tensor, step.limit);
  CollectErrors(results, outcome);
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : results) {
    if (!r.result.ok()) continue;
    const TensorSummary& summary = *r.result;
    const ShownHead head = ExactHead(client_, r.rank, step.tensor, summary);
    outcome.lines.push_back(absl::StrCat("rank ", r.rank, ": ", head.Render()));
    ranks.push_back({{"rank", r.rank},
                     {"values", head.json},
                     {"numel", summary.info.numel},
                     {"sum", summary.sum}});
  }
  outcome.json["ranks"] = ranks;
  return outcome;
}

Outcome Runner::Assert(const Step& step) {
  Outcome outcome;
  constexpr int64_t kMaxHead = 1 << 20;
  const int64_t head =
      step.expected_all ? kMaxHead : static_cast<int64_t>(step.expected.size());
  const auto results =
      client_.Summarize(step.ranks.resolved, step.tensor, head);
  CollectErrors(results, outcome);
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : results) {
    if (!r.result.ok()) continue;
    std::vector<double> got = r.result->head;
    const int64_t numel = r.result->info.numel;
    absl::Status check;
    nlohmann::json values = nlohmann::json::array();
    if (DoubleHoldsEveryValue(r.result->info.dtype)) {
      check = CheckValues(step, got, numel, RankVars(r.rank));
      for (size_t i = 0; i < got.size() && i < 64; ++i)
        values.push_back(got[i]);
    } else {
      // int64: compared exactly, on the elements read back as they are.
      auto exact = ExactIntegers(r.rank, step.tensor, got.size());
      check = exact.ok() ? CheckValues(step, *exact, numel, RankVars(r.rank))
                         : exact.status();
      for (size_t i = 0; exact.ok() && i < exact->size() && i < 64; ++i) {
        values.push_back((*exact)[i].integer());
      }
    }
    nlohmann::json entry = {{"rank", r.rank}, {"ok", check.ok()}};
    entry["values"] = values;
    if (!check.ok()) {
      const std::string text =
          absl::StrCat("rank ", r.rank, ": ", check.message());
      outcome.Fail(text);
      outcome.lines.push_back(text);
      entry["error"] = std::string(check.message());
    }
    if (step.expected_all && numel > kMaxHead) {
      outcome.lines.push_back(absl::StrCat("rank ", r.rank,
                                           ": checked the first ", kMaxHead,
                                           " of ", numel, " elements"));
    }
    ranks.push_back(entry);
  }
  outcome.json["ranks"] = ranks;
  return outcome;
}

absl::StatusOr<std::vector<Number>> Runner::ExactIntegers(
    int rank, const std::string& name, size_t count) {
  // A read of 0 elements would read the whole tensor.
  if (count == 0) return std::vector<Number>{};
  auto raw = client_.Read(rank, name, 0, static_cast<int64_t>(count));
  if (!raw.ok()) return raw.status();
  std::vector<Number> values;
  values.reserve(raw->size() / sizeof(int64_t));
  for (size_t at = 0; at + sizeof(int64_t) <= raw->size();
       at += sizeof(int64_t)) {
    int64_t value = 0;
    std::memcpy(&value, raw->data() + at, sizeof(value));
    values.push_back(Number::Integer(value));
  }
  return values;
}

Outcome Runner::Free(const Step& step) {
  Outcome outcome;
  for (const auto& name : step.names) {
    const auto results = client_.Free(step.ranks.resolved, name);
    for (const auto& r : results) {
      if (r.result.ok()) allocated_.erase({r.rank, name});
    }
    CollectErrors(results, outcome);
  }
  return outcome;
}

Outcome Runner::Bench(const Step& step) {
  Outcome outcome;
  const BenchOp* shape = BenchOpFor(step.op);
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
    std::vector<TensorAlloc> allocs;
    for (int rank : members) {
      allocs.push_back({rank, TensorSpec{in_name, dtype, {in}}, Fill{}});
      allocs.push_back({rank, TensorSpec{out_name, dtype, {out}}, Fill{}});
    }
    CollectErrors(AllocAll(allocs), outcome);
    if (outcome.ok) {
      auto results = client_.Bench([&](int rank) {
        BenchSpec spec;
        spec.iters = step.iters;
        spec.warmup_iters = step.warmup;
        spec.check = step.check;
        Op& op = spec.op;
        op.kind = step.op;
        op.root = step.root_resolved;
        if (step.op == OpKind::kSend) {
          const int first = members[0];
          const int second = members.size() > 1 ? members[1] : first;
          op.kind = rank == first    ? OpKind::kSend
                    : rank == second ? OpKind::kRecv
                                     : OpKind::kNop;
          op.peer = rank == first ? second : first;
          op.input = rank == first ? in_name : out_name;
        } else {
          op.input = in_name;
          op.output = out_name;
        }
        return spec;
      });
      CollectErrors(results, outcome);
      double time_us = 0;
      int64_t wrong = 0;
      for (const auto& r : results) {
        if (!r.result.ok()) continue;
        time_us = std::max(time_us, r.result->time_us > 0 ? r.result->time_us
                                                          : r.result->avg_us);
        wrong += r.result->wrong;
      }
      const int64_t size = count * element;
      const double algbw = time_us > 0 ? size / time_us / 1e3 : 0;
      const double busbw = algbw * shape->bus_factor(n);
      outcome.device_us = std::max(outcome.device_us, time_us);
      outcome.lines.push_back(
          absl::StrFormat("%12d %12d %10s %12.2f %10.2f %10.2f %8s", size,
                          count, std::string(DTypeName(dtype)), time_us, algbw,
                          busbw, step.check ? absl::StrCat(wrong) : "N/A"));
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

void Runner::FreeEverywhere(const std::string& name) {
  std::vector<int> ranks;
  for (const auto& [rank, n] : allocated_) {
    if (n == name) ranks.push_back(rank);
  }
  (void)client_.Free(ranks, name);
  for (int rank : ranks) allocated_.erase({rank, name});
}

}  // namespace ccl::ctl
