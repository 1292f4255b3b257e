#include "server/core/resolve.h"

#include <cstddef>
#include <memory>
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

// Binds an op's tensors (by name in `store`) to its BoundOp's buffers and
// count, one method per shape of op, checking the tensors against each
// other and the group. Error wording is built only on an error: this runs
// for every op of a plan, and a description per op was a visible share of
// a plan's cost.
class Binder {
 public:
  Binder(const OpSpec& spec, const Communicator& comm, TensorStore& store,
         BoundOp& op)
      : spec_(spec),
        store_(store),
        op_(op),
        rank_(comm.rank()),
        world_(comm.size()),
        in_place_(spec.output.empty() || spec.output == spec.input),
        root_(comm.rank() == spec.root) {}

  absl::Status Bind() {
    switch (spec_.kind) {
      case OpKind::kAllReduce:
      case OpKind::kBroadcast:
      case OpKind::kReduce:
      case OpKind::kAllToAll:
        return BindSameShape();
      case OpKind::kAllGather:
      case OpKind::kGather:
        return BindGathered();
      case OpKind::kReduceScatter:
      case OpKind::kScatter:
        return BindScattered();
      case OpKind::kSend: {
        CCL_ASSIGN_OR_RETURN(in_, Lookup(spec_.input, "an input"));
        op_.count = in_->numel();
        op_.input = in_->data();
        return absl::OkStatus();
      }
      case OpKind::kRecv: {
        const std::string& target =
            spec_.output.empty() ? spec_.input : spec_.output;
        CCL_ASSIGN_OR_RETURN(out_, Lookup(target, "a destination"));
        op_.count = out_->numel();
        op_.output = out_->data();
        return absl::OkStatus();
      }
      default:
        return absl::OkStatus();
    }
  }

