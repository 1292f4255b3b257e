// WorkerCoreImpl's admission: how a sequenced request becomes work in its
// group's executor (or a refusal that still takes its seqs). Every kind of
// work is resolved, then admitted (Admit: its tensors held, queued,
// recorded); a request for a generation this worker has not reached waits
// for it (the *InGeneration entries). The class is in worker_core_impl.h.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/core/resolve.h"
#include "server/core/worker_core_impl.h"

namespace ccl {
namespace worker_core_internal {
template <typename WorkTask>  // a Work and an ExecutorTask
absl::Status WorkerCoreImpl::Admit(
    Executor& executor, const std::shared_ptr<WorkTask>& work,
    const std::vector<std::shared_ptr<Tensor>>& tensors,
    const std::string& holder,
    const std::function<absl::Status(absl::Status)>& refuse_held,
    const std::function<void(absl::Status)>& record) {
  if (absl::Status held = store_.Hold(tensors, work->id(), holder);
      !held.ok()) {
    return refuse_held(std::move(held));
  }
  absl::Status queued = executor.Enqueue(work);
  if (!queued.ok()) store_.Release(tensors, work->id());
  record(queued);
  return queued;
}

template <typename T>
void WorkerCoreImpl::InGeneration(
    SeqStamp stamp, std::chrono::milliseconds wait, Done<T> done,
    std::function<absl::StatusOr<std::shared_ptr<T>>()> start) {
  if (stamp.generation <= generation()) return done(start());
  if (wait.count() <= 0) wait = config_.default_op_timeout;
  const int64_t awaited = stamp.generation;  // before the lambda takes stamp
  AwaitGeneration(awaited, wait,
                  [this, stamp = std::move(stamp), done = std::move(done),
                   start = std::move(start)](absl::Status ready) {
                    if (!ready.ok()) {
                      return done(Refuse(stamp.group, stamp.seq, stamp.count,
                                         stamp.generation, std::move(ready)));
                    }
                    done(start());
                  });
}

absl::StatusOr<std::shared_ptr<Work>> WorkerCoreImpl::Submit(
    const OpSpec& spec) {
  OpSpec normalized = spec;
  std::shared_ptr<Executor> executor;
  CCL_ASSIGN_OR_RETURN(executor, FindSequenced(normalized, 1));
  auto resolved = Resolve(normalized, executor->communicator(), store_,
                          config_.default_op_timeout);
  if (!resolved.ok()) {
    return RefuseInStep(*executor, normalized, 1, {normalized},
                        resolved.status());
  }
  auto work =
      std::make_shared<OpWork>(next_work_id_.fetch_add(1), normalized,
                               resolved->op, resolved->tensors, &store_);
  FlightEntry entry{normalized, resolved->op.dtype, resolved->op.count, work};
  CCL_RETURN_IF_ERROR(Admit(
      *executor, work, resolved->tensors, work->Describe(),
      [&](absl::Status why) {
        return RefuseInStep(*executor, normalized, 1, {normalized},
                            std::move(why));
      },
      [&](absl::Status queued) {
        if (queued.ok()) return Accepted(work, std::move(entry));
        entry.refused = std::move(queued);
        flight_.Record(std::move(entry));
      }));
  return std::shared_ptr<Work>(work);
}

absl::StatusOr<std::shared_ptr<PlanWork>> WorkerCoreImpl::SubmitPlan(
    PlanSpec plan) {
  OpSpec whole;
  whole.group = plan.group;
  whole.seq = plan.seq;
  whole.kind = OpKind::kNop;
  whole.generation = plan.generation;
  whole.input = absl::StrCat("plan of ", plan.ops.size(), " ops");
  std::shared_ptr<Executor> executor;
  CCL_ASSIGN_OR_RETURN(
      executor,
      FindSequenced(
          whole, std::max<int64_t>(1, static_cast<int64_t>(plan.ops.size()))));
  const int64_t count = static_cast<int64_t>(plan.ops.size());
  if (count == 0) {
    return absl::InvalidArgumentError("a plan needs at least one op");
  }
  std::vector<OpSpec> specs = std::move(plan.ops);
  for (int64_t i = 0; i < count; ++i) {
    OpSpec& spec = specs[static_cast<size_t>(i)];
    spec.group = whole.group;
    spec.seq = plan.seq + i;
    spec.generation = plan.generation;
    spec.async = false;
  }
  std::vector<BoundOp> ops;
  ops.reserve(static_cast<size_t>(count));
  std::vector<std::shared_ptr<Tensor>> tensors;
  for (int64_t i = 0; i < count; ++i) {
    const OpSpec& spec = specs[static_cast<size_t>(i)];
    auto resolved = Resolve(spec, executor->communicator(), store_,
                            config_.default_op_timeout);
    if (!resolved.ok()) {
      const absl::Status why(resolved.status().code(),
                             absl::StrCat("op ", i, " of the plan: ",
                                          resolved.status().message()));
      return RefuseInStep(*executor, whole, count, specs, why);
    }
    for (auto& tensor : resolved->tensors) {
      if (std::find(tensors.begin(), tensors.end(), tensor) == tensors.end()) {
        tensors.push_back(tensor);
      }
    }
    ops.push_back(resolved->op);
  }
  auto work = std::make_shared<PlanWork>(next_work_id_.fetch_add(1), whole,
                                         std::move(specs), std::move(ops),
                                         plan.aggregate, tensors, &store_);
  CCL_RETURN_IF_ERROR(Admit(
      *executor, work, tensors, work->Describe(),
      [&](absl::Status why) {
        return RefuseInStep(*executor, whole, count, work->op_specs(),
                            std::move(why));
      },
      [&](const absl::Status& queued) {
        if (queued.ok()) return AcceptedPlan(work);
        flight_.RecordPlan(work, queued);
      }));
  return work;
}

absl::StatusOr<std::shared_ptr<BenchWork>> WorkerCoreImpl::Bench(
    const OpSpec& spec, const BenchOptions& options) {
  OpSpec normalized = spec;
  std::shared_ptr<Executor> executor;
  CCL_ASSIGN_OR_RETURN(executor, FindSequenced(normalized, 1));
  auto refuse = [&](absl::Status why) {
    return RefuseSpec(*executor, normalized, 1, std::move(why));
  };
  if (options.warmup < 0 || options.iters < 0 || options.graph_launches < 0) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        "bench needs warmup, iters and graph launches >= 0, got ",
        options.warmup, ", ", options.iters, " and ", options.graph_launches)));
  }
  // Refused for this rank's own tensors: stood in for, as an op is
  // (RefuseInStep). A bench's first checkpoint exchanges whether or not
  // it skips the agreement, so its stand-in always takes part.
  auto refuse_in_step = [&](absl::Status why) {
    OpSpec checked = normalized;
    checked.agree = true;
    return RefuseInStep(*executor, normalized, 1, {checked}, std::move(why));
  };
  auto resolved = Resolve(normalized, executor->communicator(), store_,
                          config_.default_op_timeout);
  if (!resolved.ok()) return refuse_in_step(resolved.status());
  auto work = std::make_shared<BenchWork>(next_work_id_.fetch_add(1),
                                          normalized, resolved->op,
                                          resolved->tensors, options, &store_);
  // A bench is no op of the group's: no async handle, no ops-done record.
  FlightEntry entry{normalized, resolved->op.dtype, resolved->op.count, work};
  CCL_RETURN_IF_ERROR(Admit(*executor, work, resolved->tensors,
                            absl::StrCat("bench of ", work->Describe()),
                            refuse_in_step, [&](absl::Status queued) {
                              entry.refused = std::move(queued);
                              flight_.Record(std::move(entry));
                            }));
  return work;
}

