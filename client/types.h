// The vocabulary of the client library: plain C++ values for what the
// coordinator and the workers say (the world, tensors, ops, their results,
// flight-recorder logs, benches, plans). No protobuf or gRPC type appears
// here or in cluster_client.h; the library converts at its edge.
//
// Ranks are world ranks everywhere in this API (torch.distributed's global
// ranks), also for ops of a subgroup: the library translates roots and peers
// to group ranks on the wire.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/membership_types.h"
#include "common/types.h"

namespace ccl::client {

// One rank's answer to a request sent to several ranks.
template <typename T>
struct RankResult {
  int rank = 0;
  absl::StatusOr<T> result;
};
template <typename T>
using RankResults = std::vector<RankResult<T>>;

// ---------------------------------------------------------------------------
// The world, as the coordinator knows it

// The states are common/types.h's, shared with the services.
using ::ccl::MemberState;
using ::ccl::MemberStateName;
using ::ccl::WorkState;
using ::ccl::WorkStateName;
using ::ccl::WorldState;
using ::ccl::WorldStateName;

// A member of the world, as the coordinator describes it.
using Member = ::ccl::MemberInfo;

// The world, as the coordinator describes it.
using World = ::ccl::WorldInfo;

// ---------------------------------------------------------------------------
// What a worker says about itself

struct GroupInfo {
  std::string name;
  std::vector<int> ranks;  // world ranks of the members, in group-rank order
  int group_rank = -1;     // the answering worker's rank in it; -1: not in it
  int64_t next_seq = 0;    // the next seq the group's executor will run
  std::string backend;
  std::string state;
};

struct WorkerInfo {
  int rank = 0;
  int world_size = 0;
  int64_t generation = 0;
  Device device;
  std::string address;
  std::string backend;
  std::string worker_id;
  int64_t tensor_count = 0;
  int64_t tensor_bytes = 0;
  int64_t tensor_quota_bytes = 0;
  std::vector<GroupInfo> groups;
  std::string version;
  std::string state;  // "ready" once its communicators are up
};

// ---------------------------------------------------------------------------
// Tensors

struct TensorSpec {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  // Unset: the worker's own device (known from the world, no extra call).
  std::optional<Device> device;
};

// Fills and tensor metadata are the service's own (common/types.h).
using ::ccl::Fill;
using ::ccl::FillKind;
using TensorInfo = ::ccl::TensorMeta;

struct TensorList {
  std::vector<TensorInfo> tensors;
  int64_t bytes_in_use = 0;
  int64_t quota_bytes = 0;
};

struct TensorSummary {
  TensorInfo info;
  double sum = 0;
  double min = 0;
  double max = 0;
  std::string checksum;  // FNV-1a 64 of the raw bytes, hex
  std::vector<double> head;
  int64_t nan_count = 0;
};

// One tensor of a batch allocated on several ranks at once.
struct TensorAlloc {
  int rank = 0;
  TensorSpec spec;
  Fill fill;
};

// Bytes written into a tensor of one rank, from `offset_bytes` on.
struct TensorWrite {
  int rank = 0;
  std::string name;
  int64_t offset_bytes = 0;
  std::string bytes;
};

// ---------------------------------------------------------------------------
// Ops

struct Op {
  OpKind kind = OpKind::kAllReduce;
  // Tensor names. An empty `output`, or one equal to `input`, runs in place;
  // send reads `input`, recv writes `input` (or `output` when given).
  std::string input;
  std::string output;
  ReduceOp reduce = ReduceOp::kSum;
  double premul_scale = 1.0;  // premul_sum's factor
  int root = 0;               // rooted collectives: a world rank
  int peer = 0;               // send: destination, recv: source (world rank)
  // Zero: the client's timeout.
  std::chrono::milliseconds timeout{0};
  // Reply at once with a work id (see Wait and Test).
  bool async = false;
  // Run without the cross-rank check of the op's shape (saves one small
  // exchange; a mismatch then hangs or corrupts instead of failing).
  bool skip_agreement = false;
};

// Timing of one op as a worker saw it.
struct OpTiming {
  int64_t enqueued_unix_us = 0;  // when the worker accepted it
  double queue_us = 0;           // waiting for earlier ops of the group
  double device_us = 0;          // the data movement itself
  double total_us = 0;           // acceptance to completion
};

// A worker's answer to one op: for an async op, the work id to wait on.
struct OpResult {
  int64_t generation = 0;
  std::string group;
  int64_t seq = 0;
  int64_t work_id = 0;
  // The worker process that issued work_id (ids count from 1 in each).
  std::string worker_id;
  WorkState state = WorkState::kUnknown;
  OpTiming timing;
};

struct WorkStatus {
  int64_t work_id = 0;
  WorkState state = WorkState::kUnknown;
  std::optional<OpKind> kind;
  std::string group;
  int64_t seq = 0;
  absl::Status error;  // of a failed op
  OpTiming timing;
};

// An async op's work on one rank.
struct WorkRef {
  int rank = 0;
  int64_t work_id = 0;
  // OpResult::worker_id: a restarted worker then answers NOT_FOUND rather
  // than take the id for a work of its own. Empty: not checked.
  std::string worker_id;
};

// ---------------------------------------------------------------------------
// Benches

struct BenchSpec {
  Op op;
  int warmup_iters = 5;
  int iters = 20;
  // Refill the op's tensors with a known pattern and count wrong elements of
  // one extra instance.
  bool check = false;
  // nccl-tests' -G: capture the timed loop in a CUDA graph and launch it
  // this many times (0: no graph). NCCL only.
  int graph_launches = 0;
};

struct BenchResult {
  // nccl-tests' time per op: the timed loop's wall time over the instances
  // (with a CUDA graph, its launches' device time over the instances); 0
  // from a worker that predates it.
  double time_us = 0;
  double avg_us = 0;  // over the instances' own times: min <= avg <= max
  double min_us = 0;
  double max_us = 0;
  int64_t wrong = 0;
  OpTiming timing;
};

// ---------------------------------------------------------------------------
// Plans: consecutive ops of one group in one request per rank

// One op of a plan, at its own seq.
struct PlanStep {
  // A collective: every rank of the group runs `op`.
  static PlanStep Collective(Op op) { return PlanStep{std::move(op), {}}; }
  // Point to point: the world ranks in `ops` run theirs; the group's other
  // ranks take the step's seq with a no-op.
  static PlanStep PointToPoint(std::map<int, Op> ops) {
    return PlanStep{Op{}, std::move(ops)};
  }

