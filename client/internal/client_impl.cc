#include "client/internal/client_impl.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/internal/convert.h"

namespace ccl::client {
namespace {

using std::chrono::milliseconds;

// A fresh channel's first RPC fails at once if its first connection attempt
// does (seen under load on loopback); connecting up front, with this bound,
// keeps that from failing an op while a worker that is gone still fails
// fast.
constexpr milliseconds kConnectBound(3000);
// How long the first reservation waits for the coordinator to hold the
// client's lease; past it the reservation is made without one.
constexpr milliseconds kLeaseOpenBound(2000);

bool IsPointToPoint(OpKind kind) {
  return kind == OpKind::kSend || kind == OpKind::kRecv;
}

}  // namespace

internal::ClientImpl::ClientImpl(
    ClientOptions options_in, std::unique_ptr<CoordinatorClient> coordinator_in,
    ChannelFactory channels_in, World world_in)
    : options(std::move(options_in)),
      coordinator(std::move(coordinator_in)),
      channels(std::move(channels_in)),
      world(std::move(world_in)) {
  SetGroup("world", AllRanks());
  if (options.op_streams) {
    op_streams_ = std::make_unique<internal::OpStreams>(
        [this](int rank) { return Stub(rank); }, options.busy_poll);
  }
  lease_ = std::make_unique<internal::SequenceLease>(
      coordinator->stub(),
      std::min<milliseconds>(options.timeout, kLeaseOpenBound));
  windows_ = std::make_unique<internal::SequenceWindows>(
      [this](const std::string& name,
             int64_t count) -> absl::StatusOr<int64_t> {
        // Seqs are per (generation, group), as the workers' executors are.
        v1::ReserveSequenceRequest request;
        request.set_generation(world.generation);
        request.set_group(name);
        request.set_count(count);
        request.set_lease(lease_->Id());
        auto reserved = coordinator->ReserveSequence(request);
        if (!reserved.ok()) return reserved.status();
        return reserved->first();
      },
      [this](const std::string& name, int64_t begin, int64_t end) {
        ReleaseSeqs(name, begin, end);
      },
      [this](std::chrono::steady_clock::time_point when,
             std::function<void()> callback) {
        Schedule(when, std::move(callback));
      },
      internal::SequenceWindows::Options{options.max_reserved_seqs,
                                         options.reserve_linger});
}

internal::ClientImpl::~ClientImpl() {
  windows_->ReleaseAll();
  std::unique_ptr<TimerQueue> timers;
  {
    std::lock_guard<std::mutex> lock(timers_mutex_);
    timers = std::move(timers_);
    timers_stopped_ = true;
  }
  timers.reset();  // joins: no window timer runs after this
  background_.WaitIdle();
}

std::vector<int> internal::ClientImpl::AllRanks() const {
  std::vector<int> ranks;
  ranks.reserve(world.members.size());
  for (const Member& member : world.members) ranks.push_back(member.rank);
  return ranks;
}

absl::StatusOr<int> internal::ClientImpl::GroupRank(int world_rank) const {
  auto it = std::find(group_ranks.begin(), group_ranks.end(), world_rank);
  if (it == group_ranks.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", world_rank, " is not a member of group '", group,
                     "' (world ranks ", absl::StrJoin(group_ranks, ","), ")"));
  }
  return static_cast<int>(it - group_ranks.begin());
}

const Device& internal::ClientImpl::DeviceOf(int rank) const {
  static const Device kCpu;
  for (const Member& member : world.members) {
    if (member.rank == rank) return member.device;
  }
  return kCpu;
}

void internal::ClientImpl::SetGroup(const std::string& name,
                                    std::vector<int> ranks) {
  group = name;
  group_ranks = std::move(ranks);
  std::lock_guard<std::mutex> lock(mutex_);
  group_members_[group] = group_ranks;
}

