#include "server/core/resolve.h"

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/core/work.h"

namespace ccl {

namespace {

// What the request itself says, checked against the group alone (its seq,
// kind, root, peer and timeout), as the op's BoundOp without buffers.
absl::StatusOr<BoundOp> RequestHeader(
    const OpSpec& spec, const Communicator& comm,
    std::chrono::milliseconds default_timeout) {
  const int rank = comm.rank();
  const int world = comm.size();
  auto fail = [&](const std::string& message) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeOp(spec), ": ", message));
  };
  if (spec.seq < 0) return fail("seq must be >= 0");
  switch (spec.kind) {
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
    case OpKind::kReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kGather:
    case OpKind::kScatter:
    case OpKind::kAllToAll:
    case OpKind::kBarrier:
    case OpKind::kSend:
    case OpKind::kRecv:
    case OpKind::kNop:
      break;
    default:
      return fail("unknown op kind");
  }
  // Root and peer are ranks of the op's group. Worded only on an error:
  // this runs for every op of a plan.
  auto of_group = [&] {
    return spec.group == kWorldGroup
               ? absl::StrCat("a world of size ", world)
               : absl::StrCat("group '", spec.group, "' of size ", world,
                              " (group ranks)");
  };
  if (HasRoot(spec.kind) && (spec.root < 0 || spec.root >= world)) {
    return fail(
        absl::StrCat("root ", spec.root, " is not a rank of ", of_group()));
  }
  if (spec.kind == OpKind::kSend || spec.kind == OpKind::kRecv) {
    if (spec.peer < 0 || spec.peer >= world) {
      return fail(
          absl::StrCat("peer ", spec.peer, " is not a rank of ", of_group()));
    }
    if (spec.peer == rank) {
      return fail(absl::StrCat("peer ", spec.peer,
                               " is this rank; send/recv need another rank"));
    }
  }
  if (spec.timeout.count() < 0) return fail("timeout must be >= 0");
  BoundOp op;
  op.kind = spec.kind;
  op.root = spec.root;
  op.peer = spec.peer;
  op.reduce_op = spec.reduce_op;
  op.premul_scale = spec.premul_scale;
  op.seq = spec.seq;
  op.timeout = spec.timeout.count() > 0 ? spec.timeout : default_timeout;
  op.agreement = spec.agree ? Agreement::kCheck : Agreement::kSkip;
  return op;
}

}  // namespace

