// WorkerCoreImpl's generations and groups: forming each generation's world
// communicator (shrunk where the backend can), re-creating the subgroups
// after a re-form, making subgroups, and requests waiting for a generation
// this worker has not reached, the communicators' health and shutdown.
// The class is in worker_core_impl.h.
#include "common/unique_id_plan.h"
#include "server/core/fill.h"
#include "server/core/worker_core_impl.h"

namespace ccl {
namespace worker_core_internal {

absl::Status WorkerCoreImpl::FormWorld(int rank, int world_size,
                                       int64_t generation, KvStore& store,
                                       const ShrinkInfo& shrink) {
  absl::Status built = BuildWorld(rank, world_size, generation, store, shrink);
  std::lock_guard<std::mutex> lock(mutex_);
  last_form_failure_ = built.ok()
                           ? std::string()
                           : absl::StrCat("forming generation ", generation,
                                          " failed: ", built.ToString());
  return built;
}

absl::Status WorkerCoreImpl::BuildWorld(int rank, int world_size,
                                        int64_t generation, KvStore& store,
                                        const ShrinkInfo& shrink) {
  if (world_size < 1 || rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in a world of size ", world_size));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutdown_) {
      return absl::FailedPreconditionError("the worker is shut down");
    }
    if (!reforming_since_) reforming_since_ = std::chrono::system_clock::now();
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
      // Subgroups before the world, whose communicator they were split
      // from (children before their parent, as everywhere else here).
      for (auto& [name, group] : groups_) {
        if (group.executor) previous.push_back(group.executor);
      }
      if (world_) {
        shrunk_world_ = shrinking_ ? world_ : nullptr;
        if (!shrinking_) previous.push_back(world_);
      }
    }
    const absl::Status replaced = absl::AbortedError(
        absl::StrCat("the world is re-forming into generation ", generation));
    for (auto& executor : previous) executor->communicator().Abort(replaced);
  }
  // "gen<G>/" + kWorldGroup: where the coordinator looks for the NCCL ids it
  // hands to the registrations that ask for them.
  const std::string prefix = nccl::WorldPrefix(generation);
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
  std::set<std::string> dropped;
  auto recreated =
      RecreateGroups(*comm, generation, rank, world_size, store, &dropped);
  if (!recreated.ok()) {
    comm->Abort(recreated.status());
    return recreated.status();
  }
  std::vector<int> world_ranks(static_cast<size_t>(world_size));
  std::iota(world_ranks.begin(), world_ranks.end(), 0);
  auto executor = std::make_shared<Executor>(
      kWorldGroup, rank, std::move(comm), config_.seq_gap_timeout,
      ArrivalCheck(&store, kWorldGroup, rank, std::move(world_ranks)),
      config_.busy_poll, BreakListenerOf(generation),
      GapWatchOf(generation, kWorldGroup));
  std::shared_ptr<Executor> old;
  std::map<std::string, GroupEntry> old_groups;
  std::vector<std::shared_ptr<Executor>> destroyed;
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
    // Destroyed here while the groups were being pooled: gone here, as the
    // destroy said; the client's destroy reaches the other ranks on its own.
    destroyed_here_.ForEach([&](const std::string& name) {
      auto it = groups_.find(name);
      if (it == groups_.end()) return;
      if (it->second.executor) destroyed.push_back(it->second.executor);
      groups_.erase(it);
    });
    destroyed_here_.Clear();
    dropped_at_reform_ = std::move(dropped);
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
  ReapLocked([old = std::move(old), old_groups = std::move(old_groups),
              destroyed = std::move(destroyed), replaced]() mutable {
    // Subgroups first: their communicators may be children of the world's.
    for (auto& [name, group] : old_groups) {
      if (group.executor) group.executor->Stop(replaced);
    }
    for (auto& executor : destroyed) executor->Stop(replaced);
    destroyed.clear();
    if (old) old->Stop(replaced);
    old_groups.clear();
    old.reset();
  });
  return absl::OkStatus();
}

void WorkerCoreImpl::ReapLocked(std::function<void()> stop) {
  std::erase_if(reapers_, [](Reaper& reaper) {
    if (!reaper.done->load()) return false;
    reaper.thread.join();
    return true;
  });
  auto done = std::make_shared<std::atomic<bool>>(false);
  reapers_.push_back({std::thread([stop = std::move(stop), done]() mutable {
                        stop();
                        stop = nullptr;  // what it held goes on this thread
                        done->store(true);
                      }),
                      done});
}