void internal::ClientImpl::Connect(const std::vector<int>& ranks) {
  std::vector<std::shared_ptr<grpc::Channel>> fresh;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int rank : ranks) {
      if (stubs_.count(rank)) continue;
      std::string address;
      for (const Member& member : world.members) {
        if (member.rank == rank) address = member.address;
      }
      if (address.empty()) continue;  // Stub() says why
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(16 << 20);
      auto channel = channels.Make(address, args);
      channel->GetState(/*try_to_connect=*/true);
      stubs_[rank] = v1::Worker::NewStub(channel);
      fresh.push_back(std::move(channel));
    }
  }
  // Every fresh channel is connecting already; waiting on each in turn
  // costs the slowest, not the sum.
  const auto deadline = std::chrono::system_clock::now() +
                        std::min<milliseconds>(options.timeout, kConnectBound);
  for (const auto& channel : fresh) channel->WaitForConnected(deadline);
}

absl::StatusOr<v1::Worker::Stub*> internal::ClientImpl::Stub(int rank) {
  Connect({rank});
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = stubs_.find(rank);
  if (it == stubs_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in the world of generation ",
                     world.generation, " (", world.world_size, " ranks)"));
  }
  return it->second.get();
}

std::chrono::system_clock::time_point internal::ClientImpl::Deadline(
    milliseconds extra) const {
  return std::chrono::system_clock::now() + options.timeout + extra;
}

std::chrono::system_clock::time_point internal::ClientImpl::OpDeadline(
    milliseconds op_time, milliseconds client_timeout) {
  return std::chrono::system_clock::now() + op_time + client_timeout +
         kRpcMargin;
}

absl::StatusOr<v1::OpRequest> internal::ClientImpl::ToWireOp(
    const Op& op) const {
  // Roots and peers are world ranks in the API and group ranks on the wire.
  v1::OpRequest wire = internal::ToWire(op);
  if (wire.timeout_ms() == 0) wire.set_timeout_ms(options.timeout.count());
  wire.set_root(0);
  wire.set_peer(0);
  if (HasRoot(op.kind)) {
    auto root = GroupRank(op.root);
    if (!root.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("root: ", root.status().message()));
    }
    wire.set_root(*root);
  }
  if (IsPointToPoint(op.kind)) {
    auto peer = GroupRank(op.peer);
    if (!peer.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer: ", peer.status().message()));
    }
    wire.set_peer(*peer);
  }
  return wire;
}

absl::StatusOr<std::vector<v1::OpRequest>> internal::ClientImpl::OpsForRanks(
    const PlanStep& step) {
  std::vector<v1::OpRequest> ops;
  ops.reserve(group_ranks.size());
  if (!step.point_to_point) {
    auto wire = ToWireOp(step.op);
    if (!wire.ok()) return wire.status();
    ops.assign(group_ranks.size(), *wire);
    return ops;
  }
  for (const auto& [rank, op] : *step.point_to_point) {
    if (auto member = GroupRank(rank); !member.ok()) return member.status();
  }
  for (int rank : group_ranks) {
    auto it = step.point_to_point->find(rank);
    if (it == step.point_to_point->end()) {
      v1::OpRequest nop;
      nop.set_kind(v1::OP_KIND_NOP);
      nop.set_timeout_ms(options.timeout.count());
      ops.push_back(std::move(nop));
      continue;
    }
    auto wire = ToWireOp(it->second);
    if (!wire.ok()) return wire.status();
    ops.push_back(*std::move(wire));
  }
  return ops;
}

void internal::ClientImpl::Stamp(v1::OpRequest& op, int64_t seq) const {
  op.set_group(group);
  op.set_seq(seq);
  op.set_generation(world.generation);
}

absl::StatusOr<int64_t> internal::ClientImpl::TakeSeqs(
    int64_t count, const std::string& of_group) {
  const std::string name = of_group.empty() ? group : of_group;
  // Seqs held under a lease whose stream broke (the client lives on) may be
  // skipped by the workers by now: give them back and reserve afresh.
  if (lease_->TakeLost()) windows_->ReleaseAll();
  absl::StatusOr<int64_t> seq = windows_->Take(name, count);
  // UNAVAILABLE: the generation is re-forming; FAILED_PRECONDITION: it is
  // over already (the coordinator moved on before this client asked).
  if (seq.ok() || !(absl::IsUnavailable(seq.status()) ||
                    absl::IsFailedPrecondition(seq.status()))) {
    return seq;
  }
  if (absl::Status moved = AwaitNextGeneration(seq.status()); !moved.ok()) {
    return moved;
  }
  return windows_->Take(name, count);
}

