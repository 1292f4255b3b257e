// WorkerCore over a TensorStore, one world communicator (Gloo on cpu, NCCL on
// cuda) and its Executor. Submit validates and resolves everything on the
// caller's thread (never blocking), then hands a bound op to the executor.
#include "server/core/worker_core.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/element.h"
#include "common/status_macros.h"
#include "server/check/bench_check.h"
#include "server/comm/communicator.h"
#include "server/comm/factory.h"
#include "server/core/executor.h"
#include "server/core/op_work.h"
#include "server/core/tensor_store.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

// Completed works beyond this many are dropped oldest first, so sync ops
// (whose callers never ForgetWork) cannot grow the table without bound.
constexpr size_t kMaxRememberedWorks = 1 << 16;
// Flight recorder entries kept per group.
constexpr size_t kFlightRecords = 256;

std::string Name(OpKind kind) { return std::string(OpKindName(kind)); }

struct Resolved {
  BoundOp op;
  std::vector<std::shared_ptr<Tensor>> tensors;
};

// Runs warmup + iters instances of one op at one seq, back to back on the
// executor thread, each waited for before the next starts so per-instance
// times are meaningful.
// Holds the seq of an op this rank refused before launch, so that the
// group's later ops run at once instead of waiting out the gap timeout.
class RefusedTask final : public ExecutorTask {
 public:
  RefusedTask(int64_t seq, absl::Status reason)
      : seq_(seq), reason_(std::move(reason)) {}
  int64_t seq() const override { return seq_; }
  std::chrono::milliseconds timeout() const override {
    return std::chrono::milliseconds(0);
  }
  void Start() override {}
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(Communicator&) override {
    return reason_;
  }
  void Complete(absl::Status, double) override {}

 private:
  const int64_t seq_;
  const absl::Status reason_;
};

class BenchTask final : public ExecutorTask {
 public:
  BenchTask(int64_t id, OpSpec spec, Resolved resolved, int warmup, int iters,
            bool check, TensorStore* store,
            std::function<void(absl::StatusOr<BenchResult>)> done)
      : id_(id),
        spec_(std::move(spec)),
        op_(resolved.op),
        tensors_(std::move(resolved.tensors)),
        warmup_(warmup),
        iters_(iters),
        check_(check),
        store_(store),
        done_(std::move(done)) {}

  int64_t seq() const override { return spec_.seq; }
  std::chrono::milliseconds timeout() const override { return op_.timeout; }
  void Start() override { store_->WaitForHostAccess(tensors_); }

  absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      Communicator& comm) override {
    const Clock::time_point start = Clock::now();
    // Ranks agree on the op once; the timed instances are the op alone.
    for (int i = 0; i < warmup_; ++i) {
      CCL_RETURN_IF_ERROR(RunOnce(comm, /*agree_first=*/i == 0));
    }
    CCL_RETURN_IF_ERROR(RunTimed(comm));
    if (check_) {
      absl::Status status = RunChecked(comm);
      if (!status.ok()) return status;
    }
    return std::make_unique<CompletedWork>(
        absl::OkStatus(),
        std::chrono::duration<double, std::micro>(Clock::now() - start)
            .count());
  }

  void Complete(absl::Status status, double device_us) override {
    store_->Release(tensors_, id_);
    tensors_.clear();
    if (!status.ok()) {
      done_(absl::Status(status.code(),
                         absl::StrCat("bench of ", DescribeOp(spec_), ": ",
                                      std::string(status.message()))));
    } else {
      done_(result_);
    }
  }

 private:
  absl::Status RunChecked(Communicator& comm) {
    std::vector<check::Buffer> buffers;
    for (const auto& tensor : tensors_) {
      buffers.push_back(
          {tensor->data(), tensor->bytes(), tensor->meta().device});
    }
    auto wrong = check::RunChecked(op_, comm.rank(), comm.size(), buffers, [&] {
      return RunOnce(comm, /*agree_first=*/true);
    });
    if (!wrong.ok()) return wrong.status();
    result_.wrong = *wrong;
    return absl::OkStatus();
  }

  // The timed instances go back to back, as nccl-tests runs them: a backend
  // that enqueues (NCCL) keeps up to kWindow in flight, so the average is
  // the op's time on the device rather than launch plus host sync; one that
  // runs the op inside Launch (Gloo) completes each there. min and max are
  // the backend's own per-op times.
  absl::Status RunTimed(Communicator& comm) {
    constexpr size_t kWindow = 64;
    std::deque<std::unique_ptr<CommWork>> in_flight;
    int completed = 0;
    auto retire = [&]() -> absl::Status {
      std::unique_ptr<CommWork> handle = std::move(in_flight.front());
      in_flight.pop_front();
      CCL_RETURN_IF_ERROR(handle->Wait(op_.timeout));
      const double us = handle->DeviceMicros();
      if (completed == 0 || us < result_.min_us) result_.min_us = us;
      if (completed == 0 || us > result_.max_us) result_.max_us = us;
      ++completed;
      return absl::OkStatus();
    };
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < iters_; ++i) {
      BoundOp op = op_;
      op.agree_first = warmup_ == 0 && i == 0;
      auto handle = comm.Launch(op);
      if (!handle.ok()) return handle.status();
      in_flight.push_back(*std::move(handle));
      if (in_flight.size() > kWindow) CCL_RETURN_IF_ERROR(retire());
    }
    while (!in_flight.empty()) CCL_RETURN_IF_ERROR(retire());
    if (iters_ > 0) {
      result_.avg_us =
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
          iters_;
    }
    return absl::OkStatus();
  }

  absl::Status RunOnce(Communicator& comm, bool agree_first) {
    BoundOp op = op_;
    op.agree_first = agree_first;
    auto handle = comm.Launch(op);
    if (!handle.ok()) return handle.status();
    return (*handle)->Wait(op_.timeout);
  }

  const int64_t id_;
  const OpSpec spec_;
  const BoundOp op_;
  std::vector<std::shared_ptr<Tensor>> tensors_;
  const int warmup_;
  const int iters_;
  const bool check_;
  TensorStore* const store_;
  std::function<void(absl::StatusOr<BenchResult>)> done_;
  BenchResult result_;
};

// ---------------------------------------------------------------------------
// CreateGroup runs on the world executor at a world seq, so every rank splits
// at the same point of the world's op sequence. `make` builds this rank's
// communicator of the group (null on a non-member) and `done` registers it,
// both on the world's launch thread.

class GroupTask final : public Work, public ExecutorTask {
 public:
  using Make = std::function<absl::StatusOr<std::shared_ptr<Communicator>>(
      Communicator& world)>;
  using Done = std::function<absl::Status(
      absl::StatusOr<std::shared_ptr<Communicator>>)>;

  GroupTask(int64_t id, std::string name, int64_t world_seq,
            std::chrono::milliseconds timeout, Make make, Done done)
      : Work(id, SpecOf(world_seq, timeout)),
        name_(std::move(name)),
        make_(std::move(make)),
        done_(std::move(done)) {}

  std::string Describe() const override {
    return absl::StrCat("creating group '", name_, "' at world seq ",
                        spec().seq);
  }

  // ExecutorTask.
  int64_t seq() const override { return spec().seq; }
  std::chrono::milliseconds timeout() const override { return spec().timeout; }
  void Start() override { MarkRunning(); }
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      Communicator& world) override {
    const Clock::time_point start = Clock::now();
    absl::Status status = done_(make_(world));
    ran_ = true;
    return std::make_unique<CompletedWork>(
        std::move(status),
        std::chrono::duration<double, std::micro>(Clock::now() - start)
            .count());
  }
  void Complete(absl::Status status, double device_us) override {
    // Not launched (cancelled, or the world is broken): the name is freed.
    if (!ran_) (void)done_(status);
    if (!status.ok()) {
      status = absl::Status(status.code(),
                            absl::StrCat(Describe(), ": ", status.message()));
    }
    Finish(std::move(status), device_us, /*annotate=*/false);
  }

 private:
  static OpSpec SpecOf(int64_t world_seq, std::chrono::milliseconds timeout) {
    OpSpec spec;
    spec.group = kWorldGroup;
    spec.seq = world_seq;
    spec.kind = OpKind::kNop;
    spec.timeout = timeout;
    return spec;
  }

  const std::string name_;
  const Make make_;
  const Done done_;
  // Launch thread only (Complete runs after Launch, or instead of it).
  std::atomic<bool> ran_{false};
};

// ---------------------------------------------------------------------------

