// Early-return helpers for absl::Status / absl::StatusOr, the error type
// used across every API and RPC boundary of the project.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CCL_STATUS_CONCAT_INNER(a, b) a##b
#define CCL_STATUS_CONCAT(a, b) CCL_STATUS_CONCAT_INNER(a, b)

#define CCL_RETURN_IF_ERROR(expr)                               \
  do {                                                          \
    if (absl::Status _ccl_status = (expr); !_ccl_status.ok()) { \
      return _ccl_status;                                       \
    }                                                           \
  } while (0)

#define CCL_ASSIGN_OR_RETURN(lhs, expr)                                       \
  CCL_ASSIGN_OR_RETURN_IMPL(CCL_STATUS_CONCAT(_ccl_statusor_, __LINE__), lhs, \
                            expr)

#define CCL_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr)     \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
