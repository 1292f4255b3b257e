#include "server/rpc/request_limits.h"

#include "absl/strings/str_cat.h"
#include "common/proto_convert.h"
#include "common/types.h"

namespace ccl {
namespace {

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
         c == '/' || c == '-';
}

absl::Status OptionalName(const std::string& name, const char* what,
                          const RequestLimits& limits) {
  return name.empty() ? absl::OkStatus() : ValidateName(name, what, limits);
}

absl::Status Timeout(int64_t timeout_ms, const RequestLimits& limits) {
  if (timeout_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms ", timeout_ms, " is negative"));
  }
  if (timeout_ms > limits.max_timeout_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout_ms ", timeout_ms, " is over the limit of ",
                     limits.max_timeout_ms, " ms (max_timeout_ms)"));
  }
  return absl::OkStatus();
}

absl::Status Seq(int64_t seq, const RequestLimits& limits) {
  if (seq < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq ", seq, " is negative"));
  }
  if (seq > limits.max_seq) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq ", seq, " is over the limit of ", limits.max_seq, " (max_seq)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateLimits(const RequestLimits& limits) {
  if (limits.max_message_bytes <= 0 || limits.max_tensors <= 0 ||
      limits.max_shape_rank <= 0 || limits.max_tensor_elements <= 0 ||
      limits.max_name_length == 0 || limits.max_group_ranks <= 0 ||
      limits.max_groups <= 0 || limits.max_seq <= 0 ||
      limits.max_timeout_ms <= 0 || limits.max_bench_iters <= 0 ||
      limits.max_op_log_limit <= 0 || limits.max_summary_head <= 0) {
    return absl::InvalidArgumentError("every request limit must be positive");
  }
  return absl::OkStatus();
}

absl::Status ValidateName(const std::string& name, const char* what,
                          const RequestLimits& limits) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  }
  if (name.size() > limits.max_name_length) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", name.size(),
                     " characters; the limit --max-name-length is ",
                     limits.max_name_length));
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      // Not echoed: it may hold control characters.
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has a character outside [A-Za-z0-9_.:/-]"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::AllocTensorRequest& request,
                             const RequestLimits& limits) {
  const v1::TensorSpec& spec = request.spec();
  if (absl::Status s = ValidateName(spec.name(), "tensor name", limits);
      !s.ok()) {
    return s;
  }
  auto dtype = FromProto(spec.dtype());
  if (!dtype.ok()) return dtype.status();
  if (spec.shape_size() > limits.max_shape_rank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape has ", spec.shape_size(),
        " dimensions; the limit --max-shape-rank is ", limits.max_shape_rank));
  }
  int64_t numel = 1;
  for (int64_t dim : spec.shape()) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape has a negative dimension ", dim));
    }
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      return absl::InvalidArgumentError(
          "shape overflows a 64-bit element count");
    }
  }
  if (numel > limits.max_tensor_elements) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tensor of ", numel,
                     " elements is over the limit --max-tensor-elements of ",
                     limits.max_tensor_elements));
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(DTypeSize(*dtype)),
                             &bytes)) {
    return absl::InvalidArgumentError("shape overflows a 64-bit byte count");
  }
  if (!v1::FillKind_IsValid(request.fill().kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown fill kind ", request.fill().kind()));
  }
  if (request.generation() < 0 || (request.has_rank() && request.rank() < 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the world view of an alloc needs a generation >= 0 and a rank >= 0; "
        "got generation ",
        request.generation(), " and rank ", request.rank()));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::FreeTensorRequest& request,
                             const RequestLimits& limits) {
  return ValidateName(request.name(), "tensor name", limits);
}

