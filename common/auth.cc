#include "common/auth.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ccl {
namespace {

struct MethodRole {
  absl::string_view method;
  Role role;
};

// Every RPC of ccl.v1 with the least role that may call it. Reads never
// change state; join methods are what a worker calls on the coordinator.
// Wait stays full: a completed wait forgets the work id.
constexpr MethodRole kMethods[] = {
    {"/ccl.v1.Worker/GetInfo", Role::kRead},
    {"/ccl.v1.Worker/ListTensors", Role::kRead},
    {"/ccl.v1.Worker/ReadTensor", Role::kRead},
    {"/ccl.v1.Worker/SummarizeTensor", Role::kRead},
    {"/ccl.v1.Worker/Test", Role::kRead},
    {"/ccl.v1.Worker/GetOpLog", Role::kRead},
    {"/ccl.v1.Worker/AllocTensor", Role::kFull},
    {"/ccl.v1.Worker/FreeTensor", Role::kFull},
    {"/ccl.v1.Worker/WriteTensor", Role::kFull},
    {"/ccl.v1.Worker/Submit", Role::kFull},
    {"/ccl.v1.Worker/Bench", Role::kFull},
    {"/ccl.v1.Worker/Wait", Role::kFull},
    {"/ccl.v1.Worker/CreateGroup", Role::kFull},
    {"/ccl.v1.Worker/DestroyGroup", Role::kFull},
    {"/ccl.v1.Coordinator/GetWorld", Role::kRead},
    {"/ccl.v1.Coordinator/Register", Role::kJoin},
    // A host agent's registrations of its workers: what each of them may do.
    {"/ccl.v1.Coordinator/RegisterHost", Role::kJoin},
    {"/ccl.v1.Coordinator/Heartbeat", Role::kJoin},
    {"/ccl.v1.Coordinator/Deregister", Role::kJoin},
    {"/ccl.v1.Coordinator/KvSet", Role::kJoin},
    {"/ccl.v1.Coordinator/KvGet", Role::kJoin},
    {"/ccl.v1.Coordinator/KvWait", Role::kJoin},
    {"/ccl.v1.Coordinator/KvAdd", Role::kJoin},
    {"/ccl.v1.Coordinator/KvCompareSet", Role::kJoin},
    {"/ccl.v1.Coordinator/KvDelete", Role::kJoin},
    {"/ccl.v1.Coordinator/PostUniqueId", Role::kJoin},
    {"/ccl.v1.Coordinator/GetUniqueId", Role::kJoin},
    // Clients order their ops with it; a joining worker never does.
    {"/ccl.v1.Coordinator/ReserveSequence", Role::kFull},
    {"/ccl.v1.Coordinator/HoldLease", Role::kFull},
    // A worker asks who holds a seq its group waits for.
    {"/ccl.v1.Coordinator/AwaitSequenceHolder", Role::kJoin},
};

bool Grants(Role held, Role required) {
  switch (held) {
    case Role::kFull:
      return true;
    case Role::kJoin:
      return required == Role::kJoin || required == Role::kRead;
    case Role::kRead:
      return required == Role::kRead;
  }
  return false;
}

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read-only";
    case Role::kJoin:
      return "join";
    case Role::kFull:
      return "full";
  }
  return "unknown";
}

}  // namespace

std::optional<Role> RequiredRole(absl::string_view method) {
  if (absl::StartsWith(method, "/grpc.health.v1.Health/")) return std::nullopt;
  for (const MethodRole& entry : kMethods) {
    if (entry.method == method) return entry.role;
  }
  return Role::kFull;
}

absl::Status ValidateRoleTokens(const RoleTokens& tokens) {
  if (!tokens.enabled() &&
      (!tokens.read_only.empty() || !tokens.join.empty())) {
    return absl::InvalidArgumentError(
        "a read-only or join token needs a full-access token too "
        "(--token-file or CCL_TOKEN / CCL_TOKEN_FILE)");
  }
  const std::pair<absl::string_view, absl::string_view> pairs[] = {
      {tokens.full, tokens.read_only},
      {tokens.full, tokens.join},
      {tokens.read_only, tokens.join}};
  for (const auto& [a, b] : pairs) {
    if (!a.empty() && a == b) {
      return absl::InvalidArgumentError(
          "two roles share one token; each role needs its own secret");
    }
  }
  return absl::OkStatus();
}

absl::Status Authorize(const RoleTokens& tokens, absl::string_view method,
                       std::optional<absl::string_view> authorization) {
  const std::optional<Role> required = RequiredRole(method);
  if (!tokens.enabled() || !required.has_value()) return absl::OkStatus();
  constexpr absl::string_view kBearer = "Bearer ";
  if (!authorization.has_value() ||
      !absl::StartsWith(*authorization, kBearer)) {
    return absl::UnauthenticatedError(
        "this server needs a token: send 'authorization: Bearer <token>' "
        "(ccctl: --token-file or CCL_TOKEN)");
  }
  const absl::string_view presented = authorization->substr(kBearer.size());
  // Every candidate is compared, so timing does not reveal which one matched.
  std::optional<Role> held;
  if (ConstantTimeEquals(presented, tokens.full)) held = Role::kFull;
  if (!tokens.join.empty() && ConstantTimeEquals(presented, tokens.join)) {
    held = Role::kJoin;
  }
  if (!tokens.read_only.empty() &&
      ConstantTimeEquals(presented, tokens.read_only)) {
    held = Role::kRead;
  }
  if (!held.has_value()) {
    return absl::UnauthenticatedError("the token is not valid for this server");
  }
  if (!Grants(*held, *required)) {
    return absl::PermissionDeniedError(
        absl::StrCat("a ", RoleName(*held), " token may not call ", method,
                     " (it needs ", RoleName(*required), " access)"));
  }
  return absl::OkStatus();
}

}  // namespace ccl
