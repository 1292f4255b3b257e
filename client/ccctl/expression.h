// The arithmetic of `ccctl run` experiments: numbers, variables (rank,
// world_size, i and the experiment's vars), + - * / // % **, unary minus and
// parentheses. `/` is true division, `//` floors and `%` takes the sign of
// the divisor, as in Python, so that tutorial formulas read the same. As in
// Python, integers stay exact: a result is an integer while every operand and
// operation keeps it one (within int64), so an int64 tensor's values never
// pass through a double.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ccl::ctl {

using Vars = std::map<std::string, double>;

// A value an experiment computes or reads back: an exact integer or a double.
class Number {
 public:
  Number() = default;
  static Number Integer(int64_t value);
  static Number Real(double value);
  // A double that holds an integer exactly (|v| <= 2^53) becomes one.
  static Number FromDouble(double value);

  bool is_integer() const { return is_integer_; }
  int64_t integer() const { return integer_; }
  double AsDouble() const;
  // Exact for integers; "%.17g" (round-trips) for doubles.
  std::string ToString() const;

 private:
  bool is_integer_ = true;
  int64_t integer_ = 0;
  double real_ = 0;
};

// Equal as numbers: two integers exactly, anything else as doubles.
bool SameNumber(const Number& a, const Number& b);

class Expression {
 public:
  Expression() = default;  // the constant 0
  static absl::StatusOr<Expression> Parse(std::string_view text);
  static Expression Constant(double value);

  absl::StatusOr<double> Evaluate(const Vars& vars) const;
  // The same, integers kept exact.
  absl::StatusOr<Number> EvaluateNumber(const Vars& vars) const;
  const std::string& text() const { return text_; }
  const std::set<std::string>& identifiers() const { return identifiers_; }

 private:
  enum class Operator {
    kNumber,
    kVariable,
    kNegate,  // unary: `lhs` only
    kAdd,
    kSubtract,
    kMultiply,
    kDivide,
    kFloorDivide,
    kModulo,
    kPower,
  };
  // The tree lives in `nodes_`; children are indexes into it.
  struct Node {
    Operator op = Operator::kNumber;
    Number value;      // kNumber
    std::string name;  // kVariable
    int lhs = -1, rhs = -1;
  };
  absl::StatusOr<Number> Eval(int node, const Vars& vars) const;
  // Integer arithmetic as Python's, or nothing where int64 cannot hold the
  // result (Eval falls back to doubles).
  static std::optional<int64_t> IntegerOp(Operator op, int64_t a, int64_t b);

  std::string text_ = "0";
  std::vector<Node> nodes_ = {Node{}};
  int root_ = 0;
  std::set<std::string> identifiers_;
  friend class ExpressionParser;
};

// Evaluates `text` at once (parse + evaluate).
absl::StatusOr<double> EvaluateExpression(std::string_view text,
                                          const Vars& vars);

}  // namespace ccl::ctl
