// WorkerCore over a TensorStore, one world communicator (Gloo on cpu, NCCL on
// cuda) and its Executor, plus the subgroups made from it. Submit validates
// and resolves everything on the caller's thread (never blocking), then
// hands bound work to the group's executor.
#include "server/core/worker_core.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"
#include "common/timer_queue.h"
#include "server/comm/factory.h"
#include "server/core/arrival_check.h"
#include "server/core/executor.h"
#include "server/core/flight_recorder.h"
#include "server/core/group_task.h"
#include "server/core/host_work_queue.h"
#include "server/core/op_work.h"
#include "server/core/resolve.h"
#include "server/core/tensor_store.h"
#include "spdlog/spdlog.h"

namespace ccl {
namespace {

// Completed async works beyond this many are dropped oldest first, so a
// client that never waits cannot grow the table without bound.
constexpr size_t kMaxRememberedWorks = 1 << 16;
// Flight recorder entries kept per group.
constexpr size_t kFlightRecords = 256;

class WorkerCoreImpl final : public WorkerCore {
 private:
  // Requests waiting for a generation this worker has not reached.
  struct GenerationWaiter {
    int64_t generation = 0;
    std::function<void(absl::Status)> ready;
    TimerQueue::TimerId timer = 0;
    bool fired = false;  // guarded by mutex_
  };

 public:
  WorkerCoreImpl(WorkerConfig config, std::unique_ptr<Memory> memory)
      : config_(std::move(config)),
        store_(config_.device, config_.tensor_quota_bytes, std::move(memory),
               config_.max_tensors),
        flight_(kFlightRecords) {}
  ~WorkerCoreImpl() override { Shutdown(); }

