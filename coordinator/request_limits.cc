#include "coordinator/request_limits.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "coordinator/sequence_leases.h"

namespace ccl::coordinator {
namespace {

// Sequence counts and unique ids: the core's own bounds, checked here too
// so that the adapter refuses before the core is called.
// As many as a worker's executor accepts ahead of its next seq
// (Executor::kMaxSeqsAhead): a range that long can be used, or released.
constexpr int64_t kMaxSequenceCount = int64_t{1} << 16;
constexpr size_t kMaxUniqueIdBytes = 4096;

bool IsGroupChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
         c == '/' || c == '-';
}

// Printable ASCII without space: addresses, hosts and worker ids end up in
// logs and in other clients' output.
bool IsTokenChar(char c) { return c > 0x20 && c < 0x7f; }

bool IsControl(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u < 0x20 && c != '\t') || u == 0x7f;
}

absl::Status TooLong(const char* what, size_t size, size_t limit,
                     const char* flag) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, " has ", size, " bytes; the limit is ", limit, flag));
}

// Empty is allowed (the world); the name itself is never echoed, as it may
// hold control characters.
absl::Status Group(const std::string& name, const CoordinatorLimits& limits) {
  if (name.size() > limits.max_name_length) {
    return TooLong("group name", name.size(), limits.max_name_length, "");
  }
  if (!std::all_of(name.begin(), name.end(), IsGroupChar)) {
    return absl::InvalidArgumentError(
        "group name has a character outside [A-Za-z0-9_.:/-]");
  }
  return absl::OkStatus();
}

// A seq per group (a resume's next seqs, a heartbeat's progress): at most
// max_resume_groups groups, names as groups have them, seqs in range.
absl::Status NextSeqs(const char* what, const char* seq_what,
                      const google::protobuf::Map<std::string, int64_t>& seqs,
                      const CoordinatorLimits& limits) {
  if (seqs.size() > static_cast<size_t>(limits.max_resume_groups)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", seqs.size(),
                                                   " groups; the limit is ",
                                                   limits.max_resume_groups));
  }
  for (const auto& [group, next] : seqs) {
    CCL_RETURN_IF_ERROR(Group(group, limits));
    if (next < 0 || next > limits.max_seq) {
      return absl::InvalidArgumentError(absl::StrCat(
          seq_what, " ", next, " is not in [0, ", limits.max_seq, "]"));
    }
  }
  return absl::OkStatus();
}

absl::Status Token(const char* what, const std::string& value, size_t limit) {
  if (value.size() > limit) return TooLong(what, value.size(), limit, "");
  if (!std::all_of(value.begin(), value.end(), IsTokenChar)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has a character outside printable ASCII, or a space"));
  }
  return absl::OkStatus();
}

absl::Status Key(const std::string& key, const CoordinatorLimits& limits) {
  if (key.empty()) return absl::InvalidArgumentError("key is empty");
  if (key.size() > limits.max_key_bytes) {
    return TooLong("key", key.size(), limits.max_key_bytes,
                   " (--max-key-bytes)");
  }
  if (std::any_of(key.begin(), key.end(), IsControl)) {
    return absl::InvalidArgumentError("key has a control character");
  }
  return absl::OkStatus();
}

absl::Status Value(const char* what, const std::string& value,
                   const CoordinatorLimits& limits) {
  if (value.size() > limits.max_value_bytes) {
    return TooLong(what, value.size(), limits.max_value_bytes,
                   " (--max-value-bytes)");
  }
  return absl::OkStatus();
}

// A client's lease id (sequence_leases.h): printable, bounded.
absl::Status LeaseId(const std::string& lease, bool required) {
  if (lease.empty() && !required) return absl::OkStatus();
  if (lease.empty() || lease.size() > SequenceLeases::kMaxLeaseBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease id must be 1 to ", SequenceLeases::kMaxLeaseBytes,
                     " bytes, got ", lease.size()));
  }
  for (char c : lease) {
    if (c < '!' || c > '~') {
      return absl::InvalidArgumentError(
          "lease id must be printable ASCII without spaces");
    }
  }
  return absl::OkStatus();
}

absl::Status NotNegative(const char* what, int64_t value) {
  if (value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " ", value, " is negative"));
}

absl::Status Generation(const char* what, int64_t value,
                        const CoordinatorLimits& limits) {
  if (value >= 0 && value <= limits.max_generation) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", value, " is not in [0, ", limits.max_generation, "]"));
}

absl::Status Secret(const std::string& secret,
                    const CoordinatorLimits& limits) {
  return Token("worker secret", secret, limits.max_secret_bytes);
}

}  // namespace

absl::Status ValidateLimits(const CoordinatorLimits& limits) {
  if (limits.max_key_bytes == 0 || limits.max_value_bytes == 0 ||
      limits.max_wait_keys <= 0 || limits.max_name_length == 0 ||
      limits.max_address_length == 0 || limits.max_timeout_ms <= 0 ||
      limits.max_resume_groups <= 0 || limits.max_seq <= 0 ||
      limits.max_generation <= 0 || limits.max_reason_bytes == 0 ||
      limits.max_secret_bytes == 0 || limits.max_host_members <= 0) {
    return absl::InvalidArgumentError(
        "every coordinator request limit must be positive");
  }
  return absl::OkStatus();
}

std::chrono::milliseconds ClampTimeout(int64_t timeout_ms,
                                       const CoordinatorLimits& limits) {
  return std::chrono::milliseconds(
      std::clamp<int64_t>(timeout_ms, 0, limits.max_timeout_ms));
}

