#include "server/check/bench_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/element.h"
#include "server/check/device_check.h"
#include "server/check/pattern.h"

namespace ccl::check {
namespace {

double Contribution(const BoundOp& op, int rank, int64_t index) {
  const double v = PatternValue(op.reduce_op, rank, index);
  if (op.reduce_op == ReduceOp::kPremulSum) {
    return RoundToDType(op.dtype, v * op.premul_scale);
  }
  return v;
}

double Reduced(const BoundOp& op, int world, int64_t index) {
  return ReferenceReduce(op.dtype, op.reduce_op, world,
                         [&](int r) { return Contribution(op, r, index); });
}

void FillPattern(const BoundOp& op, int rank, void* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    StoreElement(op.dtype, data, static_cast<size_t>(i),
                 PatternValue(op.reduce_op, rank, i));
  }
}

}  // namespace

double PatternValue(ReduceOp reduce_op, int rank, int64_t index) {
  if (reduce_op == ReduceOp::kProd) {
    // Products of 1s and 2s stay exact up to 2^world.
    return 1 + ((rank + index) % 2);
  }
  return (rank + 1) + (index % 3);
}

// Rank r's contribution to element `index` of a reduction, as the backend

// sees it (premul_sum scales before summing, in the dtype).

double Tolerance(DType dtype, double expected) {
  switch (dtype) {
    case DType::kFloat32:
      return 1e-5 * std::max(1.0, std::fabs(expected));
    case DType::kFloat64:
      return 1e-12 * std::max(1.0, std::fabs(expected));
    case DType::kFloat16:
    case DType::kBFloat16:
      return 1e-2 * std::max(1.0, std::fabs(expected));
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return 0.25 * std::max(1.0, std::fabs(expected));
    default:
      return 0;
  }
}

void PrepareCheck(const BoundOp& op, int rank, int world) {
  const size_t esize = DTypeSize(op.dtype);
  PrepareCheckWith(
      op, rank, world,
      [&](void* p, int64_t count) {
        std::memset(p, 0, static_cast<size_t>(count) * esize);
      },
      [&](void* p, int64_t count) { FillPattern(op, rank, p, count); });
}

CheckPlan PlanCheck(const BoundOp& op, int rank, int world) {
  const int64_t n = op.count;
  const bool root = rank == op.root;
  CheckPlan plan;
  plan.chunk = std::max<int64_t>(n, 1);
  switch (op.kind) {
    case OpKind::kAllReduce:
      plan.count = n;
      plan.reduced = true;
      break;
    case OpKind::kReduce:
      plan.count = root ? n : 0;
      plan.reduced = true;
      break;
    case OpKind::kBroadcast:
      plan.count = n;
      plan.src = op.root;
      break;
    case OpKind::kAllGather:
      plan.count = world * n;
      plan.chunked = true;
      break;
    case OpKind::kReduceScatter:
      plan.count = n;
      plan.reduced = true;
      plan.idx_base = rank * n;
      break;
    case OpKind::kGather:
      plan.count = root ? world * n : 0;
      plan.chunked = true;
      break;
    case OpKind::kScatter:
      plan.count = n;
      plan.src = op.root;
      plan.idx_base = rank * n;
      break;
    case OpKind::kAllToAll:
      plan.count = world * n;
      plan.chunked = true;
      plan.idx_base = rank * n;
      break;
    case OpKind::kRecv:
      plan.count = n;
      plan.src = op.peer;
      break;
    default:
      break;
  }
  return plan;
}

int64_t CountWrong(const BoundOp& op, int rank, int world) {
  const CheckPlan plan = PlanCheck(op, rank, world);
  int64_t wrong = 0;
  for (int64_t k = 0; k < plan.count; ++k) {
    double want;
    if (plan.reduced) {
      want = Reduced(op, world, plan.idx_base + k);
    } else {
      const int src =
          plan.chunked ? static_cast<int>(k / plan.chunk) : plan.src;
      const int64_t idx = plan.idx_base + (plan.chunked ? k % plan.chunk : k);
      want = PatternValue(op.reduce_op, src, idx);
    }
    want = RoundToDType(op.dtype, want);
    const double got = LoadElement(op.dtype, op.output, static_cast<size_t>(k));
    if (!(std::fabs(got - want) <= Tolerance(op.dtype, want))) ++wrong;
  }
  return wrong;
}

absl::StatusOr<int64_t> RunChecked(const BoundOp& op, int rank, int world,
                                   const std::vector<Buffer>& buffers,
                                   const std::function<absl::Status()>& run) {
  const bool on_device = std::any_of(
      buffers.begin(), buffers.end(),
      [](const Buffer& b) { return b.device.kind == DeviceKind::kCuda; });
  if (on_device) return RunCheckedOnDevice(op, rank, world, buffers, run);
  PrepareCheck(op, rank, world);
  if (absl::Status s = run(); !s.ok()) return s;
  return CountWrong(op, rank, world);
}

}  // namespace ccl::check