absl::Status WorkerCoreImpl::Refuse(const std::string& group, int64_t seq,
                                    int64_t count, int64_t generation,
                                    absl::Status reason) {
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

void WorkerCoreImpl::SubmitInGeneration(OpSpec spec,
                                        std::chrono::milliseconds wait,
                                        Done<Work> done) {
  SeqStamp stamp{spec.generation, spec.group, spec.seq, 1};
  InGeneration<Work>(std::move(stamp), wait, std::move(done),
                     [this, spec = std::move(spec)] { return Submit(spec); });
}

void WorkerCoreImpl::SubmitPlanInGeneration(PlanSpec plan,
                                            std::chrono::milliseconds wait,
                                            Done<PlanWork> done) {
  SeqStamp stamp{plan.generation, plan.group, plan.seq,
                 std::max<int64_t>(1, static_cast<int64_t>(plan.ops.size()))};
  InGeneration<PlanWork>(std::move(stamp), wait, std::move(done),
                         [this, plan = std::move(plan)]() mutable {
                           return SubmitPlan(std::move(plan));
                         });
}

void WorkerCoreImpl::BenchInGeneration(OpSpec spec, BenchOptions options,
                                       std::chrono::milliseconds wait,
                                       Done<BenchWork> done) {
  SeqStamp stamp{spec.generation, spec.group, spec.seq, 1};
  InGeneration<BenchWork>(
      std::move(stamp), wait, std::move(done),
      [this, spec = std::move(spec), options] { return Bench(spec, options); });
}

void WorkerCoreImpl::CreateGroupInGeneration(
    std::string name, std::vector<int> ranks, int64_t world_seq,
    int64_t generation, std::chrono::milliseconds timeout,
    std::chrono::milliseconds wait, Done<Work> done) {
  InGeneration<Work>(SeqStamp{generation, kWorldGroup, world_seq, 1}, wait,
                     std::move(done),
                     [this, name = std::move(name), ranks = std::move(ranks),
                      world_seq, generation, timeout]() mutable {
                       return CreateGroup(name, std::move(ranks), world_seq,
                                          generation, timeout);
                     });
}

absl::StatusOr<std::shared_ptr<Executor>> WorkerCoreImpl::FindGroup(
    OpSpec& spec) const {
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

bool WorkerCoreImpl::GenerationTakesSeqs(int64_t generation) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return generation <= 0 || generation >= generation_;
}

absl::StatusOr<std::shared_ptr<Executor>> WorkerCoreImpl::FindSequenced(
    OpSpec& spec, int64_t count) {
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

absl::Status WorkerCoreImpl::RefuseSpec(Executor& executor, const OpSpec& spec,
                                        int64_t count, absl::Status reason) {
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
  return RecordRefusal(spec, std::move(reason));
}

absl::Status WorkerCoreImpl::RefuseInStep(Executor& executor,
                                          const OpSpec& spec, int64_t count,
                                          const std::vector<OpSpec>& specs,
                                          absl::Status reason) {
  std::optional<std::vector<BoundOp>> stand_ins = RefusalStandIns(
      specs, executor.communicator(), config_.default_op_timeout);
  if (!stand_ins || stand_ins->empty() ||
      spec.seq > std::numeric_limits<int64_t>::max() - count) {
    return RefuseSpec(executor, spec, count, std::move(reason));
  }
  // Refused by the executor: the seqs themselves are the problem (taken,
  // lost, too far ahead), and they are not this request's to take.
  (void)executor.Enqueue(
      std::make_shared<RefusedTask>(spec.seq, count, *std::move(stand_ins)));
  return RecordRefusal(spec, std::move(reason));
}

absl::Status WorkerCoreImpl::RecordRefusal(const OpSpec& spec,
                                           absl::Status reason) {
  flight_.Record(FlightEntry{spec, DType::kFloat32, 0, nullptr, -1, reason});
  if (config_.on_ops_done) {
    OpRecord record;
    record.spec = spec;
    record.state = WorkState::kFailed;
    record.status = reason;
    config_.on_ops_done({&record, 1});
  }
  return reason;
}

void WorkerCoreImpl::Accepted(const std::shared_ptr<Work>& work,
                              FlightEntry entry) {
  if (work->spec().async) Remember(work);
  if (config_.on_ops_done) {
    // The work runs its own callbacks, so it is alive then. Its copy of the
    // entry holds the work by pointer only: the work holds this callback.
    Work* raw = work.get();
    FlightEntry done = entry;
    done.work.reset();
    work->OnDone([this, raw, done = std::move(done)] {
      const OpRecord record = FlightRecorder::ToRecord(done, raw);
      config_.on_ops_done({&record, 1});
    });
  }
  flight_.Record(std::move(entry));
}

void WorkerCoreImpl::AcceptedPlan(const std::shared_ptr<PlanWork>& work) {
  if (config_.on_ops_done) {
    // The work runs its own callbacks, so it is alive then; it holds this
    // callback, so the callback holds it by pointer only.
    PlanWork* raw = work.get();
    work->OnDone([this, raw] {
      // In batches: one vector of a whole plan's records would be a large
      // allocation (fresh pages) per plan.
      constexpr size_t kBatch = 256;
      const size_t count = raw->op_specs().size();
      std::vector<OpRecord> records;
      records.reserve(std::min(count, kBatch));
      for (size_t i = 0; i < count; ++i) {
        records.push_back(FlightRecorder::ToRecord(*raw, i));
        if (records.size() == kBatch || i + 1 == count) {
          config_.on_ops_done(records);
          records.clear();
        }
      }
    });
  }
  flight_.RecordPlan(work, absl::OkStatus());
}

absl::Status WorkerCoreImpl::ReleaseSequence(const std::string& group,
                                             int64_t generation, int64_t begin,
                                             int64_t end) {
  OpSpec spec;
  spec.group = group;
  spec.seq = begin;
  spec.generation = generation;
  std::shared_ptr<Executor> executor;
  CCL_ASSIGN_OR_RETURN(executor, FindGroup(spec));
  if (begin < 0 || end < begin) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot release seqs [", begin, ", ", end, ") of group ", spec.group));
  }
  return executor->Release(
      begin, end,
      absl::FailedPreconditionError(
          absl::StrCat("seqs ", begin, "..", end - 1, " of group ", spec.group,
                       " were released by the client that reserved them")));
}

std::string WorkerCoreImpl::WhyQueued(const std::string& group, int64_t seq) {
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

absl::StatusOr<std::pair<int64_t, std::vector<OpRecord>>> WorkerCoreImpl::OpLog(
    const std::string& group, int limit) const {
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

void WorkerCoreImpl::Remember(const std::shared_ptr<Work>& work) {
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

}  // namespace worker_core_internal
}  // namespace ccl
