// WorkerCoreImpl, the WorkerCore behind WorkerCore::Create: its class, shared
// by worker_core.cc (tensors, ops, plans, benches, the work table) and
// worker_world.cc (generations, the world communicator, subgroups, waits for
// a generation). Internal to server/core/; include it nowhere else.
//
// It runs over a TensorStore, one world communicator (Gloo on cpu, NCCL on
// cuda) and its Executor, plus the subgroups made from it. Submit validates
// and resolves everything on the caller's thread (never blocking), then
// hands bound work to the group's executor.
#pragma once

#include <algorithm>
#include <atomic>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
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
#include "server/core/worker_core.h"
#include "spdlog/spdlog.h"

namespace ccl {
namespace worker_core_internal {

// Completed async works beyond this many are dropped oldest first, so a
// client that never waits cannot grow the table without bound.
constexpr size_t kMaxRememberedWorks = 1 << 16;
// Flight recorder entries kept per group.
constexpr size_t kFlightRecords = 256;
// Destroys remembered for the next re-form when --max-groups is unlimited.
constexpr size_t kDefaultRememberedDestroys = 4096;

// The names of groups destroyed on this rank since its groups were last
// pooled at a re-form (RecreateGroups), the newest `limit` of them. A name
// matters only while another rank still holds that group (a client's
// destroy that reached some ranks and not yet the others); without a re-form
// a world that makes and destroys groups all day would otherwise keep every
// name it ever destroyed. Forgetting the oldest costs at most this: such a
// half-destroyed group, if a re-form comes after `limit` newer destroys here,
// is made again everywhere, a live group the client can destroy again.
class DestroyedNames {
 public:
  explicit DestroyedNames(size_t limit) : limit_(limit) {}

  void Add(const std::string& name) {
    Remove(name);
    order_of_[name] = next_;
    by_order_[next_++] = name;
    while (by_order_.size() > limit_) {
      order_of_.erase(by_order_.begin()->second);
      by_order_.erase(by_order_.begin());
    }
  }
  void Remove(const std::string& name) {
    auto it = order_of_.find(name);
    if (it == order_of_.end()) return;
    by_order_.erase(it->second);
    order_of_.erase(it);
  }
  void Clear() {
    order_of_.clear();
    by_order_.clear();
  }
  // Oldest first.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [order, name] : by_order_) fn(name);
  }

 private:
  size_t limit_;
  uint64_t next_ = 0;
  std::map<std::string, uint64_t> order_of_;
  std::map<uint64_t, std::string> by_order_;
};

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
        flight_(kFlightRecords),
        destroyed_here_(config_.max_groups > 0
                            ? static_cast<size_t>(config_.max_groups)
                            : kDefaultRememberedDestroys) {}
  ~WorkerCoreImpl() override { Shutdown(); }

