// Typed reads of an experiment's YAML nodes, each failure an
// INVALID_ARGUMENT "FILE:line N: ..." that points at the node, so that a
// person can fix the document without a cluster.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ccctl/expression.h"
#include "common/status_macros.h"

namespace ccl::ctl {

class YamlReader {
 public:
  explicit YamlReader(std::string file) : file_(std::move(file)) {}

  const std::string& file() const { return file_; }

  absl::Status Error(const YAML::Mark& mark, const std::string& what) const;
  absl::Status Error(const YAML::Node& node, const std::string& what) const;

  absl::StatusOr<std::string> Scalar(const YAML::Node& node,
                                     const std::string& key) const;
  absl::StatusOr<bool> Bool(const YAML::Node& node,
                            const std::string& key) const;
  // A number or expression; `allowed` names the identifiers it may use.
  absl::StatusOr<Expression> Expr(const YAML::Node& node,
                                  const std::string& key,
                                  const std::set<std::string>& allowed) const;
  // One expression, or a list of them.
  absl::StatusOr<std::vector<Expression>> ExprList(
      const YAML::Node& node, const std::string& key,
      const std::set<std::string>& allowed) const;
  // A constant non-negative integer.
  absl::StatusOr<int64_t> Int(const YAML::Node& node,
                              const std::string& key) const;
  // Reads body[key] into `target` when the document has the key; without
  // it `target` keeps its default. A bool, a string, or a constant integer
  // (Bool, Scalar, Int); an expression (Expr) with the identifiers
  // `allowed`.
  template <typename Target>
  absl::Status Optional(const YAML::Node& body, const std::string& key,
                        Target& target) const {
    if (!body[key]) return absl::OkStatus();
    if constexpr (std::is_same_v<Target, bool>) {
      CCL_ASSIGN_OR_RETURN(target, Bool(body[key], key));
    } else if constexpr (std::is_same_v<Target, std::string>) {
      CCL_ASSIGN_OR_RETURN(target, Scalar(body[key], key));
    } else {
      static_assert(std::is_integral_v<Target>);
      CCL_ASSIGN_OR_RETURN(const int64_t n, Int(body[key], key));
      target = static_cast<Target>(n);
    }
    return absl::OkStatus();
  }
  absl::Status Optional(const YAML::Node& body, const std::string& key,
                        const std::set<std::string>& allowed,
                        Expression& target) const;
  // `body` is a map whose keys are all in `keys`.
  absl::Status CheckKeys(const YAML::Node& body, const std::string& kind,
                         const std::set<std::string>& keys) const;

 private:
  std::string file_;
};

}  // namespace ccl::ctl