void internal::ClientImpl::ReleaseAllSeqs() { windows_->ReleaseAll(); }

void internal::ClientImpl::DropSeqs(const std::string& of_group) {
  windows_->Drop(of_group.empty() ? group : of_group);
}

absl::Status internal::ClientImpl::AwaitNextGeneration(
    const absl::Status& refusal) {
  // Polled: a re-form takes about a second (the broken rank's diagnosis,
  // a heartbeat of every rank, the new communicators), and a client waits
  // for it once per failure.
  constexpr milliseconds kPoll(20);
  const auto started = std::chrono::steady_clock::now();
  const auto give_up = started + options.timeout;
  const int64_t from = world.generation;
  std::string reason;
  std::string last_error;
  while (true) {
    absl::StatusOr<v1::World> latest = coordinator->GetWorld();
    if (latest.ok()) {
      const bool reforming = !latest->reforming_reason().empty();
      if (reforming) reason = latest->reforming_reason();
      if (!reforming && latest->generation() != from) {
        if (reason.empty()) reason = latest->began_after();
        Adopt(internal::ToNative(*latest));
        break;
      }
      // Not a re-form: the refusal is the answer.
      if (!reforming && reason.empty()) return refusal;
    } else {
      // The coordinator itself is away (restarting) and no re-form was
      // seen: the refusal stands, naming that.
      if (reason.empty()) return refusal;
      last_error = latest.status().ToString();
    }
    if (std::chrono::steady_clock::now() >= give_up) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the world is re-forming after ",
          reason.empty() ? "a failure" : reason, "; generation ", from + 1,
          " did not begin within ", options.timeout.count(), " ms",
          last_error.empty() ? "" : absl::StrCat(" (", last_error, ")"),
          "; `ccctl status` shows which rank it waits for"));
    }
    std::this_thread::sleep_for(kPoll);
  }
  if (options.on_reform) {
    const double waited = std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - started)
                              .count();
    options.on_reform(absl::StrFormat(
        "world re-forming after %s; waited %.1f s (generation %d)",
        reason.empty() ? std::string("a failure") : reason, waited,
        world.generation));
  }
  return absl::OkStatus();
}

absl::Status internal::ClientImpl::RefreshWorld() {
  absl::StatusOr<v1::World> latest = coordinator->GetWorld();
  if (!latest.ok()) {
    return absl::Status(latest.status().code(),
                        absl::StrCat("coordinator ", options.coordinator, ": ",
                                     latest.status().message()));
  }
  Adopt(internal::ToNative(*latest));
  return absl::OkStatus();
}

void internal::ClientImpl::Adopt(World next) {
  windows_->ForgetAll();
  // A rank the coordinator does not list right now (its worker has not
  // re-registered since the coordinator restarted) keeps the address the
  // client knew: the op addressed to it waits there or fails naming it,
  // rather than the group shrinking under the caller.
  for (const Member& was : world.members) {
    const bool listed =
        std::any_of(next.members.begin(), next.members.end(),
                    [&](const Member& m) { return m.rank == was.rank; });
    if (!listed && was.rank < next.world_size) next.members.push_back(was);
  }
  std::sort(next.members.begin(), next.members.end(),
            [](const Member& a, const Member& b) { return a.rank < b.rank; });
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Member& member : next.members) {
      auto stub = stubs_.find(member.rank);
      if (stub == stubs_.end()) continue;
      for (const Member& was : world.members) {
        if (was.rank == member.rank && was.address != member.address) {
          retired_stubs_.push_back(std::move(stub->second));
          stubs_.erase(stub);
          break;
        }
      }
    }
  }
  world = std::move(next);
  if (group == "world") SetGroup("world", AllRanks());
}