// When an op of a group times out or loses a peer, each rank that got that
// far leaves a mark in the generation's KV store and looks for the others'
// marks for a moment: the ranks without one never reached the op (dead,
// stopped, or still behind on an earlier one), which is what a person
// debugging a hang wants named. Costs nothing until an op fails.
Executor::Diagnosis ArrivalCheck(KvStore* kv, std::string group, int group_rank,
                                 std::vector<int> world_ranks) {
  if (kv == nullptr) return nullptr;
  return [kv, group = std::move(group), group_rank,
          world_ranks = std::move(world_ranks)](int64_t seq) -> std::string {
    constexpr auto kWindow = std::chrono::seconds(1);
    constexpr size_t kMaxChecked = 64;
    const std::string base = absl::StrCat("reached/", group, "/", seq, "/");
    if (!kv->Set(absl::StrCat(base, group_rank), "1").ok()) return "";
    std::vector<std::string> others;
    for (size_t r = 0; r < world_ranks.size() && others.size() < kMaxChecked;
         ++r) {
      if (static_cast<int>(r) != group_rank) {
        others.push_back(absl::StrCat(base, r));
      }
    }
    if (others.empty()) return "";
    if (kv->Wait(others, kWindow).ok()) {
      return absl::StrCat("every rank of group ", group, " reached seq ", seq,
                          " and failed there");
    }
    std::vector<std::string> missing;
    for (size_t r = 0; r < world_ranks.size() && r < kMaxChecked + 1; ++r) {
      if (static_cast<int>(r) == group_rank) continue;
      if (kv->Get(absl::StrCat(base, r), std::chrono::milliseconds(1)).ok()) {
        continue;
      }
      missing.push_back(
          group == kWorldGroup
              ? absl::StrCat(r)
              : absl::StrCat(r, " (world rank ", world_ranks[r], ")"));
    }
    if (missing.empty()) return "";
    return absl::StrCat(
        missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
        " of group ", group, " never reached seq ", seq,
        " (no report within 1 s of this rank's failure: dead, stopped, or "
        "still on an earlier op; `ccctl debug ops` shows where each rank is)");
  };
}

class WorkerCoreImpl final : public WorkerCore {
 public:
  WorkerCoreImpl(WorkerConfig config, std::unique_ptr<Memory> memory)
      : config_(std::move(config)),
        store_(config_.device, config_.tensor_quota_bytes, std::move(memory)) {}
  ~WorkerCoreImpl() override { Shutdown(); }

