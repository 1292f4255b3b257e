// The worker's logic, free of gRPC: a tensor store, the communicators this
// worker is part of, one ordered executor per communicator, and the table
// of async work. The gRPC adapter (worker_service) converts protos to these
// types and back; unit tests call this directly.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/types.h"
#include "server/comm/kv_store.h"
#include "server/core/bench_work.h"
#include "server/core/plan_work.h"
#include "server/core/types.h"
#include "server/core/work.h"

namespace ccl {

// This generation is `from_generation` without `excluded_ranks` (ranks of
// that generation); from_generation 0: not a shrink.
struct ShrinkInfo {
  int64_t from_generation = 0;
  std::vector<int> excluded_ranks;
};

// Who the caller of a rank-dependent request took this worker to be: the
// generation of the caller's view of the world (0: it had none) and the rank
// it addressed in it (-1: whichever this worker has).
struct RankView {
  int64_t generation = 0;
  int rank = -1;
};

struct PlanSpec {
  std::string group = kWorldGroup;
  int64_t seq = 0;
  int64_t generation = 0;  // 0: current
  // Their group, seq, generation and async are ignored (the plan's count).
  std::vector<OpSpec> ops;
  // One NCCL group for every op (see BatchOptions::aggregate).
  bool aggregate = false;
};

// Group names follow the tensor-name rules; "world" is taken.
absl::Status ValidateGroupName(const std::string& name);
// INVALID_ARGUMENT unless `ranks` is non-empty, distinct and in
// [0, world_size).
absl::Status ValidateGroupRanks(const std::vector<int>& ranks, int world_size);

struct WorkerConfig {
  Device device;
  int64_t tensor_quota_bytes = 0;  // 0: no quota beyond what the host has
  std::chrono::milliseconds default_op_timeout{std::chrono::seconds(60)};
  // How long an executor waits for a missing sequence number.
  std::chrono::milliseconds seq_gap_timeout{std::chrono::seconds(30)};
  // How long the op path's threads spin for the next request, op or
  // completion before they sleep (common/busy_poll.h); zero never spins.
  std::chrono::microseconds busy_poll{0};
  // Address Gloo's TCP transport binds to.
  std::string data_host = "127.0.0.1";
  // Most tensors held and groups known at once (0: no limit): a client
  // cannot grow the worker without bound. RESOURCE_EXHAUSTED beyond.
  int64_t max_tensors = 0;
  int64_t max_groups = 0;
  // Called with the records of submitted ops as they complete, fail or are
  // refused, on the thread that finishes them (metrics and op logs); must
  // not block. Every op is passed once: a lone op alone, a plan's ops in
  // order and in batches, so that the hook can account for a run of like
  // ops at once.
  std::function<void(std::span<const OpRecord>)> on_ops_done;
  // Called once per communicator of `generation` that an op finds broken,
  // before that op is answered (Executor::BreakListener): the membership
  // side tells the coordinator at once that the generation takes no more
  // ops. On an executor thread; may block briefly, bounded.
  std::function<void(int64_t generation, const absl::Status& cause)>
      on_communicator_broken;
  // Asked when a missing seq of a group has held up later ops for
  // Executor::kGapWatchAfter (Executor::GapWatch): the membership side asks
  // the coordinator whether the client that reserved it is gone, and calls
  // `skip` with the dead client's range if so. Returns what ends the
  // question. Must not block.
  std::function<std::function<void()>(
      int64_t generation, const std::string& group, int64_t seq,
      std::function<void(int64_t begin, int64_t end, absl::Status reason)>
          skip)>
      on_sequence_gap;
};

class WorkerCore {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerCore>> Create(
      WorkerConfig config);
  virtual ~WorkerCore() = default;

  // Builds the world communicator of a generation through `store`
  // (keys are prefixed with the generation). Blocks; call from a thread
  // that may block (the worker's main thread), not a gRPC thread. `store`
  // must outlive the generation (subgroups rendezvous through it too); a
  // new generation drops the subgroups of the old one.
  // `shrink`, when set, says this generation is the worker's current one
  // without some of its ranks (--elastic shrink); the world communicator is
  // then shrunk where the backend can (ncclCommShrink), which is faster
  // than a new rendezvous.
  virtual absl::Status FormWorld(int rank, int world_size, int64_t generation,
                                 KvStore& store,
                                 const ShrinkInfo& shrink = ShrinkInfo()) = 0;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int64_t generation() const = 0;
  // The newest generation this worker joined or began to form (FormWorld),
  // whether or not that succeeded.
  virtual int64_t known_generation() const = 0;
  virtual std::string backend() const = 0;
  virtual const WorkerConfig& config() const = 0;

