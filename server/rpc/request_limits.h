// What a worker accepts, checked in one place before anything is allocated
// or queued: the gRPC adapter validates every request here before it calls
// the core, and the fuzz target drives the same functions. Errors name the
// limit (and its flag): INVALID_ARGUMENT for a malformed request,
// RESOURCE_EXHAUSTED for one that is well formed but over a limit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "ccl/v1/worker.pb.h"

namespace ccl {

struct RequestLimits {
  // Largest message the worker's server receives (--max-message-bytes);
  // tensor writes stream in chunks under it.
  int64_t max_message_bytes = 16 << 20;
  // Tensors one worker holds at once (--max-tensors).
  int64_t max_tensors = 4096;
  // Dimensions of a tensor shape (--max-shape-rank).
  int max_shape_rank = 8;
  // Elements of one tensor (--max-tensor-elements); bytes are bounded by
  // the quota (--quota-bytes) as well.
  int64_t max_tensor_elements = int64_t{1} << 36;
  // Tensor and group names (--max-name-length), of [A-Za-z0-9_.:/-].
  size_t max_name_length = 256;
  // Ranks listed in one CreateGroup, and groups one worker knows (each has
  // a communicator and a thread) (--max-groups).
  int max_group_ranks = 1 << 16;
  int64_t max_groups = 256;
  // Op and Wait timeouts.
  int64_t max_timeout_ms = int64_t{24} * 3600 * 1000;
  // Bench iterations and GetOpLog records.
  int64_t max_bench_iters = 1000000;
  // Ops of one plan, and launches of a bench's CUDA graph.
  int max_plan_ops = 1 << 16;
  int max_graph_launches = 1 << 16;
  int64_t max_op_log_limit = 1 << 16;
  // Sequence numbers come from the coordinator, a few at a time; one near
  // INT64_MAX would make the executor's counter overflow after the gap.
  int64_t max_seq = int64_t{1} << 62;
  // Elements a summary returns.
  int64_t max_summary_head = 1 << 20;
};

// INVALID_ARGUMENT unless every limit is positive.
absl::Status ValidateLimits(const RequestLimits& limits);

// `what` says which name it is ("tensor name", "group"); empty fails.
absl::Status ValidateName(const std::string& name, const char* what,
                          const RequestLimits& limits);

// How many tensors and groups a worker holds is the core's to count
// (WorkerConfig::max_tensors, max_groups); these check the request alone.
absl::Status ValidateRequest(const v1::AllocTensorRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::FreeTensorRequest& request,
                             const RequestLimits& limits);
// One chunk of a WriteTensor stream; later chunks may leave the name empty.
absl::Status ValidateRequest(const v1::WriteTensorChunk& chunk,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::ReadTensorRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::SummarizeTensorRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::OpRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::BenchRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::WaitRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::TestRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::CreateGroupRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::DestroyGroupRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::PlanRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::ReleaseSequenceRequest& request,
                             const RequestLimits& limits);
absl::Status ValidateRequest(const v1::GetOpLogRequest& request,
                             const RequestLimits& limits);

}  // namespace ccl