absl::Status ValidateRequest(const v1::RegisterHostRequest& request,
                             const CoordinatorLimits& limits) {
  if (request.members().empty()) {
    return absl::InvalidArgumentError(
        "register host: no members; send at least one registration");
  }
  if (request.members_size() > limits.max_host_members) {
    return absl::InvalidArgumentError(
        absl::StrCat("register host: ", request.members_size(),
                     " members, at most ", limits.max_host_members,
                     " in one call; split them over several calls"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::RegisterRequest& request,
                             const CoordinatorLimits& limits) {
  if (request.address().empty()) {
    return absl::InvalidArgumentError(
        "register: address is empty; pass the worker's host:port");
  }
  CCL_RETURN_IF_ERROR(
      Token("address", request.address(), limits.max_address_length));
  CCL_RETURN_IF_ERROR(Token("host", request.host(), limits.max_address_length));
  CCL_RETURN_IF_ERROR(
      Token("host id", request.host_id(), limits.max_address_length));
  CCL_RETURN_IF_ERROR(
      Token("boot id", request.boot_id(), limits.max_address_length));
  CCL_RETURN_IF_ERROR(Token("device bus id", request.device_bus_id(),
                            limits.max_address_length));
  CCL_RETURN_IF_ERROR(
      Token("worker id", request.worker_id(), limits.max_name_length));
  CCL_RETURN_IF_ERROR(Secret(request.worker_secret(), limits));
  if (request.has_requested_rank()) {
    CCL_RETURN_IF_ERROR(
        NotNegative("requested rank", request.requested_rank()));
  }
  CCL_RETURN_IF_ERROR(NotNegative("timeout_ms", request.timeout_ms()));
  if (request.has_nccl_ranks_per_root()) {
    CCL_RETURN_IF_ERROR(
        NotNegative("nccl_ranks_per_root", request.nccl_ranks_per_root()));
  }
  CCL_RETURN_IF_ERROR(
      Generation("resume generation", request.resume_generation(), limits));
  CCL_RETURN_IF_ERROR(
      Generation("known generation", request.known_generation(), limits));
  return NextSeqs("register resumes", "resumed next seq",
                  request.resume_next_seq(), limits);
}

absl::Status ValidateRequest(const v1::HeartbeatRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(NotNegative("rank", request.rank()));
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(
      Token("worker id", request.worker_id(), limits.max_name_length));
  CCL_RETURN_IF_ERROR(Secret(request.worker_secret(), limits));
  CCL_RETURN_IF_ERROR(NotNegative("tensor count", request.tensor_count()));
  CCL_RETURN_IF_ERROR(NotNegative("tensor bytes", request.tensor_bytes()));
  CCL_RETURN_IF_ERROR(NextSeqs("heartbeat reports",
                               "heartbeat's finished_below",
                               request.finished_below(), limits));
  for (const auto& [what, reason] :
       {std::pair<const char*, const std::string*>{"reform reason",
                                                   &request.reform_reason()},
        {"seal reason", &request.seal_reason()}}) {
    if (reason->size() > limits.max_reason_bytes) {
      return TooLong(what, reason->size(), limits.max_reason_bytes, "");
    }
    if (std::any_of(reason->begin(), reason->end(), IsControl)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a control character"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::DeregisterRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(NotNegative("rank", request.rank()));
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(
      Token("worker id", request.worker_id(), limits.max_name_length));
  return Secret(request.worker_secret(), limits);
}

absl::Status ValidateRequest(const v1::GetWorldRequest&,
                             const CoordinatorLimits&) {
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::KvSetRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(Key(request.key(), limits));
  return Value("value", request.value(), limits);
}

absl::Status ValidateRequest(const v1::KvGetRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  return Key(request.key(), limits);
}

absl::Status ValidateRequest(const v1::KvWaitRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(NotNegative("timeout_ms", request.timeout_ms()));
  if (request.keys_size() > limits.max_wait_keys) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv wait names ", request.keys_size(),
                     " keys; the limit is ", limits.max_wait_keys));
  }
  for (const std::string& key : request.keys())
    CCL_RETURN_IF_ERROR(Key(key, limits));
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::KvAddRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  return Key(request.key(), limits);
}

absl::Status ValidateRequest(const v1::KvCompareSetRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(Key(request.key(), limits));
  CCL_RETURN_IF_ERROR(Value("expected value", request.expected(), limits));
  return Value("desired value", request.desired(), limits);
}

absl::Status ValidateRequest(const v1::KvDeleteRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  return Key(request.key(), limits);
}

absl::Status ValidateRequest(const v1::ReserveSequenceRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(Group(request.group(), limits));
  if (request.count() < 1 || request.count() > kMaxSequenceCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("reserve sequence: count must be in [1, ",
                     kMaxSequenceCount, "], got ", request.count()));
  }
  return LeaseId(request.lease(), /*required=*/false);
}

absl::Status ValidateRequest(const v1::PostUniqueIdRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(Group(request.group(), limits));
  if (request.unique_id().empty() ||
      request.unique_id().size() > kMaxUniqueIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("post unique id: the id must be 1 to ", kMaxUniqueIdBytes,
                     " bytes, got ", request.unique_id().size()));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::GetUniqueIdRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(NotNegative("timeout_ms", request.timeout_ms()));
  return Group(request.group(), limits);
}

absl::Status ValidateRequest(const v1::HoldLeaseRequest& request,
                             const CoordinatorLimits& /*limits*/) {
  return LeaseId(request.lease(), /*required=*/true);
}

absl::Status ValidateRequest(const v1::AwaitSequenceHolderRequest& request,
                             const CoordinatorLimits& limits) {
  CCL_RETURN_IF_ERROR(Generation("generation", request.generation(), limits));
  CCL_RETURN_IF_ERROR(NotNegative("seq", request.seq()));
  CCL_RETURN_IF_ERROR(NotNegative("timeout_ms", request.timeout_ms()));
  return Group(request.group(), limits);
}

}  // namespace ccl::coordinator
