// What the coordinator accepts, checked in one place before the core sees a
// request: the gRPC adapter (coordinator_service.cc) validates every request
// here, and the fuzz target drives the same functions. A malformed request
// is INVALID_ARGUMENT, with a message that names the field and the limit;
// nothing is stored, parked or logged for it. Wait timeouts above the limit
// are not refused but clamped to it (ClampTimeout), so that a client asking
// to wait "forever" gets the longest wait instead of an error, and no
// duration can overflow.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ccl/v1/coordinator.pb.h"

namespace ccl::coordinator {

struct CoordinatorLimits {
  // A KV key (--max-key-bytes): keys are names ("gen3/world/rank_1"), not
  // data.
  size_t max_key_bytes = 4096;
  // A KV value or compare-set operand (--max-value-bytes, also the core's
  // CoordinatorOptions::max_value_bytes).
  size_t max_value_bytes = 1 << 20;
  // Keys one KvWait waits for.
  int max_wait_keys = 1 << 16;
  // Group names (charset [A-Za-z0-9_.:/-], as the worker's) and worker ids
  // (printable ASCII, no space).
  size_t max_name_length = 256;
  // A worker's address (host:port) and host name.
  size_t max_address_length = 1024;
  // Register, KvWait and GetUniqueId timeouts; longer ones are clamped.
  int64_t max_timeout_ms = int64_t{24} * 3600 * 1000;
  // Groups a registration resumes, and their sequence numbers.
  int max_resume_groups = 4096;
  int64_t max_seq = int64_t{1} << 62;
  // Generations a request names: far above any a world reaches, and low
  // enough that the coordinator's "one above the highest seen" cannot
  // overflow (the fuzzer's known generation INT64_MAX did).
  int64_t max_generation = int64_t{1} << 62;
  // A heartbeat's reform reason (it is logged).
  size_t max_reason_bytes = 4096;
  // The worker's secret as the coordinator issues it is 64 characters.
  size_t max_secret_bytes = 256;
  // Workers one RegisterHost registers: a host's ranks, with room for
  // hosts of many CPU workers.
  int max_host_members = 1024;
};

// INVALID_ARGUMENT unless every limit is positive.
absl::Status ValidateLimits(const CoordinatorLimits& limits);

// The timeout to use for `timeout_ms` (0 stays 0: the server's default):
// at most limits.max_timeout_ms. Negative values are the validator's to
// refuse; here they are 0.
std::chrono::milliseconds ClampTimeout(int64_t timeout_ms,
                                       const CoordinatorLimits& limits);

absl::Status ValidateRequest(const v1::RegisterRequest& request,
                             const CoordinatorLimits& limits);
// The call as a whole (how many members); each member is validated as a
// Register and answered with its own error.
absl::Status ValidateRequest(const v1::RegisterHostRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::HeartbeatRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::DeregisterRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::GetWorldRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::KvSetRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::KvGetRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::KvWaitRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::KvAddRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::KvCompareSetRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::KvDeleteRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::ReserveSequenceRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::PostUniqueIdRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::GetUniqueIdRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::HoldLeaseRequest& request,
                             const CoordinatorLimits& limits);
absl::Status ValidateRequest(const v1::AwaitSequenceHolderRequest& request,
                             const CoordinatorLimits& limits);

}  // namespace ccl::coordinator