  // Tensors. Alloc fills with the rank this worker has now; a caller that
  // may come before the world has formed uses AllocAsync.
  virtual absl::StatusOr<TensorMeta> Alloc(const TensorMeta& spec,
                                           const Fill& fill) = 0;
  virtual absl::StatusOr<int64_t> Free(const std::string& name) = 0;
  virtual std::vector<TensorMeta> List() const = 0;
  virtual int64_t BytesInUse() const = 0;
  virtual absl::StatusOr<TensorMeta> Write(const std::string& name,
                                           int64_t offset_bytes,
                                           std::span<const std::byte> data) = 0;
  // Calls `sink` with consecutive chunks of the element range
  // [offset, offset + count) (count 0: to the end); stops early when `sink`
  // returns false.
  virtual absl::Status Read(
      const std::string& name, int64_t offset, int64_t count,
      int64_t chunk_bytes,
      const std::function<bool(int64_t offset_bytes,
                               std::span<const std::byte> chunk)>& sink) = 0;
  virtual absl::StatusOr<TensorSummary> Summarize(const std::string& name,
                                                  int64_t head) = 0;
  // NOT_FOUND for an unknown name.
  virtual absl::StatusOr<TensorMeta> Lookup(const std::string& name) const = 0;
  // Alloc and Summarize off the caller's thread (fills and summaries take
  // time in proportion to the tensor; an RPC thread must not spend it).
  // `done` runs on the core's host-work thread, or on a timer thread when
  // the wait below ends in an error.
  // A fill that depends on the rank is made with the rank `view` meant: it
  // waits (at most `wait`) until this worker is in `view.generation`, or,
  // without one, until it is in a formed world and not re-forming, since
  // the rank it had before may not be its rank there (a worker answers
  // requests while its first world is still forming). FAILED_PRECONDITION
  // when this worker's rank is not `view.rank`.
  virtual void AllocAsync(
      const TensorMeta& spec, const Fill& fill, const RankView& view,
      std::chrono::milliseconds wait,
      std::function<void(absl::StatusOr<TensorMeta>)> done) = 0;
  virtual void SummarizeAsync(
      const std::string& name, int64_t head,
      std::function<void(absl::StatusOr<TensorSummary>)> done) = 0;
  // Ops. Each validates (INVALID_ARGUMENT, NOT_FOUND, UNIMPLEMENTED, ...)
  // before anything is queued; on success the work runs in (group, seq)
  // order. A request refused here still takes its seqs on this rank, so the
  // group's later ops do not wait out the gap timeout for them (unless the
  // seq itself is what is wrong: taken, lost, or far ahead).
  virtual absl::StatusOr<std::shared_ptr<Work>> Submit(const OpSpec& spec) = 0;
  // Consecutive ops of one group at [plan.seq, plan.seq + ops.size()).
  // Taken by value: its ops move into the work, not copied op by op.
  virtual absl::StatusOr<std::shared_ptr<PlanWork>> SubmitPlan(
      PlanSpec plan) = 0;
  // A benchmark occupying one seq.
  virtual absl::StatusOr<std::shared_ptr<BenchWork>> Bench(
      const OpSpec& spec, const BenchOptions& options) = 0;
  // A sequenced request the caller refused before it became an op (it did
  // not parse): takes its `count` seqs all the same, records the refusal in
  // the flight recorder, and returns `reason`.
  virtual absl::Status Refuse(const std::string& group, int64_t seq,
                              int64_t count, int64_t generation,
                              absl::Status reason) = 0;
  // Reserved seqs [begin, end) of `group` that a client will not use.
  virtual absl::Status ReleaseSequence(const std::string& group,
                                       int64_t generation, int64_t begin,
                                       int64_t end) = 0;
  // Why queued work at `seq` of `group` has not started yet, for a person
  // (an error message): the seq it waits behind, or the op still running.
  virtual std::string WhyQueued(const std::string& group, int64_t seq) = 0;
  // Async ops (OpSpec::async) stay findable by id until waited for
  // successfully; sync ones are never in the table.
  virtual std::shared_ptr<Work> FindWork(int64_t id) = 0;
  virtual void ForgetWork(int64_t id) = 0;

