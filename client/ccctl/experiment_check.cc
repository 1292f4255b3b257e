// What the runner says about a step, and the pure checks it applies to what
// the workers return (assert's comparison, write's values).
#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/experiment.h"
#include "client/ccctl/format.h"

namespace ccl::ctl {

namespace {

std::string ExprListText(const std::vector<Expression>& list) {
  std::vector<std::string> parts;
  for (const auto& e : list) parts.push_back(e.text());
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

std::string RanksText(const RankList& ranks) {
  if (!ranks.exprs) return "";
  if (ranks.exprs->size() == 1) return " on rank " + (*ranks.exprs)[0].text();
  return " on ranks " + ExprListText(*ranks.exprs);
}

std::string Num(double v) { return absl::StrFormat("%.10g", v); }

// Integers exactly, doubles as Num.
std::string Num(const Number& v) {
  return v.is_integer() ? v.ToString() : Num(v.AsDouble());
}

std::string NumList(const std::vector<Number>& values, size_t limit = 16) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < values.size() && i < limit; ++i)
    parts.push_back(Num(values[i]));
  if (values.size() > limit) parts.push_back("...");
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

}  // namespace

std::string DescribeStep(const Step& step) {
  std::string async =
      step.async ? (step.as.empty() ? " async" : " async as " + step.as) : "";
  switch (step.kind) {
    case StepKind::kAlloc: {
      std::string fill = step.fill;
      if (!step.values.empty()) fill = "values " + ExprListText(step.values);
      if (step.values_all) fill = "all " + step.values_all->text();
      if (step.fill == "constant") fill = "constant " + step.fill_value.text();
      return absl::StrCat("alloc ", step.tensor, " ",
                          step.shape.empty()
                              ? absl::StrCat("[", step.values.size(), "]")
                              : ExprListText(step.shape),
                          " ", step.dtype, " ", fill, RanksText(step.ranks));
    }
    case StepKind::kWrite:
      return absl::StrCat("write ", step.tensor, " ",
                          step.values_all ? "all " + step.values_all->text()
                                          : ExprListText(step.values),
                          RanksText(step.ranks));
    case StepKind::kOp: {
      std::string text = step.kind_name;
      if (IsReduction(step.op))
        absl::StrAppend(&text, " ", std::string(ReduceOpName(step.reduce)));
      if (!step.tensor.empty()) absl::StrAppend(&text, " ", step.tensor);
      if (!step.input.empty()) {
        absl::StrAppend(&text, " ", step.input,
                        step.output.empty() ? "" : " -> " + step.output);
      }
      if (HasRoot(step.op)) {
        absl::StrAppend(&text,
                        step.op == OpKind::kReduce || step.op == OpKind::kGather
                            ? " dst "
                            : " src ",
                        step.root.text());
      }
      return text + async;
    }
    case StepKind::kSend:
      return absl::StrCat(
          step.kind_name, " ", step.tensor, " ", step.root.text(), " -> ",
          step.peer.text(),
          step.output.empty() ? "" : " (into " + step.output + ")",
          step.paired ? "" : " (no recv)", async);
    case StepKind::kRecv:
      return absl::StrCat(step.kind_name, " ", step.tensor, " on ",
                          step.root.text(), " from ", step.peer.text(), async);
    case StepKind::kWait:
      return step.names.empty() ? "wait all"
                                : "wait " + absl::StrJoin(step.names, ", ");
    case StepKind::kRead:
      return absl::StrCat("read ", step.tensor, RanksText(step.ranks));
    case StepKind::kAssert: {
      const std::string op = step.tol ? " ~= " : " == ";
      return absl::StrCat(
          "assert ", step.tensor, op,
          step.expected_all ? step.expected_all->text()
                            : ExprListText(step.expected),
          step.tol ? absl::StrCat(" (tol ", Num(*step.tol), ")") : "",
          RanksText(step.ranks));
    }
    case StepKind::kFree:
      return absl::StrCat("free ", absl::StrJoin(step.names, ", "),
                          RanksText(step.ranks));
    case StepKind::kSleep:
      return absl::StrCat("sleep ", step.duration.count(), "ms");
    case StepKind::kBench:
      return absl::StrCat("bench ", step.bench_op, " ",
                          FormatBytes(step.min_bytes),
                          step.min_bytes == step.max_bytes
                              ? ""
                              : " .. " + FormatBytes(step.max_bytes),
                          " ", step.dtype, " iters ", step.iters);
    case StepKind::kRepeat:
      return absl::StrCat("repeat ", step.times.text(), " x ",
                          step.steps.size(), " steps");
  }
  return step.kind_name;
}

absl::Status CheckValues(const Step& step, const std::vector<double>& got,
                         int64_t numel, const Vars& vars) {
  std::vector<Number> numbers;
  numbers.reserve(got.size());
  for (double value : got) numbers.push_back(Number::FromDouble(value));
  return CheckValues(step, numbers, numel, vars);
}

absl::Status CheckValues(const Step& step, const std::vector<Number>& got,
                         int64_t numel, const Vars& vars) {
  std::vector<Number> expected;
  Vars element_vars = vars;
  if (step.expected_all) {
    for (size_t i = 0; i < got.size(); ++i) {
      element_vars["i"] = static_cast<double>(i);
      auto v = step.expected_all->EvaluateNumber(element_vars);
      if (!v.ok()) return v.status();
      expected.push_back(*v);
    }
  } else {
    if (static_cast<int64_t>(step.expected.size()) > numel) {
      return absl::FailedPreconditionError(
          absl::StrCat("expected ", step.expected.size(),
                       " values, the tensor has ", numel, " elements"));
    }
    if (got.size() < step.expected.size()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "read ", got.size(), " values, expected ", step.expected.size()));
    }
    for (size_t i = 0; i < step.expected.size(); ++i) {
      element_vars["i"] = static_cast<double>(i);
      auto v = step.expected[i].EvaluateNumber(element_vars);
      if (!v.ok()) return v.status();
      expected.push_back(*v);
    }
  }
  int64_t wrong = 0;
  int64_t first = -1;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double e = expected[i].AsDouble(), g = got[i].AsDouble();
    const bool ok =
        step.tol ? std::abs(g - e) <= *step.tol * std::max(1.0, std::abs(e))
                 : SameNumber(got[i], expected[i]);
    if (!ok) {
      ++wrong;
      if (first < 0) first = static_cast<int64_t>(i);
    }
  }
  if (wrong == 0) return absl::OkStatus();
  std::vector<Number> shown_got(got.begin(), got.begin() + expected.size());
  return absl::FailedPreconditionError(absl::StrCat(
      "expected ", NumList(expected), ", got ", NumList(shown_got), ": [",
      first, "] is ", Num(got[first]), ", expected ", Num(expected[first]),
      " (", wrong, " of ", expected.size(), " elements differ)"));
}

absl::StatusOr<std::vector<Number>> ValuesToWrite(const Step& step,
                                                  int64_t numel,
                                                  const Vars& vars) {
  Vars element_vars = vars;
  std::vector<Number> values;
  const int64_t count = step.values_all
                            ? numel - step.offset
                            : static_cast<int64_t>(step.values.size());
  if (step.offset + count > numel || count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(count, " values at offset ",
                                                   step.offset, " do not fit ",
                                                   numel, " elements"));
  }
  for (int64_t i = 0; i < count; ++i) {
    // `i` is the element's index in the tensor.
    element_vars["i"] = static_cast<double>(step.offset + i);
    auto v = (step.values_all ? *step.values_all : step.values[i])
                 .EvaluateNumber(element_vars);
    if (!v.ok()) return v.status();
    values.push_back(*v);
  }
  return values;
}

}  // namespace ccl::ctl