std::vector<absl::StatusOr<v1::OpResponse>> internal::ClientImpl::SubmitOps(
    std::vector<v1::OpRequest> ops) {
  if (op_streams_) {
    std::vector<std::chrono::system_clock::time_point> deadlines;
    deadlines.reserve(ops.size());
    for (const v1::OpRequest& op : ops) {
      deadlines.push_back(
          OpDeadline(milliseconds(op.timeout_ms()), options.timeout));
    }
    return op_streams_->Run(group_ranks, std::move(ops), deadlines);
  }
  return CallEach<v1::OpRequest, v1::OpResponse>(
      group_ranks,
      std::vector<absl::StatusOr<v1::OpRequest>>(
          std::make_move_iterator(ops.begin()),
          std::make_move_iterator(ops.end())),
      &v1::Worker::StubInterface::async_interface::Submit,
      [timeout = options.timeout](const v1::OpRequest& op) {
        return OpDeadline(milliseconds(op.timeout_ms()), timeout);
      });
}

RankResults<OpResult> internal::ClientImpl::SubmitEach(
    std::vector<v1::OpRequest> ops) {
  auto results = SubmitOps(std::move(ops));
  RankResults<OpResult> out;
  out.reserve(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) {
      out.push_back({group_ranks[i], results[i].status()});
    } else {
      out.push_back({group_ranks[i], internal::ToNative(*results[i])});
    }
  }
  return out;
}

void internal::ClientImpl::ReleaseSeqs(const std::string& name, int64_t begin,
                                       int64_t end) {
  // Never on a gRPC thread (the windows call this from the caller's Take,
  // their timer or ReleaseAll), so finished calls can be freed here.
  background_.Reap();
  std::vector<int> ranks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ranks = group_members_[name];
  }
  Connect(ranks);
  using Release = BackgroundCalls::Unary<v1::ReleaseSequenceRequest,
                                         v1::ReleaseSequenceResponse>;
  for (int rank : ranks) {
    auto stub = Stub(rank);
    if (!stub.ok()) continue;
    Release* call = background_.Add(std::make_unique<Release>());
    call->request.set_group(name);
    call->request.set_generation(world.generation);
    call->request.set_begin(begin);
    call->request.set_end(end);
    call->context.set_deadline(Deadline());
    (*stub)->async()->ReleaseSequence(
        &call->context, &call->request, &call->response,
        [this, call, name, rank, begin, end](grpc::Status status) {
          if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
            // A worker older than ReleaseSequence: a no-op at each seq
            // takes them just as well, and reserving only what each op
            // uses keeps that rare.
            windows_->StopReservingAhead();
            SubmitNops(name, rank, begin, end);
          }
          // Other errors: the worker's gap timeout skips the seqs, as it
          // would for a client that died holding them.
          background_.Ended(call);
        });
  }
}

void internal::ClientImpl::SubmitNops(const std::string& name, int rank,
                                      int64_t begin, int64_t end) {
  auto stub = Stub(rank);
  if (!stub.ok()) return;
  using Nop = BackgroundCalls::Unary<v1::OpRequest, v1::OpResponse>;
  for (int64_t seq = begin; seq < end; ++seq) {
    Nop* call = background_.Add(std::make_unique<Nop>());
    call->request.set_kind(v1::OP_KIND_NOP);
    call->request.set_group(name);
    call->request.set_seq(seq);
    call->request.set_generation(world.generation);
    // Async: the worker answers once the no-op is queued, so nobody waits
    // for the ops before it (a recv that waits for its send, say).
    call->request.set_async(true);
    call->context.set_deadline(Deadline());
    (*stub)->async()->Submit(
        &call->context, &call->request, &call->response,
        [this, call](grpc::Status) { background_.Ended(call); });
  }
}

void internal::ClientImpl::Schedule(std::chrono::steady_clock::time_point when,
                                    std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(timers_mutex_);
  if (timers_stopped_) return;
  if (!timers_) timers_ = std::make_unique<TimerQueue>();
  timers_->Schedule(when, std::move(callback));
}

}  // namespace ccl::client
