// The pattern and the expected values behind bench_check, shared by its
// host and device paths.
#pragma once

#include <cstdint>

#include "common/types.h"
#include "server/comm/communicator.h"

namespace ccl::check {

double PatternValue(ReduceOp reduce_op, int rank, int64_t index);
double Tolerance(DType dtype, double expected);

// What output element k of this rank should hold: the reduction of element
// idx_base + k, rank k / chunk's pattern at idx_base + k % chunk (chunked),
// or rank src's at idx_base + k.
struct CheckPlan {
  int64_t count = 0;  // output elements to check; 0: nothing on this rank
  bool reduced = false;
  bool chunked = false;
  int src = 0;
  int64_t idx_base = 0;
  int64_t chunk = 1;
};
CheckPlan PlanCheck(const BoundOp& op, int rank, int world);

// Sets up the buffers for a checked run: outputs zeroed (no expected value
// is 0), then inputs patterned (in place, the input overrides). `zero(p, n)`
// and `fill(p, n)` do the work, on the host or on the device.
template <typename Zero, typename FillFn>
void PrepareCheckWith(const BoundOp& op, int rank, int world, Zero zero,
                      FillFn fill) {
  const int64_t n = op.count;
  const int64_t w = world;
  auto zero_if = [&](void* p, int64_t count) {
    if (p != nullptr && count > 0) zero(p, count);
  };
  void* in = const_cast<void*>(op.input);
  const bool root = rank == op.root;
  switch (op.kind) {
    case OpKind::kAllReduce:
      zero_if(op.output, n);
      fill(in, n);
      break;
    case OpKind::kReduce:
      if (root) zero_if(op.output, n);
      fill(in, n);
      break;
    case OpKind::kBroadcast:
      if (!root || op.input != op.output) zero_if(op.output, n);
      if (root) fill(in, n);
      break;
    case OpKind::kAllGather:
      zero_if(op.output, w * n);
      fill(in, n);
      break;
    case OpKind::kReduceScatter:
      zero_if(op.output, n);
      fill(in, w * n);
      break;
    case OpKind::kGather:
      if (root) zero_if(op.output, w * n);
      fill(in, n);
      break;
    case OpKind::kScatter:
      zero_if(op.output, n);
      if (root) fill(in, w * n);
      break;
    case OpKind::kAllToAll:
      zero_if(op.output, w * n);
      fill(in, w * n);
      break;
    case OpKind::kSend:
      fill(in, n);
      break;
    case OpKind::kRecv:
      zero_if(op.output, n);
      break;
    case OpKind::kBarrier:
    case OpKind::kNop:
      break;
  }
}

// The host versions over host pointers.
void PrepareCheck(const BoundOp& op, int rank, int world);
int64_t CountWrong(const BoundOp& op, int rank, int world);

}  // namespace ccl::check