  // Makes the subgroup `name` of the world ranks `ranks` (group rank i is
  // ranks[i]), as torch.distributed.new_group. A world-group op: every rank
  // of the world must get the same call at the same world seq, members or
  // not (NCCL splits the world communicator, which all of its ranks take
  // part in). Members then run ops of the group on its own executor, whose
  // seqs start at 0. INVALID_ARGUMENT for a bad name or rank list,
  // ALREADY_EXISTS for a name already taken ("world" is), before anything
  // is queued; the returned work completes when the group is usable here.
  // `generation` (0: the current one) is the one `world_seq` belongs to;
  // FAILED_PRECONDITION when this worker is in another.
  virtual absl::StatusOr<std::shared_ptr<Work>> CreateGroup(
      const std::string& name, std::vector<int> ranks, int64_t world_seq,
      int64_t generation, std::chrono::milliseconds timeout) = 0;
  // Drops subgroup `name` on this worker: queued ops fail ABORTED, an op
  // inside the backend ends at its completion or timeout, and the group is
  // not made again at the next re-form unless a rank that kept it brings
  // it back. NOT_FOUND for an unknown name, INVALID_ARGUMENT for the
  // world, FAILED_PRECONDITION while its creation is still under way.
  virtual absl::Status DestroyGroup(const std::string& name) = 0;

  // The entries of a request stamped with a generation: each runs as its
  // synchronous twin above once this worker is in that generation or later
  // (at once if it already is). A request stamped with a generation the
  // coordinator already announced, while this worker is still re-forming,
  // waits for it, up to `wait` (zero: the default op timeout), instead of
  // failing; if it does not come, the request's seqs are refused (Refuse)
  // with DEADLINE_EXCEEDED saying the world is re-forming and since when. A
  // generation more than one past the latest this worker knows of fails at
  // once with FAILED_PRECONDITION. `done` runs once, on the caller's thread,
  // the thread that forms the world or a timer thread, and must not block.
  template <typename T>
  using Done = std::function<void(absl::StatusOr<std::shared_ptr<T>>)>;
  virtual void SubmitInGeneration(OpSpec spec, std::chrono::milliseconds wait,
                                  Done<Work> done) = 0;
  virtual void SubmitPlanInGeneration(PlanSpec plan,
                                      std::chrono::milliseconds wait,
                                      Done<PlanWork> done) = 0;
  virtual void BenchInGeneration(OpSpec spec, BenchOptions options,
                                 std::chrono::milliseconds wait,
                                 Done<BenchWork> done) = 0;
  // `timeout` bounds the split itself, as CreateGroup's.
  virtual void CreateGroupInGeneration(std::string name, std::vector<int> ranks,
                                       int64_t world_seq, int64_t generation,
                                       std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds wait,
                                       Done<Work> done) = 0;

  // OK while the world's and every subgroup's communicator are usable; the
  // first broken one's reason otherwise (the worker then asks for a new
  // generation). FAILED_PRECONDITION before the first FormWorld.
  virtual absl::Status CommunicatorHealth() const = 0;
  // A broken communicator's executor still has ops that are failing and
  // being diagnosed. The worker holds its request to re-form while this
  // lasts (bounded): the ranks' arrival checks read and write the KV of
  // the generation the op ran in, and a re-form ends it under them, which
  // cut a check short and named a rank that was in the op as missing.
  virtual bool SettlingAfterBreak() const = 0;

  // Every group this worker knows, the world first.
  virtual std::vector<GroupInfo> Groups() const = 0;

  // The last ops (up to `limit`, 0: all kept) of `group` on this rank,
  // oldest first, and the group's next seq. NOT_FOUND for an unknown group.
  virtual absl::StatusOr<std::pair<int64_t, std::vector<OpRecord>>> OpLog(
      const std::string& group, int limit) const = 0;

  // Fails queued ops and stops executors; tensors are released.
  virtual void Shutdown() = 0;
};

}  // namespace ccl