absl::Status WorkerCoreImpl::DestroyGroup(const std::string& name) {
  if (name == kWorldGroup) {
    return absl::InvalidArgumentError(
        "the world group cannot be destroyed; stop the workers instead");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = groups_.find(name);
  if (it == groups_.end()) {
    // Another rank's destroy reached it first and the re-form in between
    // dropped it everywhere (RecreateGroups): this destroy's work is done.
    if (dropped_at_reform_.erase(name) > 0) return absl::OkStatus();
    return absl::NotFoundError(
        absl::StrCat("no group named '", name, "' on this worker"));
  }
  if (it->second.creating) {
    return absl::FailedPreconditionError(
        absl::StrCat("group '", name,
                     "' is still being created here; destroy it once its "
                     "creation has answered"));
  }
  std::shared_ptr<Executor> executor = std::move(it->second.executor);
  groups_.erase(it);
  destroyed_here_.Add(name);
  // The group's ops already queued here still run (Executor::Drain says
  // why), then its executor stops; all on the side, as at a re-form, since
  // an op inside the backend ends only at its completion or timeout. New
  // ops cannot reach it: the name is gone.
  if (executor) {
    std::erase_if(draining_,
                  [](const std::weak_ptr<Executor>& e) { return e.expired(); });
    draining_.push_back(executor);
    ReapLocked([executor = std::move(executor), name]() mutable {
      executor->Drain();
      // What is still queued now: the drain's bound passed (a seq that
      // never came, an op that hung) or the worker is shutting down.
      executor->Stop(absl::AbortedError(
          absl::StrCat("group '", name, "' was destroyed before the op ran")));
      executor.reset();
    });
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Work>> WorkerCoreImpl::CreateGroup(
    const std::string& name, std::vector<int> ranks, int64_t world_seq,
    int64_t world_generation, std::chrono::milliseconds timeout) {
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
      // Made again: no longer one this rank destroyed.
      destroyed_here_.Remove(name);
      dropped_at_reform_.erase(name);
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
  // The world seq keeps the backend's rendezvous keys apart from those of
  // an earlier group of this name in the generation (destroyed, or failed
  // to form): stale peer addresses would be read back otherwise.
  auto make = [ranks, key = absl::StrCat(name, "@", world_seq)](
                  Communicator& parent, std::chrono::milliseconds budget)
      -> absl::StatusOr<std::shared_ptr<Communicator>> {
    auto child = parent.Split(ranks, key, budget);
    if (!child.ok()) return child.status();
    return std::shared_ptr<Communicator>(*std::move(child));
  };
  auto done =
      [this, name, position, generation,
       kv](absl::StatusOr<std::shared_ptr<Communicator>> comm) -> absl::Status {
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
          ArrivalCheck(kv, name, position, entry.ranks), config_.busy_poll,
          BreakListenerOf(generation), GapWatchOf(generation, name));
    }
    return absl::OkStatus();
  };
  const int64_t id = next_work_id_.fetch_add(1);
  auto task = std::make_shared<GroupTask>(id, name, world_seq, timeout,
                                          kArrivalCheckTime, std::move(make),
                                          std::move(done));
  if (absl::Status s = world->Enqueue(task); !s.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (generation_ == generation) groups_.erase(name);
    return s;
  }
  return std::shared_ptr<Work>(task);
}

std::vector<GroupInfo> WorkerCoreImpl::Groups() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GroupInfo> groups;
  if (!world_) return groups;
  GroupInfo info;
  info.name = world_->group();
  info.ranks.resize(static_cast<size_t>(world_size_));
  std::iota(info.ranks.begin(), info.ranks.end(), 0);
  info.group_rank = rank_;
  info.next_seq = world_->next_seq();
  info.finished_below = world_->finished_below();
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
      group.finished_below = entry.executor->finished_below();
      group.backend = entry.executor->communicator().name();
      group.state = entry.executor->state();
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

void WorkerCoreImpl::AwaitGeneration(int64_t generation,
                                     std::chrono::milliseconds timeout,
                                     std::function<void(absl::Status)> ready) {
  auto waiter = std::make_shared<GenerationWaiter>();
  waiter->generation = generation;
  waiter->ready = std::move(ready);
  bool now = false;
  bool stopped = false;
  std::string beyond;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // After Shutdown nobody releases a waiter: answer at once.
    stopped = shutdown_;
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
    } else if (!now && !stopped) {
      waiters_.push_back(waiter);
      waiter->timer = timers_.ScheduleAfter(timeout, [this, waiter, timeout] {
        GenerationTimedOut(waiter, timeout);
      });
    }
  }
  if (stopped) {
    waiter->ready(absl::CancelledError("the worker is shutting down"));
  } else if (!beyond.empty()) {
    waiter->ready(absl::FailedPreconditionError(beyond));
  } else if (now) {
    waiter->ready(absl::OkStatus());
  }
}

void WorkerCoreImpl::GenerationTimedOut(
    const std::shared_ptr<GenerationWaiter>& waiter,
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
      if (!last_form_failure_.empty()) {
        absl::StrAppend(&why, "; on this worker ", last_form_failure_);
      }
    }
    waiter->ready(absl::DeadlineExceededError(why));
  }
}

