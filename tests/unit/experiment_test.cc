// ccctl run's model without a cluster: the expression evaluator, validation
// errors (with their line numbers), value checks, and every shipped example.
#include "client/ccctl/experiment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>

#include "client/ccctl/values.h"

namespace ccl::ctl {
namespace {

using ::testing::HasSubstr;

double Eval(const std::string& text, const Vars& vars = {}) {
  auto value = EvaluateExpression(text, vars);
  EXPECT_TRUE(value.ok()) << text << ": " << value.status();
  return value.ok() ? *value : -12345;
}

TEST(ExpressionTest, Arithmetic) {
  EXPECT_EQ(Eval("3"), 3);
  EXPECT_EQ(Eval("2.5"), 2.5);
  EXPECT_EQ(Eval("1e-6"), 1e-6);
  EXPECT_EQ(Eval("1 + 2 * 3"), 7);
  EXPECT_EQ(Eval("(1 + 2) * 3"), 9);
  EXPECT_EQ(Eval("10 - 4 - 3"), 3);
  EXPECT_EQ(Eval("7 / 2"), 3.5);
  EXPECT_EQ(Eval("7 // 2"), 3);
  EXPECT_EQ(Eval("-7 // 2"), -4);
  EXPECT_EQ(Eval("7 % 3"), 1);
  EXPECT_EQ(Eval("-7 % 3"), 2);  // Python's sign rule
  EXPECT_EQ(Eval("-3"), -3);
  EXPECT_EQ(Eval("--3"), 3);
  EXPECT_EQ(Eval("-(2 + 3) * 2"), -10);
  EXPECT_EQ(Eval("2 ** 3 ** 2"), 512);
  EXPECT_EQ(Eval("-2 ** 2"), -4);
  EXPECT_EQ(Eval("2 * -3"), -6);
}

// Integers stay exact as in Python (within int64), so an int64 tensor's
// values never pass through a double; past int64, doubles as before.
TEST(ExpressionTest, IntegersStayExact) {
  auto number = [](const std::string& text) {
    auto e = Expression::Parse(text);
    EXPECT_TRUE(e.ok()) << text << ": " << e.status();
    auto n = e.ok() ? e->EvaluateNumber({{"rank", 3}}) : Number::Real(-1);
    EXPECT_TRUE(n.ok()) << text << ": " << n.status();
    return n.ok() ? *n : Number::Real(-1);
  };
  EXPECT_EQ(number("9007199254740993").integer(), 9007199254740993);
  EXPECT_EQ(number("2**53 + 1").integer(), 9007199254740993);
  EXPECT_EQ(number("-9223372036854775807 - 1").integer(), INT64_MIN);
  EXPECT_EQ(number("9223372036854775807 - rank").integer(),
            9223372036854775804);
  EXPECT_EQ(number("-7 // 2").integer(), -4);
  EXPECT_EQ(number("-7 % 3").integer(), 2);
  EXPECT_EQ(number("7 % -3").integer(), -2);
  // True division and fractions are doubles, as in Python.
  EXPECT_FALSE(number("4 / 2").is_integer());
  EXPECT_EQ(number("4 / 2").AsDouble(), 2.0);
  EXPECT_FALSE(number("2 ** -1").is_integer());
  EXPECT_FALSE(number("1.5 * 2").is_integer());
  // Past int64: a double, never a wrapped integer.
  EXPECT_FALSE(number("2**63").is_integer());
  EXPECT_EQ(number("2**63").AsDouble(), 9223372036854775808.0);
  EXPECT_FALSE(number("9223372036854775807 + 1").is_integer());
  EXPECT_FALSE(number("-(-9223372036854775807 - 1)").is_integer());
  EXPECT_FALSE(number("99999999999999999999").is_integer());
  EXPECT_EQ(number("9007199254740993").ToString(), "9007199254740993");
  EXPECT_EQ(number("0.1").ToString(), "0.10000000000000001");
}

TEST(ExpressionTest, Variables) {
  const Vars vars = {{"rank", 3}, {"world_size", 4}, {"i", 2}, {"n_1", 10}};
  EXPECT_EQ(Eval("world_size*(world_size+1)/2", vars), 10);
  EXPECT_EQ(Eval("rank + i", vars), 5);
  EXPECT_EQ(Eval("world_size*(world_size-1)/2 + world_size*rank", vars), 18);
  EXPECT_EQ(Eval("n_1 * 2", vars), 20);
  auto e = Expression::Parse("rank + i * n_1 - rank");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->identifiers(), (std::set<std::string>{"i", "n_1", "rank"}));
}

TEST(ExpressionTest, Errors) {
  for (const char* bad :
       {"", "1 +", "(1 + 2", "1 2", "2 * * 3", "1 $ 2", ")"}) {
    EXPECT_FALSE(Expression::Parse(bad).ok()) << "'" << bad << "'";
  }
  auto unknown = EvaluateExpression("x + 1", {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown variable 'x'"));
  for (const char* zero : {"1 / 0", "1 // 0", "1 % 0"}) {
    auto value = EvaluateExpression(zero, {});
    ASSERT_FALSE(value.ok()) << zero;
    EXPECT_THAT(value.status().message(), HasSubstr("division by zero"));
  }
}

// The "line N" of a document's error, or the error if it has none.
std::string ErrorOf(const std::string& yaml, int world_size = 0) {
  auto experiment = ParseExperiment(yaml, "x.yaml");
  if (!experiment.ok()) return std::string(experiment.status().message());
  if (world_size > 0) {
    auto status = ResolveExperiment(*experiment, world_size);
    if (!status.ok()) return std::string(status.message());
  }
  return "OK";
}

TEST(ParseTest, MinimalAndShorthands) {
  auto experiment = ParseExperiment(R"(
name: demo
vars: {n: 4, m: "n * world_size"}
steps:
  - alloc: {name: x, shape: [n, 2], fill: rank+1}
  - allreduce: x
  - barrier:
  - read: x
  - wait: all
  - sleep: 10ms
  - repeat: {times: m, steps: [{allreduce: {tensor: x, async: true, as: w}}, {wait: w}]}
  - assert: {tensor: x, close: ["rank + 1"], tol: 1e-3}
  - free: x
)");
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  EXPECT_EQ(experiment->name, "demo");
  ASSERT_EQ(experiment->steps.size(), 9u);
  EXPECT_EQ(experiment->steps[0].line, 5);
  EXPECT_EQ(experiment->steps[1].tensor, "x");
  EXPECT_EQ(experiment->steps[5].duration.count(), 10);
  ASSERT_TRUE(ResolveExperiment(*experiment, 3).ok());
  EXPECT_EQ(experiment->resolved_vars.at("m"), 12);
  EXPECT_EQ(experiment->steps[0].shape_resolved, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(experiment->steps[0].ranks.resolved, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(experiment->steps[6].times_resolved, 12);
  EXPECT_EQ(*experiment->steps[7].tol, 1e-3);
  EXPECT_EQ(DescribeStep(experiment->steps[1]), "allreduce sum x");

  ASSERT_TRUE(ResolveExperiment(*experiment, 3, {{"n", 1}}).ok());
  EXPECT_EQ(experiment->resolved_vars.at("m"), 3);
  EXPECT_FALSE(ResolveExperiment(*experiment, 3, {{"nope", 1}}).ok());
}

TEST(ParseTest, ErrorsCarryLineNumbers) {
  // Bad YAML.
  EXPECT_THAT(ErrorOf("steps:\n  - alloc: {name: x\n  - read: x\n"),
              HasSubstr("x.yaml:line "));
  EXPECT_THAT(ErrorOf("steps: [\n"), HasSubstr("bad YAML"));
  // Unknown step kind on line 4.
  EXPECT_THAT(ErrorOf("name: n\nsteps:\n  - barrier:\n  - allreduc: x\n"),
              HasSubstr("x.yaml:line 4: unknown step kind 'allreduc'"));
  // Unknown key on line 3.
  EXPECT_THAT(ErrorOf("steps:\n  - alloc: {name: x, shape: 2}\n  - read: "
                      "{tensor: x, lmit: 3}\n"),
              HasSubstr("line 3: unknown key 'lmit'"));
  EXPECT_THAT(ErrorOf("stepz: []\n"), HasSubstr("line 1: unknown key 'stepz'"));
  EXPECT_THAT(ErrorOf("name: x\n"), HasSubstr("no 'steps'"));
  EXPECT_THAT(ErrorOf("steps:\n  - alloc: {name: x}\n"),
              HasSubstr("line 2: alloc needs 'shape'"));
  EXPECT_THAT(ErrorOf("steps:\n  - alloc: {name: x, shape: 2, fill: bogus}\n"),
              HasSubstr("line 2: unknown fill 'bogus'"));
  EXPECT_THAT(
      ErrorOf("steps:\n  - alloc: {name: x, shape: 2, dtype: float77}\n"),
      HasSubstr("line 2:"));
  EXPECT_THAT(ErrorOf("steps:\n  - broadcast: {tensor: x, op: sum}\n"),
              HasSubstr("line 2: unknown key 'op'"));
  EXPECT_THAT(ErrorOf("steps:\n  - allreduce: {tensor: x, op: sumx}\n"),
              HasSubstr("line 2:"));
  EXPECT_THAT(ErrorOf("steps:\n  - allreduce: {tensor: x, async: maybe}\n"),
              HasSubstr("line 2: 'async' must be true or false"));
  EXPECT_THAT(ErrorOf("steps:\n  - allreduce: {tensor: x, input: y}\n"),
              HasSubstr("either 'tensor'"));
  // Expressions: syntax and variables.
  EXPECT_THAT(ErrorOf("steps:\n  - assert: {tensor: x, equal: [\"rank +\"]}\n"),
              HasSubstr("line 2: bad expression 'rank +'"));
  EXPECT_THAT(ErrorOf("steps:\n  - assert: {tensor: x, equal: [\"rnak\"]}\n"),
              HasSubstr("line 2: unknown variable 'rnak'"));
  // `i` is per element; a shape cannot use it, nor rank.
  EXPECT_THAT(ErrorOf("steps:\n  - alloc: {name: x, shape: \"rank\"}\n"),
              HasSubstr("unknown variable 'rank'"));
  EXPECT_THAT(
      ErrorOf("vars: {n: 2}\nsteps:\n  - alloc: {name: x, shape: \"n*i\"}\n"),
      HasSubstr("line 3: unknown variable 'i'"));
  EXPECT_THAT(ErrorOf("vars: {rank: 2}\nsteps: [{barrier: }]\n"),
              HasSubstr("built in"));
  // wait on a name no earlier op defined.
  EXPECT_THAT(ErrorOf("steps:\n  - barrier:\n  - wait: w\n"),
              HasSubstr("line 3: wait: no earlier async op is named 'w'"));
  EXPECT_THAT(ErrorOf("steps:\n  - assert: {tensor: x}\n"),
              HasSubstr("assert needs one of"));
  EXPECT_THAT(ErrorOf("steps:\n  - send: {tensor: x, from: 0}\n"),
              HasSubstr("needs 'from' and 'to'"));
  EXPECT_THAT(ErrorOf("steps:\n  - bench: {op: allfoo}\n"),
              HasSubstr("unknown bench op"));
  EXPECT_THAT(ErrorOf("steps:\n  - sleep: soon\n"), HasSubstr("line 2:"));
  EXPECT_THAT(ErrorOf("steps:\n  - [1, 2]\n"),
              HasSubstr("line 2: a step is a map"));
  EXPECT_THAT(ErrorOf("steps:\n  - repeat: {times: 2, steps: [{nope: 1}]}\n"),
              HasSubstr("line 2: unknown step kind 'nope'"));
}

TEST(ParseTest, ResolveChecksRanges) {
  EXPECT_EQ(ErrorOf("steps:\n  - send: {tensor: x, from: 0, to: 1}\n", 2),
            "OK");
  EXPECT_THAT(
      ErrorOf("steps:\n  - send: {tensor: x, from: 0, to: 2}\n", 2),
      HasSubstr(
          "line 2: send: to '2' is 2, out of range for a world of 2 ranks"));
  EXPECT_THAT(ErrorOf("steps:\n  - send: {tensor: x, from: 1, to: 1}\n", 2),
              HasSubstr("cannot send to itself"));
  EXPECT_THAT(
      ErrorOf("steps:\n  - broadcast: {tensor: x, src: world_size}\n", 4),
      HasSubstr("out of range"));
  EXPECT_THAT(ErrorOf("steps:\n  - read: {tensor: x, ranks: [0, 0]}\n", 4),
              HasSubstr("listed twice"));
  EXPECT_THAT(
      ErrorOf("steps:\n  - alloc: {name: x, shape: \"world_size/3\"}\n", 4),
      HasSubstr("not an integer"));
  EXPECT_THAT(
      ErrorOf("steps:\n  - alloc: {name: x, shape: 1, values: [1, 2]}\n", 4),
      HasSubstr("2 values for 1 elements"));
  EXPECT_EQ(
      ErrorOf("steps:\n  - broadcast: {tensor: x, src: world_size - 1}\n", 4),
      "OK");
}

Step AssertStep(const std::string& yaml) {
  auto experiment = ParseExperiment("steps:\n  - assert: " + yaml + "\n");
  EXPECT_TRUE(experiment.ok()) << experiment.status();
  return experiment.ok() ? experiment->steps[0] : Step{};
}

TEST(CheckValuesTest, EqualCloseAndAll) {
  const Vars vars = {{"rank", 1}, {"world_size", 4}};
  Step equal = AssertStep("{tensor: x, equal: [\"rank + i\", 2]}");
  EXPECT_TRUE(
      CheckValues(equal, {1, 2, 99}, 3, vars).ok());  // leading elements
  auto wrong = CheckValues(equal, {1, 3}, 2, vars);
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(wrong.message(), HasSubstr("[1] is 3, expected 2"));
  EXPECT_THAT(wrong.message(), HasSubstr("1 of 2 elements differ"));
  // Expected list longer than the tensor.
  EXPECT_THAT(CheckValues(equal, std::vector<double>{1}, 1, vars).message(),
              HasSubstr("the tensor has 1"));

  Step close = AssertStep("{tensor: x, close: [0.1, 0.2]}");
  EXPECT_TRUE(CheckValues(close, {0.1000000001, 0.2}, 2, vars).ok());
  EXPECT_FALSE(CheckValues(close, {0.1001, 0.2}, 2, vars).ok());

  Step all = AssertStep(
      "{tensor: x, all: \"world_size*(world_size+1)/2 + i*world_size\"}");
  EXPECT_TRUE(CheckValues(all, {10, 14, 18}, 3, vars).ok());
  EXPECT_FALSE(CheckValues(all, {10, 14, 19}, 3, vars).ok());
  Step scalar = AssertStep("{tensor: x, equal: 0}");
  EXPECT_TRUE(CheckValues(scalar, {0, 0, 0, 0}, 4, vars).ok());
}

// An int64 head read back exactly is compared exactly: 2^53 and 2^53 + 1
// are one double but two values.
TEST(CheckValuesTest, Int64ComparedExactly) {
  const Vars vars = {{"rank", 0}, {"world_size", 2}};
  Step step = AssertStep("{tensor: x, equal: [\"2**53 + 1\", -3]}");
  EXPECT_TRUE(
      CheckValues(step,
                  {Number::Integer(9007199254740993), Number::Integer(-3)}, 2,
                  vars)
          .ok());
  auto off_by_one = CheckValues(
      step, {Number::Integer(9007199254740992), Number::Integer(-3)}, 2, vars);
  ASSERT_FALSE(off_by_one.ok());
  EXPECT_THAT(off_by_one.message(),
              HasSubstr("[0] is 9007199254740992, expected 9007199254740993"));
}

TEST(ValuesToWriteTest, ListAndAll) {
  auto experiment = ParseExperiment(
      "steps:\n  - write: {tensor: x, values: [\"rank\", \"rank + i\"]}\n"
      "  - write: {tensor: x, all: \"i * 10\", offset: 1}\n");
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  auto as_doubles = [](const std::vector<Number>& numbers) {
    std::vector<double> out;
    for (const Number& n : numbers) out.push_back(n.AsDouble());
    return out;
  };
  auto values = ValuesToWrite(experiment->steps[0], 4, {{"rank", 2}});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(as_doubles(*values), (std::vector<double>{2, 3}));
  EXPECT_FALSE(ValuesToWrite(experiment->steps[0], 1, {{"rank", 2}}).ok());
  values = ValuesToWrite(experiment->steps[1], 3, {{"rank", 0}});
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(as_doubles(*values), (std::vector<double>{10, 20}));
}

// What a write step stores: integers exactly, and a value the dtype cannot
// hold refused with the value and the range, never rounded or wrapped.
TEST(ValuesToWriteTest, StoredExactlyOrRefused) {
  auto experiment = ParseExperiment(
      "steps:\n  - write: {tensor: x, values: [\"2**53 + 1\", "
      "\"-9223372036854775807 - 1\"]}\n"
      "  - write: {tensor: x, values: [\"255 + rank\"]}\n"
      "  - write: {tensor: x, values: [\"rank / 2\"]}\n"
      "  - write: {tensor: x, values: [\"-2**63\"]}\n");
  ASSERT_TRUE(experiment.ok()) << experiment.status();
  auto wide = ValuesToWrite(experiment->steps[0], 2, {{"rank", 0}});
  ASSERT_TRUE(wide.ok());
  auto bytes = EncodeNumbers(DType::kInt64, *wide);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  int64_t stored[2];
  ASSERT_EQ(bytes->size(), sizeof(stored));
  std::memcpy(stored, bytes->data(), sizeof(stored));
  EXPECT_EQ(stored[0], 9007199254740993);
  EXPECT_EQ(stored[1], INT64_MIN);

  auto byte = ValuesToWrite(experiment->steps[1], 1, {{"rank", 1}});
  ASSERT_TRUE(byte.ok());
  auto refused = EncodeNumbers(DType::kUInt8, *byte);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("256 does not fit uint8"));

  auto half = ValuesToWrite(experiment->steps[2], 1, {{"rank", 1}});
  ASSERT_TRUE(half.ok());
  EXPECT_FALSE(EncodeNumbers(DType::kInt32, *half).ok());
  // At rank 2 the same expression is 1.0, a whole number: stored as 1.
  half = ValuesToWrite(experiment->steps[2], 1, {{"rank", 2}});
  ASSERT_TRUE(half.ok());
  bytes = EncodeNumbers(DType::kInt32, *half);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  int32_t one = 0;
  std::memcpy(&one, bytes->data(), sizeof(one));
  EXPECT_EQ(one, 1);
  // -2**63 is -(2**63): its intermediate passes int64, so it is a double;
  // refused for int64 with the reason, not stored as the double's value.
  auto past = ValuesToWrite(experiment->steps[3], 1, {{"rank", 0}});
  ASSERT_TRUE(past.ok());
  auto inexact = EncodeNumbers(DType::kInt64, *past);
  ASSERT_FALSE(inexact.ok());
  EXPECT_THAT(inexact.status().message(), HasSubstr("computed in floating"));
}

// Every shipped example parses and resolves for the world sizes it supports;
// a broken example fails here rather than in front of a user.
TEST(ExamplesTest, EveryExampleIsValid) {
  int count = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(CCL_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    ++count;
    auto experiment = LoadExperiment(entry.path().string());
    ASSERT_TRUE(experiment.ok()) << experiment.status();
    EXPECT_FALSE(experiment->name.empty()) << entry.path();
    for (int world : {2, 3, 4, 8}) {
      EXPECT_TRUE(ResolveExperiment(*experiment, world).ok())
          << entry.path() << " for " << world << " ranks";
    }
  }
  EXPECT_GE(count, 10);
}

}  // namespace
}  // namespace ccl::ctl
