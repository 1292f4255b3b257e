#include "coordinator/coordinator_service.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/grpc_status.h"
#include "common/proto_convert.h"
#include "common/refused_stream.h"
#include "common/status_macros.h"

namespace ccl::coordinator {
namespace {

// A reactor for a call the core may park. OnCancel (client gone, deadline
// passed, server shutting down) must end the parked wait, or the reactor
// would never finish and Server::Shutdown would wait on it forever.
class ParkedReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit ParkedReactor(CoordinatorCore& core)
      : core_(core), id_(core.NewWaitId()) {}
  CoordinatorCore::WaitId id() const { return id_; }

  void OnCancel() override { core_.Cancel(id_); }
  void OnDone() override { delete this; }

 private:
  CoordinatorCore& core_;
  const CoordinatorCore::WaitId id_;
};

// Calls that never wait answer on the handler's thread.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

absl::StatusOr<RegisterRequest> RegisterFromProto(
    const v1::RegisterRequest& request, const CoordinatorLimits& limits) {
  absl::StatusOr<Device> device = FromProto(request.device());
  if (!device.ok()) return device.status();
  RegisterRequest native;
  native.address = request.address();
  native.host = request.host();
  native.host_id = request.host_id();
  native.boot_id = request.boot_id();
  native.device_bus_id = request.device_bus_id();
  native.device = *device;
  if (request.has_requested_rank()) {
    native.requested_rank = request.requested_rank();
  }
  native.worker_id = request.worker_id();
  native.secret = request.worker_secret();
  native.timeout = ClampTimeout(request.timeout_ms(), limits);
  native.resume_generation = request.resume_generation();
  native.known_generation = request.known_generation();
  native.rejoin = request.rejoin();
  if (request.has_nccl_ranks_per_root()) {
    native.nccl_ranks_per_root = request.nccl_ranks_per_root();
  }
  native.resume_next_seq.insert(request.resume_next_seq().begin(),
                                request.resume_next_seq().end());
  return native;
}

namespace {

v1::World ToProtoHeader(const WorldInfo& world) {
  v1::World out;
  out.set_generation(world.generation);
  out.set_world_size(world.world_size);
  out.set_state(ToProto(world.state));
  out.set_heartbeat_interval_ms(world.heartbeat_interval_ms);
  out.set_heartbeat_timeout_ms(world.heartbeat_timeout_ms);
  out.set_shrunk_from_generation(world.shrunk_from_generation);
  for (int rank : world.excluded_ranks) out.add_excluded_ranks(rank);
  out.set_reforming_reason(world.reforming_reason);
  out.set_began_after(world.began_after);
  return out;
}

}  // namespace

v1::World ToProto(const WorldInfo& world) {
  v1::World out = ToProtoHeader(world);
  out.mutable_members()->Reserve(static_cast<int>(world.members.size()));
  for (const MemberInfo& m : world.members) {
    ::ccl::ToProto(m, out.add_members());
  }
  return out;
}

std::shared_ptr<const v1::World> CoordinatorService::WorldProto(
    const std::shared_ptr<const WorldInfo>& world, bool include_members) {
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (world != cached_world_) {
    cached_world_ = world;
    cached_world_header_ =
        std::make_shared<const v1::World>(ToProtoHeader(*world));
    cached_world_proto_.reset();
  }
  if (!include_members) return cached_world_header_;
  // Built on first demand: workers do not ask for the member list, and a
  // world of 16k members is megabytes.
  if (cached_world_proto_ == nullptr) {
    cached_world_proto_ = std::make_shared<const v1::World>(ToProto(*world));
  }
  return cached_world_proto_;
}

absl::StatusOr<RegisterRequest> CoordinatorService::NativeRegister(
    const grpc::CallbackServerContext& context,
    const v1::RegisterRequest& request) {
  CCL_RETURN_IF_ERROR(ValidateRequest(request, limits_));
  absl::StatusOr<RegisterRequest> native = RegisterFromProto(request, limits_);
  if (!native.ok()) return native.status();
  // The caller's deadline, on the core's clock: a reply held for the NCCL
  // ids goes out well before it.
  if (context.deadline() != std::chrono::system_clock::time_point::max()) {
    native->reply_by = std::chrono::steady_clock::now() +
                       (context.deadline() - std::chrono::system_clock::now());
  }
  return native;
}

void CoordinatorService::FillRegisterResponse(const RegisterResult& result,
                                              bool include_members,
                                              v1::RegisterResponse* response) {
  response->set_rank(result.rank);
  response->set_generation(result.generation);
  response->set_worker_secret(result.secret);
  // CoordinatorCore sets them as each generation starts.
  response->set_peer_addresses_published(true);
  *response->mutable_world() = *WorldProto(result.world, include_members);
  for (const auto& [key, value] : result.kv) {
    (*response->mutable_kv())[key] = *value;
  }
}

grpc::ServerUnaryReactor* CoordinatorService::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  absl::StatusOr<RegisterRequest> native = NativeRegister(*context, *request);
  if (!native.ok()) return FinishNow(context, native.status());
  auto* reactor = new ParkedReactor(core_);
  const bool include_members = request->include_members();
  core_.Register(reactor->id(), *std::move(native),
                 [this, reactor, response,
                  include_members](absl::StatusOr<RegisterResult> r) {
                   if (r.ok()) {
                     FillRegisterResponse(*r, include_members, response);
                   }
                   reactor->Finish(ToGrpcStatus(r.status()));
                 });
  return reactor;
}