void WorkerCoreImpl::AllocAsync(
    const TensorMeta& spec, const Fill& fill, const RankView& view,
    std::chrono::milliseconds wait,
    std::function<void(absl::StatusOr<TensorMeta>)> done) {
  if (!DependsOnRank(fill)) {
    host_work_.Post([this, spec, fill, done = std::move(done)] {
      done(Alloc(spec, fill));
    });
    return;
  }
  int64_t generation = view.generation;
  if (generation == 0) {
    // The caller had no view of the world: the rank this worker will have
    // once its world (the first, or the one it is re-forming into) formed.
    std::lock_guard<std::mutex> lock(mutex_);
    generation = !world_            ? std::max<int64_t>(1, forming_generation_)
                 : reforming_since_ ? forming_generation_
                                    : generation_;
  }
  AwaitGeneration(
      generation, wait,
      [this, spec, fill, view, done = std::move(done)](absl::Status ready) {
        if (!ready.ok()) {
          return done(absl::Status(
              ready.code(),
              absl::StrCat("tensor '", spec.name,
                           "' is filled with this worker's rank, which it "
                           "does not know yet: ",
                           ready.message())));
        }
        host_work_.Post([this, spec, fill, view, done = std::move(done)] {
          int rank = 0;
          int64_t generation = 0;
          {
            std::lock_guard<std::mutex> lock(mutex_);
            rank = rank_;
            generation = generation_;
          }
          if (view.rank >= 0 && view.rank != rank) {
            return done(absl::FailedPreconditionError(absl::StrCat(
                "tensor '", spec.name,
                "' is filled with the rank, and this "
                "worker is rank ",
                rank, " in generation ", generation, ", not rank ", view.rank,
                " as the request addressed it (in "
                "generation ",
                view.generation,
                "): the world changed; look "
                "it up again (ccctl status) and repeat the request")));
          }
          done(store_.Alloc(spec, fill, rank));
        });
      });
}

absl::StatusOr<std::map<std::string, WorkerCoreImpl::GroupEntry>>
WorkerCoreImpl::RecreateGroups(Communicator& world, int64_t generation,
                               int rank, int world_size, KvStore& kv,
                               std::set<std::string>* dropped) {
  // "name=r0,r1,...;" for each group held, "!name;" for each destroyed.
  std::string mine;
  std::set<std::string> held;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (world_size_ == world_size) {
      for (const auto& [name, entry] : groups_) {
        if (entry.creating) continue;
        held.insert(name);
        absl::StrAppend(&mine, name, "=", absl::StrJoin(entry.ranks, ","), ";");
      }
      destroyed_here_.ForEach([&](const std::string& name) {
        absl::StrAppend(&mine, "!", name, ";");
      });
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
  CCL_RETURN_IF_ERROR(
      world.AllGatherHost(padded.data(), all.data(), padded.size(), deadline));
  // Every rank builds the same map: definitions by name, the lowest
  // rank's where two differ.
  std::map<std::string, std::vector<int>> definitions;
  std::set<std::string> destroyed;
  for (size_t r = 0; r < n; ++r) {
    const std::string text = all.substr(r * longest, lengths[r]);
    for (absl::string_view item :
         absl::StrSplit(text, ';', absl::SkipEmpty())) {
      if (absl::ConsumePrefix(&item, "!")) {
        destroyed.emplace(item);
        continue;
      }
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
  for (const std::string& name : destroyed) {
    if (definitions.erase(name) > 0 && held.count(name) > 0) {
      dropped->insert(name);
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
          ArrivalCheck(&kv, name, entry.group_rank, ranks), config_.busy_poll,
          BreakListenerOf(generation), GapWatchOf(generation, name));
    }
  }
  return groups;
}

void WorkerCoreImpl::Shutdown() {
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
    // Destroyed groups' queued ops are cancelled now, not waited for.
    for (auto& weak : draining_) {
      if (auto executor = weak.lock()) executor->CancelDrain();
    }
    draining_.clear();
  }
  for (auto& reaper : reapers) reaper.thread.join();
  store_.Clear();
}

absl::Status WorkerCoreImpl::CommunicatorHealth() const {
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

bool WorkerCoreImpl::SettlingAfterBreak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto settling = [](Executor& executor) {
    return !executor.communicator().Health().ok() && executor.settling();
  };
  if (world_ && settling(*world_)) return true;
  for (const auto& [name, group] : groups_) {
    if (group.executor && settling(*group.executor)) return true;
  }
  return false;
}

void WorkerCoreImpl::ReleaseGenerationWaiters() {
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

}  // namespace worker_core_internal
}  // namespace ccl
