// The arithmetic of `ccctl run` experiments: numbers, variables (rank,
// world_size, i and the experiment's vars), + - * / // % **, unary minus and
// parentheses. `/` is true division, `//` floors and `%` takes the sign of
// the divisor, as in Python, so that tutorial formulas read the same.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace ccl::ctl {

using Vars = std::map<std::string, double>;

class Expression {
 public:
  Expression() = default;  // the constant 0
  static absl::StatusOr<Expression> Parse(std::string_view text);
  static Expression Constant(double value);

  absl::StatusOr<double> Evaluate(const Vars& vars) const;
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
    double value = 0;  // kNumber
    std::string name;  // kVariable
    int lhs = -1, rhs = -1;
  };
  absl::StatusOr<double> Eval(int node, const Vars& vars) const;

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