  absl::Status Fail(const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeOp(spec_), ": ", message));
  }
  const std::shared_ptr<Tensor>& in() const { return in_; }
  const std::shared_ptr<Tensor>& out() const { return out_; }

 private:
  // all_reduce, broadcast, reduce, all_to_all: output as large as input.
  absl::Status BindSameShape() {
    CCL_ASSIGN_OR_RETURN(in_, Lookup(spec_.input, "an input"));
    out_ = in_;
    if (!in_place_) {
      CCL_ASSIGN_OR_RETURN(out_, Lookup(spec_.output, "an output"));
      CCL_RETURN_IF_ERROR(SameDType(*in_, *out_));
      if (out_->numel() != in_->numel()) {
        return Fail(absl::StrCat("input '", in_->name(), "' has ", in_->numel(),
                                 " elements but output '", out_->name(),
                                 "' has ", out_->numel()));
      }
    }
    op_.count = in_->numel();
    if (spec_.kind == OpKind::kAllToAll) {
      CCL_RETURN_IF_ERROR(Divisible(*in_));
      op_.count = in_->numel() / world_;
    }
    op_.input = in_->data();
    op_.output = out_->data();
    return absl::OkStatus();
  }

  // all_gather, gather: output world times the input; in place, the input
  // is this rank's chunk of the tensor.
  absl::Status BindGathered() {
    const bool gather = spec_.kind == OpKind::kGather;
    CCL_ASSIGN_OR_RETURN(in_, Lookup(spec_.input, "an input"));
    if (in_place_) {
      CCL_RETURN_IF_ERROR(Divisible(*in_));
      op_.count = in_->numel() / world_;
      op_.input = At(*in_, rank_ * op_.count);
      op_.output = (!gather || root_) ? in_->data() : nullptr;
      return absl::OkStatus();
    }
    op_.count = in_->numel();
    op_.input = in_->data();
    if (gather && !root_) {
      out_ = Optional(spec_.output);
    } else {
      CCL_ASSIGN_OR_RETURN(out_, Lookup(spec_.output, "an output"));
    }
    if (out_) {
      CCL_RETURN_IF_ERROR(SameDType(*in_, *out_));
      if (out_->numel() != world_ * in_->numel()) {
        return Fail(absl::StrCat(
            "output '", out_->name(), "' has ", out_->numel(),
            " elements but needs world size ", world_, " x input '",
            in_->name(), "' (", in_->numel(), ") = ", world_ * in_->numel()));
      }
      if (!gather || root_) op_.output = out_->data();
    }
    return absl::OkStatus();
  }

  // reduce_scatter, scatter: input world times the output; in place, the
  // output is this rank's chunk of the tensor.
  absl::Status BindScattered() {
    const bool scatter = spec_.kind == OpKind::kScatter;
    if (in_place_) {
      CCL_ASSIGN_OR_RETURN(in_, Lookup(spec_.input, "an input"));
      CCL_RETURN_IF_ERROR(Divisible(*in_));
      op_.count = in_->numel() / world_;
      op_.input = (!scatter || root_) ? in_->data() : nullptr;
      op_.output = At(*in_, rank_ * op_.count);
      return absl::OkStatus();
    }
    CCL_ASSIGN_OR_RETURN(out_, Lookup(spec_.output, "an output"));
    op_.count = out_->numel();
    op_.output = out_->data();
    if (scatter && !root_) {
      in_ = Optional(spec_.input);
    } else {
      CCL_ASSIGN_OR_RETURN(in_, Lookup(spec_.input, "an input"));
    }
    if (in_) {
      CCL_RETURN_IF_ERROR(SameDType(*in_, *out_));
      if (in_->numel() != world_ * out_->numel()) {
        return Fail(absl::StrCat("input '", in_->name(), "' has ", in_->numel(),
                                 " elements but needs world size ", world_,
                                 " x output '", out_->name(), "' (",
                                 out_->numel(),
                                 ") = ", world_ * out_->numel()));
      }
      if (!scatter || root_) op_.input = in_->data();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Tensor>> Lookup(const std::string& name,
                                                 const char* role) const {
    if (name.empty()) {
      return Fail(absl::StrCat(std::string(OpKindName(spec_.kind)), " needs ",
                               role, " tensor"));
    }
    auto tensor = store_.Lookup(name);
    if (!tensor.ok()) {
      return absl::NotFoundError(
          absl::StrCat(DescribeOp(spec_), ": no tensor named '", name, "' (",
                       role, ") on rank ", rank_));
    }
    return tensor;
  }
  // A tensor a rank does not use may be left out (gather's output and
  // scatter's input off the root).
  std::shared_ptr<Tensor> Optional(const std::string& name) const {
    if (name.empty()) return nullptr;
    auto tensor = store_.Lookup(name);
    return tensor.ok() ? *tensor : nullptr;
  }
  absl::Status SameDType(const Tensor& a, const Tensor& b) const {
    if (a.dtype() == b.dtype()) return absl::OkStatus();
    return Fail(absl::StrCat(
        "input '", a.name(), "' is ", std::string(DTypeName(a.dtype())),
        " but output '", b.name(), "' is ", std::string(DTypeName(b.dtype()))));
  }
  absl::Status Divisible(const Tensor& t) const {
    if (t.numel() % world_ == 0) return absl::OkStatus();
    return Fail(absl::StrCat("tensor '", t.name(), "' has ", t.numel(),
                             " elements, not a multiple of the world size ",
                             world_));
  }
  static std::byte* At(const Tensor& t, int64_t elements) {
    return t.data() + elements * static_cast<int64_t>(DTypeSize(t.dtype()));
  }

  const OpSpec& spec_;
  TensorStore& store_;
  BoundOp& op_;
  const int rank_;
  const int world_;
  const bool in_place_;
  const bool root_;
  std::shared_ptr<Tensor> in_;
  std::shared_ptr<Tensor> out_;
};

}  // namespace

absl::StatusOr<Resolved> Resolve(const OpSpec& spec, const Communicator& comm,
                                 TensorStore& store,
                                 std::chrono::milliseconds default_timeout) {
  Resolved out;
  CCL_ASSIGN_OR_RETURN(out.op, RequestHeader(spec, comm, default_timeout));
  BoundOp& op = out.op;
  if (spec.kind == OpKind::kBarrier || spec.kind == OpKind::kNop) return out;
  Binder binder(spec, comm, store, op);
  CCL_RETURN_IF_ERROR(binder.Bind());
  const std::shared_ptr<Tensor>& in = binder.in();
  const std::shared_ptr<Tensor>& outp = binder.out();
  const Tensor& typed = in ? *in : *outp;
  op.dtype = typed.dtype();
  if (IsReduction(op.kind) && op.reduce_op == ReduceOp::kPremulSum &&
      !TakesPremulScale(op.dtype)) {
    // NCCL casts the scale to the tensor's type first (0.5 becomes 0 in
    // int32), which no backend should silently do; torch.distributed
    // refuses these types too.
    return binder.Fail(absl::StrCat(
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
