#include "client/ccctl/expression.h"

#include <cctype>
#include <cmath>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ccl::ctl {

class ExpressionParser {
 public:
  explicit ExpressionParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Expression> Run() {
    Expression e;
    e.text_ = std::string(text_);
    e.nodes_.clear();
    out_ = &e;
    auto root = ParseSum();
    if (!root.ok()) return root.status();
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected '" + Rest() + "'");
    e.root_ = *root;
    return e;
  }

 private:
  absl::Status Error(const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("bad expression '", std::string(text_), "': ", what));
  }
  std::string Rest() const { return std::string(text_.substr(pos_, 10)); }
  void SkipSpace() {
    while (pos_ < text_.size() &&
           std::isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }
  // Consumes `token` if it comes next (and, for "*" or "/", is not the start
  // of "**" or "//").
  bool Accept(std::string_view token) {
    SkipSpace();
    if (text_.substr(pos_, token.size()) != token) return false;
    if (token.size() == 1 && pos_ + 1 < text_.size() &&
        text_[pos_ + 1] == token[0] && (token[0] == '*' || token[0] == '/')) {
      return false;
    }
    pos_ += token.size();
    return true;
  }
  int Add(Expression::Node node) {
    out_->nodes_.push_back(std::move(node));
    return static_cast<int>(out_->nodes_.size()) - 1;
  }
  int Binary(Expression::Operator op, int lhs, int rhs) {
    Expression::Node node;
    node.op = op;
    node.lhs = lhs;
    node.rhs = rhs;
    return Add(node);
  }

  absl::StatusOr<int> ParseSum() {
    auto lhs = ParseProduct();
    if (!lhs.ok()) return lhs;
    while (true) {
      Expression::Operator op;
      if (Accept("+")) {
        op = Expression::Operator::kAdd;
      } else if (Accept("-")) {
        op = Expression::Operator::kSubtract;
      } else {
        return lhs;
      }
      auto rhs = ParseProduct();
      if (!rhs.ok()) return rhs;
      lhs = Binary(op, *lhs, *rhs);
    }
  }
  absl::StatusOr<int> ParseProduct() {
    auto lhs = ParseUnary();
    if (!lhs.ok()) return lhs;
    while (true) {
      Expression::Operator op;
      if (Accept("*")) {
        op = Expression::Operator::kMultiply;
      } else if (Accept("//")) {
        op = Expression::Operator::kFloorDivide;
      } else if (Accept("/")) {
        op = Expression::Operator::kDivide;
      } else if (Accept("%")) {
        op = Expression::Operator::kModulo;
      } else {
        return lhs;
      }
      auto rhs = ParseUnary();
      if (!rhs.ok()) return rhs;
      lhs = Binary(op, *lhs, *rhs);
    }
  }
  absl::StatusOr<int> ParseUnary() {
    if (Accept("-")) {
      auto operand = ParseUnary();
      if (!operand.ok()) return operand;
      return Binary(Expression::Operator::kNegate, *operand, -1);
    }
    if (Accept("+")) return ParseUnary();
    return ParsePower();
  }
  // ** binds tighter than a unary minus on its left and is right-assoc.
  absl::StatusOr<int> ParsePower() {
    auto base = ParsePrimary();
    if (!base.ok()) return base;
    if (!Accept("**")) return base;
    auto exponent = ParseUnary();
    if (!exponent.ok()) return exponent;
    return Binary(Expression::Operator::kPower, *base, *exponent);
  }
  absl::StatusOr<int> ParsePrimary() {
    if (++depth_ > 200) return Error("nested too deeply");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end");
    const char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      auto inner = ParseSum();
      if (!inner.ok()) return inner;
      if (!Accept(")")) return Error("missing ')'");
      --depth_;
      return inner;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      const std::string rest(text_.substr(pos_));
      size_t used = 0;
      double value = 0;
      try {
        value = std::stod(rest, &used);
      } catch (const std::exception&) {
        return Error("bad number at '" + Rest() + "'");
      }
      // stod accepts "inf", "nan" and hex; we only see digits or '.' here.
      pos_ += used;
      Expression::Node node;
      node.value = value;
      --depth_;
      return Add(node);
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[end])) ||
              text_[end] == '_')) {
        ++end;
      }
      Expression::Node node;
      node.op = Expression::Operator::kVariable;
      node.name = std::string(text_.substr(pos_, end - pos_));
      out_->identifiers_.insert(node.name);
      pos_ = end;
      --depth_;
      return Add(node);
    }
    return Error("unexpected '" + Rest() + "'");
  }

  std::string_view text_;
  size_t pos_ = 0;
  int depth_ = 0;
  Expression* out_ = nullptr;
};

absl::StatusOr<Expression> Expression::Parse(std::string_view text) {
  return ExpressionParser(text).Run();
}

Expression Expression::Constant(double value) {
  Expression e;
  e.nodes_[0].value = value;
  e.text_ = absl::StrFormat("%.17g", value);
  return e;
}

absl::StatusOr<double> Expression::Evaluate(const Vars& vars) const {
  return Eval(root_, vars);
}

absl::StatusOr<double> Expression::Eval(int index, const Vars& vars) const {
  const Node& node = nodes_[index];
  if (node.op == Operator::kNumber) return node.value;
  if (node.op == Operator::kVariable) {
    auto it = vars.find(node.name);
    if (it == vars.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown variable '", node.name, "' in '", text_, "'"));
    }
    return it->second;
  }
  auto lhs = Eval(node.lhs, vars);
  if (!lhs.ok()) return lhs;
  if (node.op == Operator::kNegate) return -*lhs;
  auto rhs = Eval(node.rhs, vars);
  if (!rhs.ok()) return rhs;
  const double a = *lhs, b = *rhs;
  auto by_zero = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("division by zero in '", text_, "'"));
  };
  switch (node.op) {
    case Operator::kAdd:
      return a + b;
    case Operator::kSubtract:
      return a - b;
    case Operator::kMultiply:
      return a * b;
    case Operator::kDivide:
      if (b == 0) return by_zero();
      return a / b;
    case Operator::kFloorDivide:
      if (b == 0) return by_zero();
      return std::floor(a / b);
    case Operator::kModulo: {
      if (b == 0) return by_zero();
      double r = std::fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
    case Operator::kPower:
      return std::pow(a, b);
    case Operator::kNumber:
    case Operator::kVariable:
    case Operator::kNegate:
      break;  // handled above
  }
  return absl::InternalError("bad expression node");
}

absl::StatusOr<double> EvaluateExpression(std::string_view text,
                                          const Vars& vars) {
  auto e = Expression::Parse(text);
  if (!e.ok()) return e.status();
  return e->Evaluate(vars);
}

}  // namespace ccl::ctl
