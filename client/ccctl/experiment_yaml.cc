#include "client/ccctl/experiment_yaml.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ccl::ctl {

absl::Status YamlReader::Error(const YAML::Mark& mark,
                               const std::string& what) const {
  return absl::InvalidArgumentError(
      absl::StrCat(file_.empty() ? "" : file_ + ":",
                   mark.line >= 0 ? absl::StrCat("line ", mark.line + 1, ": ")
                                  : std::string(),
                   what));
}
absl::Status YamlReader::Error(const YAML::Node& node,
                               const std::string& what) const {
  return Error(node.Mark(), what);
}

absl::StatusOr<std::string> YamlReader::Scalar(const YAML::Node& node,
                                               const std::string& key) const {
  if (!node.IsScalar()) return Error(node, "'" + key + "' must be a scalar");
  return node.Scalar();
}

absl::StatusOr<bool> YamlReader::Bool(const YAML::Node& node,
                                      const std::string& key) const {
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return Error(node, "'" + key + "' must be true or false");
  }
  return value;
}

absl::Status YamlReader::Optional(const YAML::Node& body,
                                  const std::string& key,
                                  const std::set<std::string>& allowed,
                                  Expression& target) const {
  if (!body[key]) return absl::OkStatus();
  CCL_ASSIGN_OR_RETURN(target, Expr(body[key], key, allowed));
  return absl::OkStatus();
}

absl::StatusOr<Expression> YamlReader::Expr(
    const YAML::Node& node, const std::string& key,
    const std::set<std::string>& allowed) const {
  if (!node.IsScalar()) {
    return Error(node, "'" + key + "' must be a number or an expression");
  }
  auto e = Expression::Parse(node.Scalar());
  if (!e.ok()) return Error(node, std::string(e.status().message()));
  for (const auto& id : e->identifiers()) {
    if (!allowed.count(id)) {
      return Error(node, absl::StrCat("unknown variable '", id, "' in '", key,
                                      "' (may use: ",
                                      absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return e;
}

absl::StatusOr<std::vector<Expression>> YamlReader::ExprList(
    const YAML::Node& node, const std::string& key,
    const std::set<std::string>& allowed) const {
  std::vector<Expression> list;
  if (node.IsScalar()) {
    auto e = Expr(node, key, allowed);
    if (!e.ok()) return e.status();
    list.push_back(*e);
    return list;
  }
  if (!node.IsSequence()) return Error(node, "'" + key + "' must be a list");
  for (const auto& item : node) {
    auto e = Expr(item, key, allowed);
    if (!e.ok()) return e.status();
    list.push_back(*e);
  }
  return list;
}

absl::StatusOr<int64_t> YamlReader::Int(const YAML::Node& node,
                                        const std::string& key) const {
  auto e = Expr(node, key, {});
  if (!e.ok()) return e.status();
  double v = *e->Evaluate({});
  if (v != std::floor(v) || v < 0) {
    return Error(node, "'" + key + "' must be a non-negative integer");
  }
  return static_cast<int64_t>(v);
}

absl::Status YamlReader::CheckKeys(const YAML::Node& body,
                                   const std::string& kind,
                                   const std::set<std::string>& keys) const {
  if (!body.IsMap())
    return Error(body, "'" + kind + "' needs a map of options");
  for (const auto& entry : body) {
    const std::string key = entry.first.Scalar();
    if (!keys.count(key)) {
      return Error(entry.first, absl::StrCat("unknown key '", key, "' in ",
                                             kind, " (expected: ",
                                             absl::StrJoin(keys, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace ccl::ctl