  absl::Status FormWorld(int rank, int world_size, int64_t generation,
                         KvStore& store) override {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " is not in a world of size ", world_size));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (shutdown_) {
        return absl::FailedPreconditionError("the worker is shut down");
      }
    }
    {
      // The communicators of the generation being replaced go first: a NCCL
      // kernel still waiting for a dead peer would hold the device, and
      // their ranks are about to join the new one instead.
      std::vector<std::shared_ptr<Executor>> previous;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (world_) previous.push_back(world_);
        for (auto& [name, group] : groups_) {
          if (group.executor) previous.push_back(group.executor);
        }
      }
      const absl::Status replaced = absl::AbortedError(
          absl::StrCat("the world is re-forming into generation ", generation));
      for (auto& executor : previous) executor->communicator().Abort(replaced);
    }
    const std::string prefix =
        absl::StrCat("gen", generation, "/", kWorldGroup);
    CommunicatorConfig comm_config;
    comm_config.device = config_.device;
    comm_config.rank = rank;
    comm_config.size = world_size;
    comm_config.prefix = prefix;
    comm_config.data_host = config_.data_host;
    comm_config.timeout = config_.default_op_timeout;
    auto made = MakeCommunicator(comm_config, store);
    if (!made.ok()) return made.status();
    std::shared_ptr<Communicator> comm = *std::move(made);
    std::vector<int> world_ranks(static_cast<size_t>(world_size));
    std::iota(world_ranks.begin(), world_ranks.end(), 0);
    auto executor = std::make_shared<Executor>(
        kWorldGroup, rank, std::move(comm), config_.seq_gap_timeout,
        ArrivalCheck(&store, kWorldGroup, rank, std::move(world_ranks)));
    std::shared_ptr<Executor> old;
    std::map<std::string, GroupEntry> old_groups;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (shutdown_) {
        executor->Stop(absl::AbortedError("the worker is shut down"));
        return absl::FailedPreconditionError("the worker is shut down");
      }
      old = std::move(world_);
      world_ = std::move(executor);
      old_groups.swap(groups_);
      kv_ = &store;
      rank_ = rank;
      world_size_ = world_size;
      generation_ = generation;
    }
    const absl::Status replaced = absl::AbortedError(absl::StrCat(
        "generation ", generation, " replaced the world before the op ran"));
    // Stopping joins the old executors' threads, and a Gloo op inside its
    // transport ends only at its timeout: that wait must not hold up the
    // caller (the worker's membership loop), so it happens on the side.
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(reapers_, [](Reaper& reaper) {
      if (!reaper.done->load()) return false;
      reaper.thread.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    reapers_.push_back(
        {std::thread([old = std::move(old), old_groups = std::move(old_groups),
                      replaced, done]() mutable {
           // Subgroups first: their communicators may be children of the
           // world's.
           for (auto& [name, group] : old_groups) {
             if (group.executor) group.executor->Stop(replaced);
           }
           if (old) old->Stop(replaced);
           old_groups.clear();
           old.reset();
           done->store(true);
         }),
         done});
    return absl::OkStatus();
  }

  int rank() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return rank_;
  }
  int world_size() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return world_size_;
  }
  int64_t generation() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return generation_;
  }
  std::string backend() const override { return BackendFor(config_.device); }
  const WorkerConfig& config() const override { return config_; }

  absl::StatusOr<TensorMeta> Alloc(const TensorMeta& spec,
                                   const Fill& fill) override {
    return store_.Alloc(spec, fill, rank());
  }
  absl::StatusOr<int64_t> Free(const std::string& name) override {
    return store_.Free(name);
  }
  std::vector<TensorMeta> List() const override { return store_.List(); }
  int64_t BytesInUse() const override { return store_.BytesInUse(); }
  absl::StatusOr<TensorMeta> Write(const std::string& name,
                                   int64_t offset_bytes,
                                   std::span<const std::byte> data) override {
    return store_.Write(name, offset_bytes, data);
  }
  absl::Status Read(
      const std::string& name, int64_t offset, int64_t count,
      int64_t chunk_bytes,
      const std::function<bool(int64_t, std::span<const std::byte>)>& sink)
      override {
    return store_.Read(name, offset, count, chunk_bytes, sink);
  }
  absl::StatusOr<TensorSummary> Summarize(const std::string& name,
                                          int64_t head) override {
    return store_.Summarize(name, head);
  }

  absl::StatusOr<std::shared_ptr<Work>> Submit(const OpSpec& spec) override {
    std::shared_ptr<Executor> executor;
    OpSpec normalized = spec;
    CCL_ASSIGN_OR_RETURN(executor, FindGroup(normalized));
    auto resolved = Resolve(normalized, *executor);
    if (!resolved.ok()) return Refuse(*executor, normalized, resolved.status());
    const int64_t id = next_work_id_.fetch_add(1);
    auto work = std::make_shared<OpWork>(id, normalized, resolved->op,
                                         resolved->tensors, &store_);
    if (absl::Status s = store_.Hold(resolved->tensors, id, work->Describe());
        !s.ok()) {
      return Refuse(*executor, normalized, s);
    }
    work->MarkHeld();
    if (absl::Status s = executor->Enqueue(work); !s.ok()) {
      store_.Release(resolved->tensors, id);
      Record(FlightEntry{normalized, work, s});
      return s;
    }
    Record(FlightEntry{normalized, work, absl::OkStatus()});
    Remember(work);
    if (config_.on_op_done) {
      // The work runs its own callback, so the raw pointer is alive then.
      OpWork* done = work.get();
      work->OnDone([this, done] { config_.on_op_done(ToRecord(*done)); });
    }
    return std::shared_ptr<Work>(work);
  }

  // A refused op still takes its seq on this rank (unless the seq itself is
  // what is wrong: a duplicate or one already declared lost).
  absl::Status Refuse(Executor& executor, const OpSpec& spec,
                      absl::Status reason) {
    (void)executor.Enqueue(std::make_shared<RefusedTask>(spec.seq, reason));
    Record(FlightEntry{spec, nullptr, reason});
    if (config_.on_op_done) {
      OpRecord record;
      record.spec = spec;
      record.state = WorkState::kFailed;
      record.status = reason;
      config_.on_op_done(record);
    }
    return reason;
  }

  static OpRecord ToRecord(const OpWork& work) {
    OpRecord record;
    record.spec = work.spec();
    record.dtype = work.bound().dtype;
    record.count = work.bound().count;
    record.work_id = work.id();
    record.state = work.state();
    record.status = work.status();
    record.timing = work.timing();
    return record;
  }

  absl::StatusOr<std::pair<int64_t, std::vector<OpRecord>>> OpLog(
      const std::string& group, int limit) const override {
    const std::string name = group.empty() ? kWorldGroup : group;
    int64_t next_seq = 0;
    bool known = false;
    for (const GroupInfo& info : Groups()) {
      if (info.name == name) {
        known = true;
        next_seq = info.next_seq;
      }
    }
    if (!known) {
      return absl::NotFoundError(absl::StrCat("no group '", name, "' on rank ",
                                              rank(), "; see ccctl group ls"));
    }
    std::vector<OpRecord> records;
    std::lock_guard<std::mutex> lock(flight_mutex_);
    auto it = flight_.find(name);
    if (it == flight_.end()) return std::make_pair(next_seq, records);
    const std::deque<FlightEntry>& entries = it->second;
    const size_t first =
        limit > 0 && entries.size() > static_cast<size_t>(limit)
            ? entries.size() - static_cast<size_t>(limit)
            : 0;
    for (size_t i = first; i < entries.size(); ++i) {
      const FlightEntry& entry = entries[i];
      OpRecord record;
      record.spec = entry.spec;
      if (entry.work) {
        record.dtype = entry.work->bound().dtype;
        record.count = entry.work->bound().count;
        record.work_id = entry.work->id();
        record.timing = entry.work->timing();
        if (entry.refused.ok()) {
          record.state = entry.work->state();
          record.status = entry.work->status();
        }
      }
      if (!entry.refused.ok()) {
        record.state = WorkState::kFailed;
        record.status = entry.refused;
      }
      records.push_back(std::move(record));
    }
    return std::make_pair(next_seq, std::move(records));
  }

  std::shared_ptr<Work> FindWork(int64_t id) override {
    std::lock_guard<std::mutex> lock(works_mutex_);
    auto it = works_.find(id);
    return it == works_.end() ? nullptr : it->second;
  }

  void ForgetWork(int64_t id) override {
    std::lock_guard<std::mutex> lock(works_mutex_);
    works_.erase(id);
  }

  absl::Status Bench(
      const OpSpec& spec, int warmup, int iters, bool check,
      std::function<void(absl::StatusOr<BenchResult>)> done) override {
    if (warmup < 0 || iters < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bench needs warmup >= 0 and iters >= 0, got ", warmup,
                       " and ", iters));
    }
    std::shared_ptr<Executor> executor;
    OpSpec normalized = spec;
    CCL_ASSIGN_OR_RETURN(executor, FindGroup(normalized));
    auto resolved = Resolve(normalized, *executor);
    if (!resolved.ok()) return Refuse(*executor, normalized, resolved.status());
    const int64_t id = next_work_id_.fetch_add(1);
    std::vector<std::shared_ptr<Tensor>> tensors = resolved->tensors;
    if (absl::Status s = store_.Hold(
            tensors, id, absl::StrCat("bench of ", DescribeOp(normalized)));
        !s.ok()) {
      return Refuse(*executor, normalized, s);
    }
    auto task = std::make_shared<BenchTask>(id, normalized,
                                            *std::move(resolved), warmup, iters,
                                            check, &store_, std::move(done));
    if (absl::Status s = executor->Enqueue(task); !s.ok()) {
      store_.Release(tensors, id);
      return s;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Work>> CreateGroup(
      const std::string& name, std::vector<int> ranks, int64_t world_seq,
      std::chrono::milliseconds timeout) override {
    OpSpec probe;
    probe.seq = world_seq;
    std::shared_ptr<Executor> world;
    CCL_ASSIGN_OR_RETURN(world, FindGroup(probe));
    if (world_seq < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("creating group '", name, "': seq must be >= 0"));
    }
    if (timeout.count() <= 0) timeout = config_.default_op_timeout;
    int position = -1;
    int64_t generation = 0;
    KvStore* kv = nullptr;
    absl::Status valid = ValidateGroupName(name);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (valid.ok()) valid = ValidateGroupRanks(ranks, world_size_);
      if (valid.ok() && groups_.count(name) > 0) {
        valid = absl::AlreadyExistsError(
            absl::StrCat("a group named '", name, "' already exists"));
      }
      if (valid.ok()) {
        GroupEntry& entry = groups_[name];
        entry.ranks = ranks;
        auto it = std::find(ranks.begin(), ranks.end(), rank_);
        if (it != ranks.end()) {
          position = static_cast<int>(it - ranks.begin());
        }
        entry.group_rank = position;
      }
      generation = generation_;
      kv = kv_;
    }
    if (!valid.ok()) {
      OpSpec split;
      split.group = kWorldGroup;
      split.seq = world_seq;
      split.kind = OpKind::kNop;  // a group split occupies the world seq
      split.input = absl::StrCat("create group ", name);
      return Refuse(*world, split, valid);
    }

    // The world communicator's ranks are world ranks, so the group's world
    // ranks are its members as the parent numbers them.
    auto make = [ranks, name, timeout](Communicator& parent)
        -> absl::StatusOr<std::shared_ptr<Communicator>> {
      auto child = parent.Split(ranks, name, timeout);
      if (!child.ok()) return child.status();
      return std::shared_ptr<Communicator>(*std::move(child));
    };
    auto done = [this, name, position, generation,
                 kv](absl::StatusOr<std::shared_ptr<Communicator>> comm)
        -> absl::Status {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = groups_.find(name);
      if (it == groups_.end() || generation_ != generation || shutdown_) {
        return absl::AbortedError(
            "the world changed while the group was being created");
      }
      if (!comm.ok()) {
        groups_.erase(it);
        return comm.status();
      }
      GroupEntry& entry = it->second;
      entry.creating = false;
      if (*comm) {
        entry.executor = std::make_shared<Executor>(
            name, position, *std::move(comm), config_.seq_gap_timeout,
            ArrivalCheck(kv, name, position, entry.ranks));
      }
      return absl::OkStatus();
    };
    const int64_t id = next_work_id_.fetch_add(1);
    auto task = std::make_shared<GroupTask>(id, name, world_seq, timeout,
                                            std::move(make), std::move(done));
    if (absl::Status s = world->Enqueue(task); !s.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (generation_ == generation) groups_.erase(name);
      return s;
    }
    return std::shared_ptr<Work>(task);
  }

  std::vector<GroupInfo> Groups() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<GroupInfo> groups;
    if (!world_) return groups;
    GroupInfo info;
    info.name = world_->group();
    info.ranks.resize(static_cast<size_t>(world_size_));
    std::iota(info.ranks.begin(), info.ranks.end(), 0);
    info.group_rank = rank_;
    info.next_seq = world_->next_seq();
    info.backend = world_->communicator().name();
    info.state = world_->state();
    groups.push_back(std::move(info));
    for (const auto& [name, entry] : groups_) {
      GroupInfo group;
      group.name = name;
      group.ranks = entry.ranks;
      group.group_rank = entry.group_rank;
      group.backend = world_->communicator().name();
      if (entry.creating) {
        group.state = "creating";
      } else if (!entry.executor) {
        group.state = "not a member";
      } else {
        group.next_seq = entry.executor->next_seq();
        group.backend = entry.executor->communicator().name();
        group.state = entry.executor->state();
      }
      groups.push_back(std::move(group));
    }
    return groups;
  }

  void Shutdown() override {
    std::shared_ptr<Executor> world;
    std::map<std::string, GroupEntry> groups;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
      world = std::move(world_);
      groups.swap(groups_);
    }
    const absl::Status reason =
        absl::CancelledError("the worker shut down before the op ran");
    for (auto& [name, group] : groups) {
      if (group.executor) group.executor->Stop(reason);
    }
    if (world) world->Stop(reason);
    std::vector<Reaper> reapers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reapers.swap(reapers_);
    }
    for (auto& reaper : reapers) reaper.thread.join();
    store_.Clear();
  }

  absl::Status CommunicatorHealth() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!world_) return absl::FailedPreconditionError("no world yet");
    if (absl::Status s = world_->communicator().Health(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("group world: ", s.message()));
    }
    for (const auto& [name, group] : groups_) {
      if (!group.executor) continue;
      if (absl::Status s = group.executor->communicator().Health(); !s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("group ", name, ": ", s.message()));
      }
    }
    return absl::OkStatus();
  }

 private:
  // Normalizes the group name and checks the generation.
  absl::StatusOr<std::shared_ptr<Executor>> FindGroup(OpSpec& spec) const {
    if (spec.group.empty()) spec.group = kWorldGroup;
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutdown_) {
      return absl::FailedPreconditionError("the worker is shut down");
    }
    if (!world_) {
      return absl::FailedPreconditionError(
          "this worker has no world yet; ops can run once it has joined a "
          "generation");
    }
    if (spec.generation != 0 && spec.generation != generation_) {
      return absl::FailedPreconditionError(
          absl::StrCat("op is for generation ", spec.generation,
                       " but this worker is in ", "generation ", generation_));
    }
    if (spec.group == kWorldGroup) return world_;
    auto it = groups_.find(spec.group);
    if (it == groups_.end()) {
      std::string known = kWorldGroup;
      for (const auto& [name, entry] : groups_)
        absl::StrAppend(&known, ", ", name);
      return absl::NotFoundError(absl::StrCat("no group named '", spec.group,
                                              "' on rank ", rank_,
                                              "; known groups: ", known));
    }
    if (it->second.creating) {
      return absl::UnavailableError(absl::StrCat(
          "group '", spec.group, "' is still being created on rank ", rank_));
    }
    if (!it->second.executor) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, " is not a member of group '", spec.group,
          "' (world ranks ", absl::StrJoin(it->second.ranks, ","), ")"));
    }
    return it->second.executor;
  }

  absl::StatusOr<Resolved> Resolve(const OpSpec& spec, Executor& executor) {
    Communicator& comm = executor.communicator();
    const int rank = comm.rank();
    const int world = comm.size();
    const std::string op_name = Name(spec.kind);
    const std::string what = DescribeOp(spec);
    auto fail = [&](const std::string& message) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
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
    // Root and peer are ranks of the op's group.
    const std::string of_group =
        spec.group == kWorldGroup
            ? absl::StrCat("a world of size ", world)
            : absl::StrCat("group '", spec.group, "' of size ", world,
                           " (group ranks)");
    if (HasRoot(spec.kind) && (spec.root < 0 || spec.root >= world)) {
      return fail(
          absl::StrCat("root ", spec.root, " is not a rank of ", of_group));
    }
    if (spec.kind == OpKind::kSend || spec.kind == OpKind::kRecv) {
      if (spec.peer < 0 || spec.peer >= world) {
        return fail(
            absl::StrCat("peer ", spec.peer, " is not a rank of ", of_group));
      }
      if (spec.peer == rank) {
        return fail(absl::StrCat("peer ", spec.peer,
                                 " is this rank; send/recv need another rank"));
      }
    }
    if (spec.timeout.count() < 0) return fail("timeout must be >= 0");

    Resolved out;
    BoundOp& op = out.op;
    op.kind = spec.kind;
    op.root = spec.root;
    op.peer = spec.peer;
    op.reduce_op = spec.reduce_op;
    op.premul_scale = spec.premul_scale;
    op.seq = spec.seq;
    op.timeout =
        spec.timeout.count() > 0 ? spec.timeout : config_.default_op_timeout;
    op.agree_first = spec.agree;
    if (spec.kind == OpKind::kBarrier || spec.kind == OpKind::kNop) return out;

    auto lookup =
        [&](const std::string& name,
            const char* role) -> absl::StatusOr<std::shared_ptr<Tensor>> {
      if (name.empty()) {
        return fail(absl::StrCat(op_name, " needs ", role, " tensor"));
      }
      auto tensor = store_.Lookup(name);
      if (!tensor.ok()) {
        return absl::NotFoundError(absl::StrCat(what, ": no tensor named '",
                                                name, "' (", role, ") on rank ",
                                                rank));
      }
      return tensor;
    };
    // A tensor a rank does not use may be left out (gather's output and
    // scatter's input off the root).
    auto optional = [&](const std::string& name) -> std::shared_ptr<Tensor> {
      if (name.empty()) return nullptr;
      auto tensor = store_.Lookup(name);
      return tensor.ok() ? *tensor : nullptr;
    };
    auto same_dtype = [&](const Tensor& a, const Tensor& b) -> absl::Status {
      if (a.dtype() == b.dtype()) return absl::OkStatus();
      return fail(absl::StrCat("input '", a.name(), "' is ",
                               std::string(DTypeName(a.dtype())),
                               " but output '", b.name(), "' is ",
                               std::string(DTypeName(b.dtype()))));
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
            return fail(absl::StrCat("input '", in->name(), "' has ",
                                     in->numel(), " elements but output '",
                                     outp->name(), "' has ", outp->numel()));
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
            return fail(
                absl::StrCat("input '", in->name(), "' has ", in->numel(),
                             " elements but needs world size ", world,
                             " x output '", outp->name(), "' (", outp->numel(),
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
    CCL_RETURN_IF_ERROR(comm.Supports(op.kind, op.dtype, op.reduce_op));
    if (in) out.tensors.push_back(in);
    if (outp && outp != in) out.tensors.push_back(outp);
    return out;
  }

  // A flight-recorder entry: the op as submitted, its work (live state and
  // timing; it holds no tensors once complete), or why it was refused.
  struct FlightEntry {
    OpSpec spec;
    std::shared_ptr<OpWork> work;
    absl::Status refused;
  };

  void Record(FlightEntry entry) {
    std::lock_guard<std::mutex> lock(flight_mutex_);
    std::deque<FlightEntry>& entries = flight_[entry.spec.group];
    entries.push_back(std::move(entry));
    if (entries.size() > kFlightRecords) entries.pop_front();
  }

  void Remember(const std::shared_ptr<Work>& work) {
    std::lock_guard<std::mutex> lock(works_mutex_);
    works_.emplace(work->id(), work);
    for (auto it = works_.begin();
         works_.size() > kMaxRememberedWorks && it != works_.end();) {
      const WorkState state = it->second->state();
      if (state == WorkState::kCompleted || state == WorkState::kFailed) {
        it = works_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const WorkerConfig config_;
  TensorStore store_;

  mutable std::mutex mutex_;
  bool shutdown_ = false;
  int rank_ = 0;
  int world_size_ = 0;
  int64_t generation_ = 0;
  std::shared_ptr<Executor> world_;
  // The KV store of the current generation (FormWorld's), for Gloo
  // rendezvous of subgroups.
  KvStore* kv_ = nullptr;
  struct GroupEntry {
    std::vector<int> ranks;  // world ranks, in group-rank order
    int group_rank = -1;     // -1: not a member
    bool creating = true;
    std::shared_ptr<Executor> executor;  // members, once created
  };
  std::map<std::string, GroupEntry> groups_;
  // Stop the executors of replaced generations (see FormWorld).
  struct Reaper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Reaper> reapers_;

  std::atomic<int64_t> next_work_id_{1};
  std::mutex works_mutex_;
  mutable std::mutex flight_mutex_;
  std::map<std::string, std::deque<FlightEntry>> flight_;
  std::map<int64_t, std::shared_ptr<Work>> works_;
};

}  // namespace

absl::Status ValidateGroupName(const std::string& name) {
  if (name == kWorldGroup) {
    return absl::AlreadyExistsError(
        "the group name 'world' is taken by the world group");
  }
  if (absl::Status s = ValidateTensorName(name); !s.ok()) {
    std::string message(s.message());
    if (absl::StartsWith(message, "tensor name")) {
      message = absl::StrCat("group name", message.substr(11));
    }
    return absl::InvalidArgumentError(message);
  }
  return absl::OkStatus();
}

absl::Status ValidateGroupRanks(const std::vector<int>& ranks, int world_size) {
  if (ranks.empty()) {
    return absl::InvalidArgumentError("a group needs at least one rank");
  }
  std::vector<bool> seen(static_cast<size_t>(std::max(world_size, 0)), false);
  for (int rank : ranks) {
    if (rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is not a rank of a world of size ",
                       world_size, " (group ranks are world ranks)"));
    }
    if (seen[static_cast<size_t>(rank)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is listed twice"));
    }
    seen[static_cast<size_t>(rank)] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerCore>> WorkerCore::Create(
    WorkerConfig config) {
  if (config.tensor_quota_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor quota must be >= 0, got ", config.tensor_quota_bytes));
  }
  if (config.default_op_timeout.count() <= 0 ||
      config.seq_gap_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        "default op timeout and seq gap timeout must be positive");
  }
  auto memory = MakeMemory(config.device);
  if (!memory.ok()) return memory.status();
  return std::unique_ptr<WorkerCore>(
      new WorkerCoreImpl(std::move(config), *std::move(memory)));
}

}  // namespace ccl