absl::StatusOr<Resolved> Resolve(const OpSpec& spec, const Communicator& comm,
                                 TensorStore& store,
                                 std::chrono::milliseconds default_timeout) {
  const int rank = comm.rank();
  const int world = comm.size();
  // Error wording is built only on an error: this runs for every op of a
  // plan, and a description per op was a visible share of a plan's cost.
  const std::string_view op_name = OpKindName(spec.kind);
  auto fail = [&](const std::string& message) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeOp(spec), ": ", message));
  };
  Resolved out;
  CCL_ASSIGN_OR_RETURN(out.op, RequestHeader(spec, comm, default_timeout));
  BoundOp& op = out.op;
  if (spec.kind == OpKind::kBarrier || spec.kind == OpKind::kNop) return out;

  auto lookup =
      [&](const std::string& name,
          const char* role) -> absl::StatusOr<std::shared_ptr<Tensor>> {
    if (name.empty()) {
      return fail(
          absl::StrCat(std::string(op_name), " needs ", role, " tensor"));
    }
    auto tensor = store.Lookup(name);
    if (!tensor.ok()) {
      return absl::NotFoundError(absl::StrCat(DescribeOp(spec),
                                              ": no tensor named '", name,
                                              "' (", role, ") on rank ", rank));
    }
    return tensor;
  };
  // A tensor a rank does not use may be left out (gather's output and
  // scatter's input off the root).
  auto optional = [&](const std::string& name) -> std::shared_ptr<Tensor> {
    if (name.empty()) return nullptr;
    auto tensor = store.Lookup(name);
    return tensor.ok() ? *tensor : nullptr;
  };
  auto same_dtype = [&](const Tensor& a, const Tensor& b) -> absl::Status {
    if (a.dtype() == b.dtype()) return absl::OkStatus();
    return fail(absl::StrCat(
        "input '", a.name(), "' is ", std::string(DTypeName(a.dtype())),
        " but output '", b.name(), "' is ", std::string(DTypeName(b.dtype()))));
  };
  auto divisible = [&](const Tensor& t) -> absl::Status {
    if (t.numel() % world == 0) return absl::OkStatus();
    return fail(absl::StrCat("tensor '", t.name(), "' has ", t.numel(),
                             " elements, not a multiple of the world size ",
                             world));
  };
  auto at = [](const Tensor& t, int64_t elements) {
    return t.data() + elements * static_cast<int64_t>(DTypeSize(t.dtype()));
  };

  const bool in_place = spec.output.empty() || spec.output == spec.input;
  const bool root = rank == spec.root;
  std::shared_ptr<Tensor> in;
  std::shared_ptr<Tensor> outp;

  switch (spec.kind) {
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
    case OpKind::kReduce:
    case OpKind::kAllToAll: {
      CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
      outp = in;
      if (!in_place) {
        CCL_ASSIGN_OR_RETURN(outp, lookup(spec.output, "an output"));
        CCL_RETURN_IF_ERROR(same_dtype(*in, *outp));
        if (outp->numel() != in->numel()) {
          return fail(absl::StrCat("input '", in->name(), "' has ", in->numel(),
                                   " elements but output '", outp->name(),
                                   "' has ", outp->numel()));
        }
      }
      op.count = in->numel();
      if (spec.kind == OpKind::kAllToAll) {
        CCL_RETURN_IF_ERROR(divisible(*in));
        op.count = in->numel() / world;
      }
      op.input = in->data();
      op.output = outp->data();
      break;
    }
    case OpKind::kAllGather:
    case OpKind::kGather: {
      const bool gather = spec.kind == OpKind::kGather;
      CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
      if (in_place) {
        CCL_RETURN_IF_ERROR(divisible(*in));
        op.count = in->numel() / world;
        op.input = at(*in, rank * op.count);
        op.output = (!gather || root) ? in->data() : nullptr;
        break;
      }
      op.count = in->numel();
      op.input = in->data();
      if (gather && !root) {
        outp = optional(spec.output);
      } else {
        CCL_ASSIGN_OR_RETURN(outp, lookup(spec.output, "an output"));
      }
      if (outp) {
        CCL_RETURN_IF_ERROR(same_dtype(*in, *outp));
        if (outp->numel() != world * in->numel()) {
          return fail(absl::StrCat(
              "output '", outp->name(), "' has ", outp->numel(),
              " elements but needs world size ", world, " x input '",
              in->name(), "' (", in->numel(), ") = ", world * in->numel()));
        }
        if (!gather || root) op.output = outp->data();
      }
      break;
    }
    case OpKind::kReduceScatter:
    case OpKind::kScatter: {
      const bool scatter = spec.kind == OpKind::kScatter;
      if (in_place) {
        CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
        CCL_RETURN_IF_ERROR(divisible(*in));
        op.count = in->numel() / world;
        op.input = (!scatter || root) ? in->data() : nullptr;
        op.output = at(*in, rank * op.count);
        break;
      }
      CCL_ASSIGN_OR_RETURN(outp, lookup(spec.output, "an output"));
      op.count = outp->numel();
      op.output = outp->data();
      if (scatter && !root) {
        in = optional(spec.input);
      } else {
        CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
      }
      if (in) {
        CCL_RETURN_IF_ERROR(same_dtype(*in, *outp));
        if (in->numel() != world * outp->numel()) {
          return fail(absl::StrCat("input '", in->name(), "' has ", in->numel(),
                                   " elements but needs world size ", world,
                                   " x output '", outp->name(), "' (",
                                   outp->numel(),
                                   ") = ", world * outp->numel()));
        }
        if (!scatter || root) op.input = in->data();
      }
      break;
    }
    case OpKind::kSend: {
      CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
      op.count = in->numel();
      op.input = in->data();
      break;
    }
    case OpKind::kRecv: {
      const std::string& target =
          spec.output.empty() ? spec.input : spec.output;
      CCL_ASSIGN_OR_RETURN(outp, lookup(target, "a destination"));
      op.count = outp->numel();
      op.output = outp->data();
      break;
    }
    default:
      break;
  }
  const Tensor& typed = in ? *in : *outp;
  op.dtype = typed.dtype();
  if (IsReduction(op.kind) && op.reduce_op == ReduceOp::kPremulSum &&
      !TakesPremulScale(op.dtype)) {
    // NCCL casts the scale to the tensor's type first (0.5 becomes 0 in
    // int32), which no backend should silently do; torch.distributed
    // refuses these types too.
    return fail(absl::StrCat(
        "premul_sum scales in floating point and takes floating-point "
        "tensors (float16, bfloat16, float32, float64, fp8_e4m3, fp8_e5m2), "
        "not ",
        std::string(DTypeName(op.dtype)), "; use one of those, or sum"));
  }
  CCL_RETURN_IF_ERROR(comm.Supports(op.kind, op.dtype, op.reduce_op));
  if (in) out.tensors.push_back(in);
  if (outp && outp != in) out.tensors.push_back(outp);
  return out;
}

std::optional<std::vector<BoundOp>> RefusalStandIns(
    const std::vector<OpSpec>& specs, const Communicator& comm,
    std::chrono::milliseconds default_timeout) {
  std::vector<BoundOp> stand_ins;
  for (const OpSpec& spec : specs) {
    absl::StatusOr<BoundOp> op = RequestHeader(spec, comm, default_timeout);
    if (!op.ok()) return std::nullopt;
    // As the agreement sees the ops of the ranks that accepted them: a nop
    // and an op without the check exchange nothing.
    if (spec.kind == OpKind::kNop || op->agreement != Agreement::kCheck) {
      continue;
    }
    op->refused = true;
    stand_ins.push_back(*op);
  }
  return stand_ins;
}

}  // namespace ccl