  absl::Status FormWorld(int rank, int world_size, int64_t generation,
                         KvStore& store, const ShrinkInfo& shrink) override;
  // FormWorld's work; FormWorld keeps what went wrong for the requests
  // still waiting for a generation.
  absl::Status BuildWorld(int rank, int world_size, int64_t generation,
                          KvStore& store, const ShrinkInfo& shrink);

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
  int64_t known_generation() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::max(generation_, forming_generation_);
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
      const TensorMeta& spec, const Fill& fill, const RankView& view,
      std::chrono::milliseconds wait,
      std::function<void(absl::StatusOr<TensorMeta>)> done) override;
  void SummarizeAsync(
      const std::string& name, int64_t head,
      std::function<void(absl::StatusOr<TensorSummary>)> done) override {
    host_work_.Post([this, name, head, done = std::move(done)] {
      done(Summarize(name, head));
    });
  }

  absl::StatusOr<std::shared_ptr<Work>> Submit(const OpSpec& spec) override;

  absl::StatusOr<std::shared_ptr<PlanWork>> SubmitPlan(PlanSpec plan) override;

  absl::StatusOr<std::shared_ptr<BenchWork>> Bench(
      const OpSpec& spec, const BenchOptions& options) override;

  absl::Status Refuse(const std::string& group, int64_t seq, int64_t count,
                      int64_t generation, absl::Status reason) override;

  absl::Status ReleaseSequence(const std::string& group, int64_t generation,
                               int64_t begin, int64_t end) override;

  absl::StatusOr<std::pair<int64_t, std::vector<OpRecord>>> OpLog(
      const std::string& group, int limit) const override;

  std::string WhyQueued(const std::string& group, int64_t seq) override;

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
      int64_t world_generation, std::chrono::milliseconds timeout) override;

  absl::Status DestroyGroup(const std::string& name) override;

  std::vector<GroupInfo> Groups() const override;

  void Shutdown() override;

  void SubmitInGeneration(OpSpec spec, std::chrono::milliseconds wait,
                          Done<Work> done) override;
  void SubmitPlanInGeneration(PlanSpec plan, std::chrono::milliseconds wait,
                              Done<PlanWork> done) override;
  void BenchInGeneration(OpSpec spec, BenchOptions options,
                         std::chrono::milliseconds wait,
                         Done<BenchWork> done) override;
  void CreateGroupInGeneration(std::string name, std::vector<int> ranks,
                               int64_t world_seq, int64_t generation,
                               std::chrono::milliseconds timeout,
                               std::chrono::milliseconds wait,
                               Done<Work> done) override;

  // Runs `ready` once this worker is in generation `generation` or later:
  // at once if it already is, else when FormWorld gets there. After
  // `timeout`, DEADLINE_EXCEEDED saying the world is re-forming and since
  // when; a generation more than one past the latest this worker knows of
  // fails at once with FAILED_PRECONDITION. `ready` runs on the thread that
  // forms the world or on a timer thread and must not block.
  void AwaitGeneration(int64_t generation, std::chrono::milliseconds timeout,
                       std::function<void(absl::Status)> ready);

  // Where a sequenced request stands: its generation and its seqs
  // [seq, seq + count) of `group`.
  struct SeqStamp {
    int64_t generation = 0;
    std::string group;
    int64_t seq = 0;
    int64_t count = 1;
  };
  // The *InGeneration entries' one path: `start` once in the stamp's
  // generation, or the stamp's seqs refused with why it did not come.
  template <typename T>
  void InGeneration(SeqStamp stamp, std::chrono::milliseconds wait,
                    Done<T> done,
                    std::function<absl::StatusOr<std::shared_ptr<T>>()> start);

  void GenerationTimedOut(const std::shared_ptr<GenerationWaiter>& waiter,
                          std::chrono::milliseconds timeout);

  absl::Status CommunicatorHealth() const override;

  bool SettlingAfterBreak() const override;

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
  //
  // A group destroyed on some ranks only when the re-form comes (the
  // client's destroy was still on its way to the others) stays destroyed:
  // each rank also names the groups it destroyed since the last re-form,
  // and a name any rank destroyed is made again by none. Otherwise the
  // ranks that still held it would bring it back on the ones whose destroy
  // had answered OK. `dropped`: the groups this rank held that the pool
  // drops that way, so that their late destroy here still answers OK.
  // What each executor of `generation` tells when it finds its
  // communicator broken (WorkerConfig::on_communicator_broken).
  Executor::GapWatch GapWatchOf(int64_t generation,
                                const std::string& group) const {
    if (!config_.on_sequence_gap) return nullptr;
    return [hook = config_.on_sequence_gap, generation, group](
               int64_t seq, Executor::SkipSeqs skip) {
      return hook(generation, group, seq, std::move(skip));
    };
  }
  Executor::BreakListener BreakListenerOf(int64_t generation) const {
    if (!config_.on_communicator_broken) return nullptr;
    return [hook = config_.on_communicator_broken,
            generation](const absl::Status& cause) { hook(generation, cause); };
  }
  absl::StatusOr<std::map<std::string, GroupEntry>> RecreateGroups(
      Communicator& world, int64_t generation, int rank, int world_size,
      KvStore& kv, std::set<std::string>* dropped);

  // Normalizes the group name and the generation (0: the current one) and
  // checks the generation.
  absl::StatusOr<std::shared_ptr<Executor>> FindGroup(OpSpec& spec) const;

  // Whether a sequenced request naming `generation` is one whose seqs this
  // worker takes when it refuses it. 0 and the current generation: yes. An
  // older one: no; its seqs were reserved in a generation that is over, and
  // the same numbers in the current one belong to other clients, which a
  // stale request must not take from them. A negative one (malformed) or
  // one this worker has not reached (the coordinator moved on and this
  // worker re-forms next, or the client made it up): yes, in the current
  // generation, whose seq the client most likely reserved; should the world
  // indeed be moving on, that generation's seqs are about to end anyway.
  bool GenerationTakesSeqs(int64_t generation) const;

  // FindGroup for a request that carries seqs [spec.seq, spec.seq + count):
  // one refused for its generation still takes them where
  // GenerationTakesSeqs says so, so the group's later ops do not wait out
  // the gap timeout.
  absl::StatusOr<std::shared_ptr<Executor>> FindSequenced(OpSpec& spec,
                                                          int64_t count);

  // Takes `count` seqs from `spec.seq` for a refused request, records the
  // refusal and returns it. Seqs that are themselves the problem (taken,
  // lost, too far ahead) are not taken.
  absl::Status RefuseSpec(Executor& executor, const OpSpec& spec, int64_t count,
                          absl::Status reason);

  // Refuses a request (one op, or a plan's `specs`, taking `count` seqs)
  // that is well formed but that this rank cannot run: its tensors are
  // missing, busy, of the wrong size or dtype. The other ranks may well have
  // accepted it (a restarted rank lost the tensor; another client holds it
  // here): this rank stands in for it at its seqs (RefusalStandIns), so they
  // fail it cleanly in its agreement, naming this rank, and the group goes
  // on. Given back instead, the seqs would put this rank ahead of them, and
  // the communicator would be aborted at the next op, failing every client's
  // ops until the world re-forms.
  absl::Status RefuseInStep(Executor& executor, const OpSpec& spec,
                            int64_t count, const std::vector<OpSpec>& specs,
                            absl::Status reason);

  // The flight recorder's and the metrics' record of a refused request.
  absl::Status RecordRefusal(const OpSpec& spec, absl::Status reason);

  // Bookkeeping of an accepted op: the flight recorder, the async table, and
  // the completion callback (metrics).
  // The one way in for every kind of work, once resolved: its tensors are
  // held for it, then it is queued. A hold refused goes to `refuse_held`
  // (the caller stands in for the work in its step, as for a resolve
  // refused); a queue refused releases the tensors again. `record` hears
  // the queue's answer either way (OK: accepted), so the flight recorder
  // sees every work that got this far once.
  template <typename WorkTask>  // a Work and an ExecutorTask
  absl::Status Admit(
      Executor& executor, const std::shared_ptr<WorkTask>& work,
      const std::vector<std::shared_ptr<Tensor>>& tensors,
      const std::string& holder,
      const std::function<absl::Status(absl::Status)>& refuse_held,
      const std::function<void(absl::Status)>& record);

  void Accepted(const std::shared_ptr<Work>& work, FlightEntry entry);

  // Accepted for a plan: every op reports its own record when the plan is
  // done, read from the plan itself (a plan of thousands of ops copies no
  // entries for it), and the recorder gets the ops it keeps.
  void AcceptedPlan(const std::shared_ptr<PlanWork>& work);

  // Runs the waiters whose generation has come (all of them, failed, once
  // shut down). Never under mutex_: `ready` submits work.
  void ReleaseGenerationWaiters();

  void Remember(const std::shared_ptr<Work>& work);

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
  // Groups destroyed on this rank since its groups were last pooled at a
  // re-form (RecreateGroups), and those the last pooling dropped because
  // another rank had destroyed them.
  DestroyedNames destroyed_here_;
  std::set<std::string> dropped_at_reform_;
  // Stop the executors of replaced generations (see FormWorld).
  struct Reaper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Reaper> reapers_;
  // Executors of destroyed groups letting their queued ops end
  // (DestroyGroup), so that Shutdown can cut that short.
  std::vector<std::weak_ptr<Executor>> draining_;
  // Runs `stop` on a reaper thread (joined by a later call or Shutdown),
  // and drops what it holds there. Under mutex_.
  void ReapLocked(std::function<void()> stop);
  std::vector<std::shared_ptr<GenerationWaiter>> waiters_;
  std::optional<std::chrono::system_clock::time_point> reforming_since_;
  // Why the last FormWorld failed, until one succeeds: a request that timed
  // out waiting for a generation says it (the cause of a world that keeps
  // re-forming, rather than only that it does).
  std::string last_form_failure_;
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

}  // namespace worker_core_internal
}  // namespace ccl
