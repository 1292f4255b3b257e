#include "client/ccctl/expression.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <exception>
#include <limits>
#include <optional>

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
      // Digits alone are an integer, kept exact when int64 holds it.
      const std::string_view digits = text_.substr(pos_, used);
      Expression::Node node;
      node.value = Number::Real(value);
      if (digits.find_first_not_of("0123456789") == std::string_view::npos) {
        int64_t integer = 0;
        const auto [end, error] = std::from_chars(
            digits.data(), digits.data() + digits.size(), integer);
        if (error == std::errc() && end == digits.data() + digits.size()) {
          node.value = Number::Integer(integer);
        }
      }
      pos_ += used;
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

Number Number::Integer(int64_t value) {
  Number n;
  n.is_integer_ = true;
  n.integer_ = value;
  return n;
}

Number Number::Real(double value) {
  Number n;
  n.is_integer_ = false;
  n.real_ = value;
  return n;
}

Number Number::FromDouble(double value) {
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (std::isfinite(value) && std::trunc(value) == value &&
      std::fabs(value) <= kExact) {
    return Integer(static_cast<int64_t>(value));
  }
  return Real(value);
}

double Number::AsDouble() const {
  return is_integer_ ? static_cast<double>(integer_) : real_;
}

std::string Number::ToString() const {
  if (is_integer_) return absl::StrCat(integer_);
  return absl::StrFormat("%.17g", real_);
}

bool SameNumber(const Number& a, const Number& b) {
  if (a.is_integer() && b.is_integer()) return a.integer() == b.integer();
  return a.AsDouble() == b.AsDouble();
}

Expression Expression::Constant(double value) {
  Expression e;
  e.nodes_[0].value = Number::FromDouble(value);
  e.text_ = absl::StrFormat("%.17g", value);
  return e;
}

absl::StatusOr<double> Expression::Evaluate(const Vars& vars) const {
  auto value = Eval(root_, vars);
  if (!value.ok()) return value.status();
  return value->AsDouble();
}

absl::StatusOr<Number> Expression::EvaluateNumber(const Vars& vars) const {
  return Eval(root_, vars);
}

std::optional<int64_t> Expression::IntegerOp(Operator op, int64_t a,
                                             int64_t b) {
  using Op = Operator;
  int64_t out = 0;
  switch (op) {
    case Op::kAdd:
      if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
      return out;
    case Op::kSubtract:
      if (__builtin_sub_overflow(a, b, &out)) return std::nullopt;
      return out;
    case Op::kMultiply:
      if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
      return out;
    case Op::kFloorDivide: {
      if (a == std::numeric_limits<int64_t>::min() && b == -1) {
        return std::nullopt;
      }
      int64_t q = a / b;
      if (a % b != 0 && ((a < 0) != (b < 0))) --q;
      return q;
    }
    case Op::kModulo: {
      if (b == -1) return 0;
      int64_t r = a % b;
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return r;
    }
    case Op::kPower: {
      if (b < 0) return std::nullopt;  // a fraction: a double
      int64_t result = 1, base = a;
      for (int64_t e = b; e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) {
          return std::nullopt;
        }
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) {
          return std::nullopt;
        }
      }
      return result;
    }
    default:
      return std::nullopt;  // true division is a double, as in Python
  }
}

absl::StatusOr<Number> Expression::Eval(int index, const Vars& vars) const {
  const Node& node = nodes_[index];
  if (node.op == Operator::kNumber) return node.value;
  if (node.op == Operator::kVariable) {
    auto it = vars.find(node.name);
    if (it == vars.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown variable '", node.name, "' in '", text_, "'"));
    }
    return Number::FromDouble(it->second);
  }
  auto lhs = Eval(node.lhs, vars);
  if (!lhs.ok()) return lhs;
  if (node.op == Operator::kNegate) {
    if (lhs->is_integer() &&
        lhs->integer() != std::numeric_limits<int64_t>::min()) {
      return Number::Integer(-lhs->integer());
    }
    return Number::Real(-lhs->AsDouble());
  }
  auto rhs = Eval(node.rhs, vars);
  if (!rhs.ok()) return rhs;
  auto by_zero = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("division by zero in '", text_, "'"));
  };
  const bool divides = node.op == Operator::kDivide ||
                       node.op == Operator::kFloorDivide ||
                       node.op == Operator::kModulo;
  if (divides && rhs->AsDouble() == 0) return by_zero();
  if (lhs->is_integer() && rhs->is_integer()) {
    if (auto exact = IntegerOp(node.op, lhs->integer(), rhs->integer())) {
      return Number::Integer(*exact);
    }
  }
  const double a = lhs->AsDouble(), b = rhs->AsDouble();
  switch (node.op) {
    case Operator::kAdd:
      return Number::Real(a + b);
    case Operator::kSubtract:
      return Number::Real(a - b);
    case Operator::kMultiply:
      return Number::Real(a * b);
    case Operator::kDivide:
      return Number::Real(a / b);
    case Operator::kFloorDivide:
      return Number::Real(std::floor(a / b));
    case Operator::kModulo: {
      double r = std::fmod(a, b);
      if (r != 0 && ((r < 0) != (b < 0))) r += b;
      return Number::Real(r);
    }
    case Operator::kPower:
      return Number::Real(std::pow(a, b));
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