namespace {

// RegisterHost's stream: one parked registration per member, each answered
// on the stream as soon as the core answers it. gRPC allows one write in
// flight, so answers queue. The stream finishes once every member has been
// answered and every answer written, or, after a failed write (the client
// went away), once the core has answered every member, cancelled: until
// then the core's callbacks point at this reactor. gRPC calls are made
// outside the mutex, since a reaction may run on the calling thread.
class HostRegistrationReactor final
    : public grpc::ServerWriteReactor<v1::RegisterHostReply> {
 public:
  using Fill = std::function<void(const RegisterResult&, bool include_members,
                                  v1::RegisterResponse*)>;
  HostRegistrationReactor(CoordinatorCore& core, int members, Fill fill)
      : core_(core), fill_(std::move(fill)), unanswered_(members) {
    ids_.reserve(static_cast<size_t>(members));
    for (int m = 0; m < members; ++m) ids_.push_back(core.NewWaitId());
  }
  CoordinatorCore::WaitId id(int member) const {
    return ids_[static_cast<size_t>(member)];
  }

  // A member's answer; from any thread, once per member.
  void Answer(int member, absl::StatusOr<RegisterResult> result,
              bool include_members) {
    std::unique_lock<std::mutex> lock(mutex_);
    --unanswered_;
    if (!broken_) {
      v1::RegisterHostReply& reply = queue_.emplace_back();
      reply.set_member(member);
      reply.set_code(static_cast<int32_t>(result.status().code()));
      reply.set_message(std::string(result.status().message()));
      if (result.ok()) {
        // A key this stream carried already is left out (the proto says
        // so): the members of a host read the same NCCL id list, and at
        // 16k ranks it is 4.7 KiB a member. Decided here, in queue order,
        // so that a reply never relies on one written after it.
        auto& kv = result->kv;
        kv.erase(std::remove_if(kv.begin(), kv.end(),
                                [this](const auto& entry) {
                                  return !sent_keys_.insert(entry.first).second;
                                }),
                 kv.end());
        fill_(*result, include_members, reply.mutable_response());
      }
    }
    Next(lock);
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock<std::mutex> lock(mutex_);
    writing_ = false;
    queue_.pop_front();
    if (!ok && !broken_) {
      broken_ = true;
      queue_.clear();
      lock.unlock();
      CancelAll();  // answers the members still parked, re-entering Answer
      lock.lock();
    }
    Next(lock);
  }
  void OnCancel() override { CancelAll(); }
  void OnDone() override { delete this; }

 private:
  // Starts the next write or finishes the stream, if either is due.
  void Next(std::unique_lock<std::mutex>& lock) {
    if (writing_ || finished_) return;
    if (!queue_.empty()) {
      writing_ = true;
      // Stable: the deque only grows at the back until this write is done.
      const v1::RegisterHostReply* reply = &queue_.front();
      lock.unlock();
      StartWrite(reply);
      return;
    }
    if (unanswered_ > 0) return;
    finished_ = true;
    const bool broken = broken_;
    lock.unlock();
    Finish(broken ? grpc::Status(grpc::StatusCode::CANCELLED,
                                 "register host: the stream broke")
                  : grpc::Status::OK);
  }
  // A member the core already answered is a no-op.
  void CancelAll() {
    for (CoordinatorCore::WaitId id : ids_) core_.Cancel(id);
  }

  CoordinatorCore& core_;
  const Fill fill_;
  std::vector<CoordinatorCore::WaitId> ids_;
  std::mutex mutex_;
  int unanswered_;
  std::set<std::string> sent_keys_;
  std::deque<v1::RegisterHostReply> queue_;
  bool writing_ = false;
  bool broken_ = false;
  bool finished_ = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::RegisterHostReply>*
CoordinatorService::RegisterHost(grpc::CallbackServerContext* context,
                                 const v1::RegisterHostRequest* request) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return new RefusedStream<v1::RegisterHostReply>(ToGrpcStatus(valid));
  }
  const int members = request->members_size();
  auto* reactor = new HostRegistrationReactor(
      core_, members,
      [this](const RegisterResult& result, bool include_members,
             v1::RegisterResponse* response) {
        FillRegisterResponse(result, include_members, response);
      });
  for (int m = 0; m < members; ++m) {
    const v1::RegisterRequest& member = request->members(m);
    const bool include_members = member.include_members();
    absl::StatusOr<RegisterRequest> native = NativeRegister(*context, member);
    if (!native.ok()) {
      reactor->Answer(m, native.status(), include_members);
      continue;
    }
    core_.Register(
        reactor->id(m), *std::move(native),
        [reactor, m, include_members](absl::StatusOr<RegisterResult> r) {
          reactor->Answer(m, std::move(r), include_members);
        });
  }
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::Heartbeat(
    grpc::CallbackServerContext* context, const v1::HeartbeatRequest* request,
    v1::HeartbeatResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  absl::StatusOr<HeartbeatResult> r =
      core_.Heartbeat(::ccl::FromProto(*request));
  if (r.ok()) {
    response->set_generation(r->generation);
    response->set_world_state(ToProto(r->world_state));
  }
  return FinishNow(context, r.status());
}

grpc::ServerUnaryReactor* CoordinatorService::Deregister(
    grpc::CallbackServerContext* context, const v1::DeregisterRequest* request,
    v1::DeregisterResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  absl::StatusOr<int64_t> r =
      core_.Deregister(request->rank(), request->generation(),
                       request->worker_id(), request->worker_secret());
  if (r.ok()) response->set_generation(*r);
  return FinishNow(context, r.status());
}

grpc::ServerUnaryReactor* CoordinatorService::GetWorld(
    grpc::CallbackServerContext* context, const v1::GetWorldRequest* request,
    v1::World* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  *response = ToProto(core_.GetWorld());
  return FinishNow(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* CoordinatorService::KvSet(
    grpc::CallbackServerContext* context, const v1::KvSetRequest* request,
    v1::KvSetResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  absl::StatusOr<int64_t> r =
      core_.KvSet(request->generation(), request->key(), request->value());
  if (r.ok()) response->set_generation(*r);
  return FinishNow(context, r.status());
}

grpc::ServerUnaryReactor* CoordinatorService::KvGet(
    grpc::CallbackServerContext* context, const v1::KvGetRequest* request,
    v1::KvGetResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto r = core_.KvGet(request->generation(), request->key());
  if (r.ok()) {
    response->set_generation(r->first);
    response->set_value(std::move(r->second));
  }
  return FinishNow(context, r.status());
}

grpc::ServerUnaryReactor* CoordinatorService::KvWait(
    grpc::CallbackServerContext* context, const v1::KvWaitRequest* request,
    v1::KvWaitResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto* reactor = new ParkedReactor(core_);
  std::vector<std::string> keys(request->keys().begin(), request->keys().end());
  core_.KvWait(reactor->id(), request->generation(), std::move(keys),
               ClampTimeout(request->timeout_ms(), limits_),
               request->include_values(),
               [reactor, response](absl::StatusOr<KvWaitResult> r) {
                 if (r.ok()) {
                   response->set_generation(r->generation);
                   response->mutable_values()->Reserve(
                       static_cast<int>(r->values.size()));
                   for (const auto& value : r->values) {
                     response->add_values(*value);
                   }
                 }
                 reactor->Finish(ToGrpcStatus(r.status()));
               });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::KvAdd(
    grpc::CallbackServerContext* context, const v1::KvAddRequest* request,
    v1::KvAddResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto r = core_.KvAdd(request->generation(), request->key(), request->delta());
  if (r.ok()) {
    response->set_generation(r->first);
    response->set_value(r->second);
  }
  return FinishNow(context, r.status());
}

grpc::ServerUnaryReactor* CoordinatorService::KvCompareSet(
    grpc::CallbackServerContext* context,
    const v1::KvCompareSetRequest* request,
    v1::KvCompareSetResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto r = core_.KvCompareSet(request->generation(), request->key(),
                              request->expected(), request->desired());
  if (r.ok()) {
    response->set_generation(r->generation);
    response->set_swapped(r->swapped);
    response->set_value(std::move(r->value));
  }
  return FinishNow(context, r.status());
}

grpc::ServerUnaryReactor* CoordinatorService::KvDelete(
    grpc::CallbackServerContext* context, const v1::KvDeleteRequest* request,
    v1::KvDeleteResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto r = core_.KvDelete(request->generation(), request->key());
  if (r.ok()) {
    response->set_generation(r->first);
    response->set_deleted(r->second);
  }
  return FinishNow(context, r.status());
}

grpc::ServerUnaryReactor* CoordinatorService::ReserveSequence(
    grpc::CallbackServerContext* context,
    const v1::ReserveSequenceRequest* request,
    v1::ReserveSequenceResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto r = core_.ReserveSequence(request->generation(), request->group(),
                                 request->count(), request->lease());
  if (r.ok()) {
    response->set_generation(r->generation);
    response->set_first(r->first);
    response->set_leased(r->leased);
  }
  return FinishNow(context, r.status());
}

namespace {

// HoldLease's stream: one reply (the lease is held), then open until the
// client goes. Its end, whichever way (the client cancelled, its process
// died and the connection closed, the server shuts down), ends the lease.
class LeaseReactor final : public grpc::ServerWriteReactor<v1::HoldLeaseReply> {
 public:
  LeaseReactor(CoordinatorCore& core, std::string lease)
      : core_(core), lease_(std::move(lease)) {
    reply_.set_held(true);
    StartWrite(&reply_);
  }
  // A failed write means the client is gone, and OnCancel comes too.
  void OnWriteDone(bool /*ok*/) override {
    std::unique_lock<std::mutex> lock(mutex_);
    writing_ = false;
    FinishIfEnded(lock);
  }
  void OnCancel() override {
    core_.CloseLease(lease_);
    std::unique_lock<std::mutex> lock(mutex_);
    ended_ = true;
    FinishIfEnded(lock);
  }
  void OnDone() override { delete this; }

 private:
  // Finish waits for the reply's write: gRPC takes no Finish while a write
  // of the stream is in flight.
  void FinishIfEnded(std::unique_lock<std::mutex>& lock) {
    if (!ended_ || writing_ || finished_) return;
    finished_ = true;
    lock.unlock();
    Finish(grpc::Status(grpc::StatusCode::CANCELLED, "lease ended"));
  }

  CoordinatorCore& core_;
  const std::string lease_;
  v1::HoldLeaseReply reply_;
  std::mutex mutex_;
  bool writing_ = true;
  bool ended_ = false;
  bool finished_ = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::HoldLeaseReply>* CoordinatorService::HoldLease(
    grpc::CallbackServerContext* context, const v1::HoldLeaseRequest* request) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return new RefusedStream<v1::HoldLeaseReply>(ToGrpcStatus(valid));
  }
  if (absl::Status opened = core_.OpenLease(request->lease(), context->peer());
      !opened.ok()) {
    return new RefusedStream<v1::HoldLeaseReply>(ToGrpcStatus(opened));
  }
  return new LeaseReactor(core_, request->lease());
}

grpc::ServerUnaryReactor* CoordinatorService::AwaitSequenceHolder(
    grpc::CallbackServerContext* context,
    const v1::AwaitSequenceHolderRequest* request,
    v1::AwaitSequenceHolderResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto* reactor = new ParkedReactor(core_);
  core_.AwaitSequenceHolder(
      reactor->id(), request->generation(), request->group(), request->seq(),
      ClampTimeout(request->timeout_ms(), limits_),
      [reactor, response](absl::StatusOr<SequenceHolder> r) {
        if (r.ok()) {
          response->set_generation(r->generation);
          response->set_released(r->released);
          response->set_begin(r->begin);
          response->set_end(r->end);
          response->set_reason(std::move(r->reason));
        }
        reactor->Finish(ToGrpcStatus(r.status()));
      });
  return reactor;
}

grpc::ServerUnaryReactor* CoordinatorService::PostUniqueId(
    grpc::CallbackServerContext* context,
    const v1::PostUniqueIdRequest* request,
    v1::PostUniqueIdResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto r = core_.PostUniqueId(request->generation(), request->group(),
                              request->unique_id());
  if (r.ok()) response->set_generation(*r);
  return FinishNow(context, r.status());
}

grpc::ServerUnaryReactor* CoordinatorService::GetUniqueId(
    grpc::CallbackServerContext* context, const v1::GetUniqueIdRequest* request,
    v1::GetUniqueIdResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return FinishNow(context, valid);
  }
  auto* reactor = new ParkedReactor(core_);
  core_.GetUniqueId(reactor->id(), request->generation(), request->group(),
                    ClampTimeout(request->timeout_ms(), limits_),
                    [reactor, response](absl::StatusOr<UniqueIdResult> r) {
                      if (r.ok()) {
                        response->set_generation(r->generation);
                        response->set_unique_id(std::move(r->unique_id));
                      }
                      reactor->Finish(ToGrpcStatus(r.status()));
                    });
  return reactor;
}

}  // namespace ccl::coordinator