  Op op;
  std::optional<std::map<int, Op>> point_to_point;
};

struct Plan {
  std::vector<PlanStep> steps;
  // NCCL: issue the ops in one ncclGroupStart/End (they must not depend on
  // each other's results).
  bool aggregate = false;
};

// One rank's results of a plan: one status per step, in order. After the
// first failure the later steps did not run (FAILED_PRECONDITION).
struct PlanResult {
  int64_t generation = 0;
  std::string group;
  int64_t first_seq = 0;
  std::vector<WorkStatus> steps;
  // The worker has no SubmitPlan: the library ran the steps one request
  // each, at the same seqs (same results, without the plan's speed).
  bool emulated = false;
};

// ---------------------------------------------------------------------------
// The flight recorder

struct OpRecord {
  // Seqs start again at 0 in each generation: (generation, group, seq) names
  // one op.
  int64_t generation = 0;
  int64_t seq = 0;
  std::optional<OpKind> kind;
  std::optional<DType> dtype;
  int64_t count = 0;  // elements per rank as the backend moves them
  int root = 0;       // group ranks
  int peer = 0;
  std::optional<ReduceOp> reduce;
  std::string input;
  std::string output;
  WorkState state = WorkState::kUnknown;
  OpTiming timing;
  absl::Status error;  // failed, or refused before it was queued
  int64_t work_id = 0;
};

struct OpLog {
  int rank = 0;  // world rank of the worker that answered
  std::string group;
  int64_t next_seq = 0;
  std::vector<OpRecord> records;  // newest last
  int64_t now_unix_us = 0;        // the worker's clock when it answered
};

// The names ccctl and experiments accept: "zeros", "rank+1", "empty", ...
std::string FillKindName(FillKind kind);
std::optional<FillKind> FillKindByName(std::string_view name);

}  // namespace ccl::client