  absl::Status FormWorld(int rank, int world_size, int64_t generation,
                         KvStore& store, const ShrinkInfo& shrink) override {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " is not in a world of size ", world_size));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (shutdown_) {
        return absl::FailedPreconditionError("the worker is shut down");
      }
      if (!reforming_since_)
        reforming_since_ = std::chrono::system_clock::now();
      forming_generation_ = generation;
    }
    {
      // The communicators of the generation being replaced go first: a NCCL
      // kernel still waiting for a dead peer would hold the device, and
      // their ranks are about to join the new one instead.
      std::vector<std::shared_ptr<Executor>> previous;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        // The world's own communicator stays for a shrink: it is what
        // shrinks (and aborts its ops as it does).
        shrinking_ = shrink.from_generation != 0 && world_ &&
                     shrink.from_generation == generation_;
        if (world_) {
          shrunk_world_ = shrinking_ ? world_ : nullptr;
          if (!shrinking_) previous.push_back(world_);
        }
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
    const auto started = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<Communicator>> made =
        absl::UnimplementedError("no shrink");
    if (shrinking_) {
      made = shrunk_world_->communicator().Shrink(shrink.excluded_ranks,
                                                  config_.default_op_timeout);
      shrunk_world_.reset();
      if (absl::IsUnimplemented(made.status())) {
        spdlog::info("ccworker: {}; a new rendezvous instead",
                     std::string(made.status().message()));
      }
    }
    const bool shrunk = made.ok();
    if (!shrunk && !absl::IsUnimplemented(made.status())) {
      return made.status();
    }
    if (!shrunk) made = MakeCommunicator(comm_config, store);
    if (!made.ok()) return made.status();
    spdlog::info(
        "ccworker: world communicator of generation {} ({} of {}) {} in {} ms",
        generation, rank, world_size,
        shrunk ? "shrunk from the last one" : "built",
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::steady_clock::now() - started)
            .count());
    std::shared_ptr<Communicator> comm = *std::move(made);
    auto recreated = RecreateGroups(*comm, rank, world_size, store);
    if (!recreated.ok()) {
      comm->Abort(recreated.status());
      return recreated.status();
    }
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
      groups_ = *std::move(recreated);
      kv_ = &store;
      rank_ = rank;
      world_size_ = world_size;
      generation_ = generation;
      reforming_since_.reset();
    }
    ReleaseGenerationWaiters();
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
  absl::StatusOr<TensorMeta> Lookup(const std::string& name) const override {
    auto tensor = store_.Lookup(name);
    if (!tensor.ok()) return tensor.status();
    return (*tensor)->meta();
  }
  void AllocAsync(
      const TensorMeta& spec, const Fill& fill,
      std::function<void(absl::StatusOr<TensorMeta>)> done) override {
    host_work_.Post([this, spec, fill, done = std::move(done)] {
      done(Alloc(spec, fill));
    });
  }
  void SummarizeAsync(
      const std::string& name, int64_t head,
      std::function<void(absl::StatusOr<TensorSummary>)> done) override {
    host_work_.Post([this, name, head, done = std::move(done)] {
      done(Summarize(name, head));
    });
  }

  absl::StatusOr<std::shared_ptr<Work>> Submit(const OpSpec& spec) override {
    OpSpec normalized = spec;
    std::shared_ptr<Executor> executor;
    CCL_ASSIGN_OR_RETURN(executor, FindSequenced(normalized, 1));
    auto resolved = Resolve(normalized, executor->communicator(), store_,
                            config_.default_op_timeout);
    if (!resolved.ok()) {
      return RefuseSpec(*executor, normalized, 1, resolved.status());
    }
    const int64_t id = next_work_id_.fetch_add(1);
    auto work = std::make_shared<OpWork>(id, normalized, resolved->op,
                                         resolved->tensors, &store_);
    if (absl::Status s = store_.Hold(resolved->tensors, id, work->Describe());
        !s.ok()) {
      return RefuseSpec(*executor, normalized, 1, s);
    }
    work->MarkHeld();
    FlightEntry entry{normalized, resolved->op.dtype, resolved->op.count, work};
    if (absl::Status s = executor->Enqueue(work); !s.ok()) {
      store_.Release(resolved->tensors, id);
      entry.refused = s;
      flight_.Record(std::move(entry));
      return s;
    }
    Accepted(work, {entry});
    return std::shared_ptr<Work>(work);
  }

  absl::StatusOr<std::shared_ptr<PlanWork>> SubmitPlan(
      const PlanSpec& plan) override {
    OpSpec whole;
    whole.group = plan.group;
    whole.seq = plan.seq;
    whole.kind = OpKind::kNop;
    whole.generation = plan.generation;
    whole.input = absl::StrCat("plan of ", plan.ops.size(), " ops");
    std::shared_ptr<Executor> executor;
    CCL_ASSIGN_OR_RETURN(
        executor,
        FindSequenced(whole, std::max<int64_t>(
                                 1, static_cast<int64_t>(plan.ops.size()))));
    const int64_t count = static_cast<int64_t>(plan.ops.size());
    if (count == 0) {
      return absl::InvalidArgumentError("a plan needs at least one op");
    }
    std::vector<OpSpec> specs;
    std::vector<BoundOp> ops;
    std::vector<std::shared_ptr<Tensor>> tensors;
    for (int64_t i = 0; i < count; ++i) {
      OpSpec spec = plan.ops[static_cast<size_t>(i)];
      spec.group = whole.group;
      spec.seq = plan.seq + i;
      spec.generation = plan.generation;
      spec.async = false;
      auto resolved = Resolve(spec, executor->communicator(), store_,
                              config_.default_op_timeout);
      if (!resolved.ok()) {
        const absl::Status why(resolved.status().code(),
                               absl::StrCat("op ", i, " of the plan: ",
                                            resolved.status().message()));
        return RefuseSpec(*executor, whole, count, why);
      }
      for (auto& tensor : resolved->tensors) {
        if (std::find(tensors.begin(), tensors.end(), tensor) ==
            tensors.end()) {
          tensors.push_back(tensor);
        }
      }
      specs.push_back(std::move(spec));
      ops.push_back(resolved->op);
    }
    const int64_t id = next_work_id_.fetch_add(1);
    auto work = std::make_shared<PlanWork>(id, whole, specs, ops,
                                           plan.aggregate, tensors, &store_);
    if (absl::Status s = store_.Hold(tensors, id, work->Describe()); !s.ok()) {
      return RefuseSpec(*executor, whole, count, s);
    }
    std::vector<FlightEntry> entries;
    for (int64_t i = 0; i < count; ++i) {
      FlightEntry entry{specs[i], ops[i].dtype, ops[i].count, work};
      entry.plan_index = static_cast<int>(i);
      entries.push_back(std::move(entry));
    }
    if (absl::Status s = executor->Enqueue(work); !s.ok()) {
      store_.Release(tensors, id);
      for (FlightEntry& entry : entries) {
        entry.refused = s;
        flight_.Record(std::move(entry));
      }
      return s;
    }
    Accepted(work, std::move(entries));
    return work;
  }

  absl::StatusOr<std::shared_ptr<BenchWork>> Bench(
      const OpSpec& spec, const BenchOptions& options) override {
    OpSpec normalized = spec;
    std::shared_ptr<Executor> executor;
    CCL_ASSIGN_OR_RETURN(executor, FindSequenced(normalized, 1));
    auto refuse = [&](absl::Status why) {
      return RefuseSpec(*executor, normalized, 1, std::move(why));
    };
    if (options.warmup < 0 || options.iters < 0 || options.graph_launches < 0) {
      return refuse(absl::InvalidArgumentError(absl::StrCat(
          "bench needs warmup, iters and graph launches >= 0, got ",
          options.warmup, ", ", options.iters, " and ",
          options.graph_launches)));
    }
    auto resolved = Resolve(normalized, executor->communicator(), store_,
                            config_.default_op_timeout);
    if (!resolved.ok()) return refuse(resolved.status());
    const int64_t id = next_work_id_.fetch_add(1);
    auto work = std::make_shared<BenchWork>(
        id, normalized, resolved->op, resolved->tensors, options, &store_);
    if (absl::Status s = store_.Hold(
            resolved->tensors, id, absl::StrCat("bench of ", work->Describe()));
        !s.ok()) {
      return refuse(s);
    }
    FlightEntry entry{normalized, resolved->op.dtype, resolved->op.count, work};
    if (absl::Status s = executor->Enqueue(work); !s.ok()) {
      store_.Release(resolved->tensors, id);
      entry.refused = s;
      flight_.Record(std::move(entry));
      return s;
    }
    flight_.Record(std::move(entry));
    return work;
  }

  absl::Status Refuse(const std::string& group, int64_t seq, int64_t count,
                      int64_t generation, absl::Status reason) override {
    OpSpec spec;
    spec.group = group;
    spec.seq = seq;
    spec.kind = OpKind::kNop;
    spec.generation = generation;
    if (seq < 0 || count < 1) return reason;
    // An unknown group, or an older generation, takes nothing (see
    // FindSequenced); a malformed generation takes its seqs in the current
    // one.
    if (!GenerationTakesSeqs(spec.generation)) return reason;
    spec.generation = 0;
    auto executor = FindGroup(spec);
    if (!executor.ok()) return reason;
    return RefuseSpec(**executor, spec, count, std::move(reason));
  }

  absl::Status ReleaseSequence(const std::string& group, int64_t generation,
                               int64_t begin, int64_t end) override {
    OpSpec spec;
    spec.group = group;
    spec.seq = begin;
    spec.generation = generation;
    std::shared_ptr<Executor> executor;
    CCL_ASSIGN_OR_RETURN(executor, FindGroup(spec));
    if (begin < 0 || end < begin) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot release seqs [", begin, ", ", end, ") of group ",
                       spec.group));
    }
    return executor->Release(
        begin, end,
        absl::FailedPreconditionError(absl::StrCat(
            "seqs ", begin, "..", end - 1, " of group ", spec.group,
            " were released by the client that reserved them")));
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
    return std::make_pair(next_seq, flight_.Last(name, limit));
  }

  std::string WhyQueued(const std::string& group, int64_t seq) override {
    std::shared_ptr<Executor> executor;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (group.empty() || group == kWorldGroup) {
        executor = world_;
      } else if (auto it = groups_.find(group); it != groups_.end()) {
        executor = it->second.executor;
      }
    }
    if (!executor) return "its group is gone";
    return executor->WhyWaiting(seq);
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

  absl::StatusOr<std::shared_ptr<Work>> CreateGroup(
      const std::string& name, std::vector<int> ranks, int64_t world_seq,
      int64_t world_generation, std::chrono::milliseconds timeout) override {
    OpSpec probe;
    probe.seq = world_seq;
    probe.generation = world_generation;
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
      if (valid.ok() && config_.max_groups > 0 &&
          static_cast<int64_t>(groups_.size()) + 1 >= config_.max_groups) {
        valid = absl::ResourceExhaustedError(absl::StrCat(
            "group '", name, "' would make ", groups_.size() + 2,
            " groups with the world, over this worker's --max-groups of ",
            config_.max_groups));
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
      return RefuseSpec(*world, split, 1, valid);
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
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
    }
    ReleaseGenerationWaiters();
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

  void AwaitGeneration(int64_t generation, std::chrono::milliseconds timeout,
                       std::function<void(absl::Status)> ready) override {
    auto waiter = std::make_shared<GenerationWaiter>();
    waiter->generation = generation;
    waiter->ready = std::move(ready);
    bool now = false;
    std::string beyond;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      now = !shutdown_ && world_ && generation_ >= generation;
      // The coordinator moves one generation at a time, and a worker in the
      // world hears of each within a heartbeat: one more than the latest it
      // knows of may be announced already; one further is not coming (a
      // made-up stamp), and waiting for it would only hold the seq.
      const int64_t known = reforming_since_
                                ? std::max(generation_, forming_generation_)
                                : generation_;
      if (!now && !shutdown_ && world_ && generation > known + 1) {
        beyond = absl::StrCat(
            "generation ", generation, " is not coming: this worker is in ",
            generation_,
            reforming_since_
                ? absl::StrCat(" and re-forming into ", forming_generation_)
                : std::string(),
            ", and generations come one at a time");
      } else if (!now) {
        waiters_.push_back(waiter);
        waiter->timer = timers_.ScheduleAfter(timeout, [this, waiter, timeout] {
          GenerationTimedOut(waiter, timeout);
        });
      }
    }
    if (!beyond.empty()) {
      waiter->ready(absl::FailedPreconditionError(beyond));
    } else if (now) {
      waiter->ready(absl::OkStatus());
    }
  }

  void GenerationTimedOut(const std::shared_ptr<GenerationWaiter>& waiter,
                          std::chrono::milliseconds timeout) {
    {
      std::string why;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (waiter->fired) return;
        waiter->fired = true;
        std::erase(waiters_, waiter);
        why = absl::StrCat("this worker is in generation ", generation_,
                           " and did not reach generation ", waiter->generation,
                           " within ", timeout.count(), " ms");
        if (reforming_since_) {
          absl::StrAppend(
              &why, "; the world has been re-forming (into generation ",
              forming_generation_, ") for ",
              std::chrono::duration_cast<std::chrono::milliseconds>(
                  std::chrono::system_clock::now() - *reforming_since_)
                  .count(),
              " ms");
        }
      }
      waiter->ready(absl::DeadlineExceededError(why));
    }
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
  struct GroupEntry {
    std::vector<int> ranks;  // world ranks, in group-rank order
    int group_rank = -1;     // -1: not a member
    bool creating = true;
    std::shared_ptr<Executor> executor;  // members, once created
  };

  // Subgroups outlive a re-form: the new world makes again every group the
  // old one had, at the same point for every rank (inside FormWorld, before
  // any op of the generation), so clients keep their groups without asking.
  // A restarted worker remembers none, so the ranks pool what they know
  // (two small exchanges on the new world); a world that changed size
  // (--elastic shrink renumbers ranks) starts without groups.
  absl::StatusOr<std::map<std::string, GroupEntry>> RecreateGroups(
      Communicator& world, int rank, int world_size, KvStore& kv) {
    std::string mine;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (world_size_ == world_size) {
        for (const auto& [name, entry] : groups_) {
          if (entry.creating) continue;
          absl::StrAppend(&mine, name, "=", absl::StrJoin(entry.ranks, ","),
                          ";");
        }
      }
    }
    const auto deadline =
        std::chrono::steady_clock::now() + config_.default_op_timeout;
    const size_t n = static_cast<size_t>(world_size);
    const int64_t length = static_cast<int64_t>(mine.size());
    std::vector<int64_t> lengths(n);
    CCL_RETURN_IF_ERROR(
        world.AllGatherHost(&length, lengths.data(), sizeof(length), deadline));
    const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
    std::map<std::string, GroupEntry> groups;
    if (longest == 0) return groups;
    std::string padded = mine;
    padded.resize(static_cast<size_t>(longest), '\0');
    std::string all(static_cast<size_t>(longest) * n, '\0');
    CCL_RETURN_IF_ERROR(world.AllGatherHost(padded.data(), all.data(),
                                            padded.size(), deadline));
    // Every rank builds the same map: definitions by name, the lowest
    // rank's where two differ.
    std::map<std::string, std::vector<int>> definitions;
    for (size_t r = 0; r < n; ++r) {
      const std::string text = all.substr(r * longest, lengths[r]);
      for (absl::string_view item :
           absl::StrSplit(text, ';', absl::SkipEmpty())) {
        std::pair<std::string, std::string> parts =
            absl::StrSplit(item, absl::MaxSplits('=', 1));
        std::vector<int> ranks;
        bool valid = true;
        for (absl::string_view value : absl::StrSplit(parts.second, ',')) {
          int world_rank = 0;
          valid = valid && absl::SimpleAtoi(value, &world_rank) &&
                  world_rank >= 0 && world_rank < world_size;
          ranks.push_back(world_rank);
        }
        if (valid) definitions.emplace(parts.first, std::move(ranks));
      }
    }
    for (const auto& [name, ranks] : definitions) {
      auto child = world.Split(ranks, name, config_.default_op_timeout);
      if (!child.ok()) {
        return absl::Status(child.status().code(),
                            absl::StrCat("making group '", name,
                                         "' again in the new generation: ",
                                         child.status().message()));
      }
      GroupEntry& entry = groups[name];
      entry.ranks = ranks;
      entry.creating = false;
      auto it = std::find(ranks.begin(), ranks.end(), rank);
      entry.group_rank =
          it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
      if (*child) {
        entry.executor = std::make_shared<Executor>(
            name, entry.group_rank,
            std::shared_ptr<Communicator>(*std::move(child)),
            config_.seq_gap_timeout,
            ArrivalCheck(&kv, name, entry.group_rank, ranks));
      }
    }
    return groups;
  }

  // Normalizes the group name and the generation (0: the current one) and
  // checks the generation.
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
    // The flight recorder keeps ops across generations; it needs to know
    // which one each ran in.
    spec.generation = generation_;
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

  // Whether a sequenced request naming `generation` is one whose seqs this
  // worker takes when it refuses it. 0 and the current generation: yes. An
  // older one: no; its seqs were reserved in a generation that is over, and
  // the same numbers in the current one belong to other clients, which a
  // stale request must not take from them. A negative one (malformed) or
  // one this worker has not reached (the coordinator moved on and this
  // worker re-forms next, or the client made it up): yes, in the current
  // generation, whose seq the client most likely reserved; should the world
  // indeed be moving on, that generation's seqs are about to end anyway.
  bool GenerationTakesSeqs(int64_t generation) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return generation <= 0 || generation >= generation_;
  }

  // FindGroup for a request that carries seqs [spec.seq, spec.seq + count):
  // one refused for its generation still takes them where
  // GenerationTakesSeqs says so, so the group's later ops do not wait out
  // the gap timeout.
  absl::StatusOr<std::shared_ptr<Executor>> FindSequenced(OpSpec& spec,
                                                          int64_t count) {
    const int64_t requested = spec.generation;
    auto executor = FindGroup(spec);
    if (executor.ok() || requested == 0 || !GenerationTakesSeqs(requested) ||
        spec.seq < 0) {
      return executor;
    }
    OpSpec current = spec;
    current.generation = 0;
    auto in_current = FindGroup(current);
    if (!in_current.ok()) return executor;
    return RefuseSpec(**in_current, current, count, executor.status());
  }

  // Takes `count` seqs from `spec.seq` for a refused request, records the
  // refusal and returns it. Seqs that are themselves the problem (taken,
  // lost, too far ahead) are not taken.
  absl::Status RefuseSpec(Executor& executor, const OpSpec& spec, int64_t count,
                          absl::Status reason) {
    // A refused request's seq may be anything (one over max_seq is refused
    // for that): a range that would not fit in an int64 is not taken.
    if (spec.seq < 0 || count < 1 ||
        spec.seq > std::numeric_limits<int64_t>::max() - count) {
      return reason;
    }
    (void)executor.Release(spec.seq, spec.seq + count,
                           absl::AlreadyExistsError(absl::StrCat(
                               "seq ", spec.seq, " of group ", spec.group,
                               " was taken by a refused request (",
                               reason.message(), "); reserve a new one")));
    flight_.Record(FlightEntry{spec, DType::kFloat32, 0, nullptr, -1, reason});
    if (config_.on_op_done) {
      OpRecord record;
      record.spec = spec;
      record.state = WorkState::kFailed;
      record.status = reason;
      config_.on_op_done(record);
    }
    return reason;
  }

  // Bookkeeping of accepted work: the flight recorder, the async table, and
  // the completion callback (metrics) per op.
  void Accepted(const std::shared_ptr<Work>& work,
                std::vector<FlightEntry> entries) {
    if (work->spec().async) Remember(work);
    if (config_.on_op_done) {
      // The work runs its own callbacks, so it is alive then.
      Work* raw = work.get();
      work->OnDone([this, raw, entries] {
        for (FlightEntry entry : entries) {
          entry.work = std::shared_ptr<Work>(std::shared_ptr<Work>(), raw);
          config_.on_op_done(FlightRecorder::ToRecord(entry));
        }
      });
    }
    for (FlightEntry& entry : entries) flight_.Record(std::move(entry));
  }

  // Runs the waiters whose generation has come (all of them, failed, once
  // shut down). Never under mutex_: `ready` submits work.
  void ReleaseGenerationWaiters() {
    std::vector<std::pair<std::shared_ptr<GenerationWaiter>, absl::Status>> due;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::erase_if(waiters_, [&](const std::shared_ptr<GenerationWaiter>& w) {
        if (!shutdown_ && generation_ < w->generation) return false;
        w->fired = true;
        due.emplace_back(
            w, shutdown_ ? absl::CancelledError("the worker is shutting down")
                         : absl::OkStatus());
        return true;
      });
    }
    for (auto& [waiter, status] : due) {
      timers_.Cancel(waiter->timer);
      waiter->ready(status);
    }
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
  FlightRecorder flight_;

  mutable std::mutex mutex_;
  bool shutdown_ = false;
  int rank_ = 0;
  int world_size_ = 0;
  int64_t generation_ = 0;
  std::shared_ptr<Executor> world_;
  // The KV store of the current generation (FormWorld's), for the arrival
  // check of subgroups.
  KvStore* kv_ = nullptr;
  std::map<std::string, GroupEntry> groups_;
  // Stop the executors of replaced generations (see FormWorld).
  struct Reaper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Reaper> reapers_;
  std::vector<std::shared_ptr<GenerationWaiter>> waiters_;
  std::optional<std::chrono::system_clock::time_point> reforming_since_;
  // FormWorld's thread only: whether this re-form shrinks the old world's
  // communicator, and that world's executor meanwhile.
  bool shrinking_ = false;
  std::shared_ptr<Executor> shrunk_world_;
  int64_t forming_generation_ = 0;
  TimerQueue timers_;

  std::atomic<int64_t> next_work_id_{1};
  std::mutex works_mutex_;
  std::map<int64_t, std::shared_ptr<Work>> works_;
  // Last member: its thread stops (after finishing queued work) before the
  // store and the rest go.
  HostWorkQueue host_work_;
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
