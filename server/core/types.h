// The worker's plain types, at the bottom of the core: a tensor's summary,
// what an op asks for, and what the flight recorder keeps (what a tensor is
// and how it is filled are common/types.h's, shared with the client). No
// logic; everything in server/core may include this.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/types.h"

namespace ccl {

struct TensorSummary {
  TensorMeta meta;
  double sum = 0;
  double min = 0;
  double max = 0;
  uint64_t checksum = 0;  // FNV-1a 64 of the raw bytes
  std::vector<double> head;
  int64_t nan_count = 0;
};

struct OpTiming {
  int64_t enqueued_unix_us = 0;
  double queue_us = 0;
  double device_us = 0;
  double total_us = 0;
};

inline constexpr char kWorldGroup[] = "world";

struct OpSpec {
  std::string group = kWorldGroup;
  int64_t seq = 0;
  OpKind kind = OpKind::kBarrier;
  std::string input;
  std::string output;  // empty or == input: in place
  ReduceOp reduce_op = ReduceOp::kSum;
  double premul_scale = 1.0;
  int root = 0;
  int peer = 0;
  std::chrono::milliseconds timeout{0};  // 0: the worker's default
  int64_t generation = 0;                // 0: current
  // Compare the op across ranks before it runs (see BoundOp::agreement).
  bool agree = true;
  // Kept in the async table for Wait/Test by id (WorkerCore::FindWork).
  bool async = false;
};

// The op states are common/types.h's (kUnknown is never set here).
using ::ccl::WorkState;

struct BenchResult {
  // nccl-tests' time: wall time of the timed loop / iterations.
  double time_us = 0;
  // Over the instances' own times (device time on NCCL, host time inside
  // the op on Gloo): min <= avg <= max by construction.
  double avg_us = 0;
  double min_us = 0;
  double max_us = 0;
  int64_t wrong = 0;
};

// One entry of a group's flight recorder.
struct OpRecord {
  OpSpec spec;
  DType dtype = DType::kFloat32;
  int64_t count = 0;  // elements per rank as the backend moves them
  WorkState state = WorkState::kQueued;
  // The op's error, or why it was refused before it was queued.
  absl::Status status;
  OpTiming timing;
  int64_t work_id = 0;  // 0 for a refused op
};

struct GroupInfo {
  std::string name;
  // World ranks of the members, in group-rank order.
  std::vector<int> ranks;
  // -1 on a rank that is not a member (it still knows the group, so that
  // every rank agrees on which names are taken).
  int group_rank = 0;
  int64_t next_seq = 0;
  // Every op below this seq has ended (Executor::finished_below).
  int64_t finished_below = 0;
  std::string backend;
  std::string state;
};

}  // namespace ccl
