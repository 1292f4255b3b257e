// Who may call which RPC: the token roles and the method table, as plain
// logic (no gRPC) so that the policy is one table a test can read. The gRPC
// side (common/credentials.cc) only extracts the method path and the bearer
// token and asks Authorize.
#pragma once

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/secrets.h"  // ConstantTimeEquals

namespace ccl {

// kRead: status and reads. kJoin: what a worker needs to take a rank and
// rendezvous (register, heartbeat, KV, the NCCL unique id), plus kRead on the
// coordinator. kFull: everything.
enum class Role { kRead, kJoin, kFull };

// The secrets a server accepts. No full token means authentication is off
// (the zero-configuration local cluster); the other two need it.
struct RoleTokens {
  std::string full;
  std::string read_only;
  std::string join;
  bool enabled() const { return !full.empty(); }
};

// The least role a full method path ("/ccl.v1.Worker/Submit") needs;
// nullopt for a method anyone may call (the standard health service, which
// orchestrators probe without credentials). Methods not in the table need
// kFull, so a new RPC is closed until someone classifies it.
std::optional<Role> RequiredRole(absl::string_view method);

// OK, or UNAUTHENTICATED (no or unknown token), or PERMISSION_DENIED (a
// known token whose role may not call `method`). `authorization` is the
// request's "authorization" metadata value, if any ("Bearer <token>").
absl::Status Authorize(const RoleTokens& tokens, absl::string_view method,
                       std::optional<absl::string_view> authorization);

// INVALID_ARGUMENT if the tokens cannot work together (a role token without
// a full token, or two roles sharing one secret).
absl::Status ValidateRoleTokens(const RoleTokens& tokens);

}  // namespace ccl