absl::Status ValidateRequest(const v1::WriteTensorChunk& chunk,
                             const RequestLimits& limits) {
  if (absl::Status s = OptionalName(chunk.name(), "tensor name", limits);
      !s.ok()) {
    return s;
  }
  if (chunk.offset_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset_bytes ", chunk.offset_bytes(), " is negative"));
  }
  int64_t end = 0;
  if (__builtin_add_overflow(chunk.offset_bytes(),
                             static_cast<int64_t>(chunk.data().size()), &end)) {
    return absl::InvalidArgumentError("offset_bytes + data overflows");
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::ReadTensorRequest& request,
                             const RequestLimits& limits) {
  if (absl::Status s = ValidateName(request.name(), "tensor name", limits);
      !s.ok()) {
    return s;
  }
  if (request.offset() < 0 || request.count() < 0 ||
      request.chunk_bytes() < 0) {
    return absl::InvalidArgumentError(
        "read offset, count and chunk_bytes must not be negative");
  }
  int64_t end = 0;
  if (__builtin_add_overflow(request.offset(), request.count(), &end)) {
    return absl::InvalidArgumentError("read offset + count overflows");
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::SummarizeTensorRequest& request,
                             const RequestLimits& limits) {
  if (absl::Status s = ValidateName(request.name(), "tensor name", limits);
      !s.ok()) {
    return s;
  }
  if (request.head() < 0 || request.head() > limits.max_summary_head) {
    return absl::InvalidArgumentError(
        absl::StrCat("head must be between 0 and ", limits.max_summary_head,
                     " elements (max_summary_head)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::OpRequest& request,
                             const RequestLimits& limits) {
  if (absl::Status s = OptionalName(request.group(), "group", limits);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = OptionalName(request.input(), "input tensor", limits);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = OptionalName(request.output(), "output tensor", limits);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Seq(request.seq(), limits); !s.ok()) return s;
  if (!v1::OpKind_IsValid(request.kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown op kind ", request.kind()));
  }
  if (!v1::ReduceOp_IsValid(request.reduce_op())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown reduce op ", request.reduce_op()));
  }
  if (request.generation() < 0) {
    return absl::InvalidArgumentError("generation is negative");
  }
  return Timeout(request.timeout_ms(), limits);
}

absl::Status ValidateRequest(const v1::BenchRequest& request,
                             const RequestLimits& limits) {
  if (absl::Status s = ValidateRequest(request.op(), limits); !s.ok()) {
    return s;
  }
  if (request.iters() < 1 || request.iters() > limits.max_bench_iters ||
      request.warmup_iters() < 0 ||
      request.warmup_iters() > limits.max_bench_iters) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench needs 1..", limits.max_bench_iters, " iters and 0..",
        limits.max_bench_iters, " warmup (max_bench_iters)"));
  }
  if (request.graph_launches() < 0 ||
      request.graph_launches() > limits.max_graph_launches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bench graph launches must be 0..", limits.max_graph_launches,
        " (max_graph_launches), got ", request.graph_launches()));
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::WaitRequest& request,
                             const RequestLimits& limits) {
  return Timeout(request.timeout_ms(), limits);
}

absl::Status ValidateRequest(const v1::TestRequest&, const RequestLimits&) {
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::CreateGroupRequest& request,
                             const RequestLimits& limits) {
  if (absl::Status s = ValidateName(request.name(), "group", limits); !s.ok()) {
    return s;
  }
  if (request.ranks_size() > limits.max_group_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("group lists ", request.ranks_size(),
                     " ranks; the limit is ", limits.max_group_ranks));
  }
  if (absl::Status s = Seq(request.seq(), limits); !s.ok()) return s;
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::DestroyGroupRequest& request,
                             const RequestLimits& limits) {
  return ValidateName(request.name(), "group", limits);
}

absl::Status ValidateRequest(const v1::PlanRequest& request,
                             const RequestLimits& limits) {
  if (absl::Status s = OptionalName(request.group(), "group", limits);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Seq(request.seq(), limits); !s.ok()) return s;
  if (request.generation() < 0) {
    return absl::InvalidArgumentError("generation is negative");
  }
  if (request.ops_size() < 1 || request.ops_size() > limits.max_plan_ops) {
    return absl::InvalidArgumentError(
        absl::StrCat("a plan has 1..", limits.max_plan_ops,
                     " ops (max_plan_ops), got ", request.ops_size()));
  }
  if (absl::Status s = Seq(request.seq() + request.ops_size() - 1, limits);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < request.ops_size(); ++i) {
    if (absl::Status s = ValidateRequest(request.ops(i), limits); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("op ", i, " of the plan: ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::ReleaseSequenceRequest& request,
                             const RequestLimits& limits) {
  if (absl::Status s = OptionalName(request.group(), "group", limits);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = Seq(request.begin(), limits); !s.ok()) return s;
  if (absl::Status s = Seq(request.end(), limits); !s.ok()) return s;
  if (request.end() < request.begin()) {
    return absl::InvalidArgumentError(
        absl::StrCat("release of seqs [", request.begin(), ", ", request.end(),
                     ") ends before it begins"));
  }
  if (request.generation() < 0) {
    return absl::InvalidArgumentError("generation is negative");
  }
  return absl::OkStatus();
}

absl::Status ValidateRequest(const v1::GetOpLogRequest& request,
                             const RequestLimits& limits) {
  if (absl::Status s = OptionalName(request.group(), "group", limits);
      !s.ok()) {
    return s;
  }
  if (request.limit() < 0 || request.limit() > limits.max_op_log_limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit must be between 0 and ", limits.max_op_log_limit,
                     " records (max_op_log_limit)"));
  }
  return absl::OkStatus();
}

}  // namespace ccl
