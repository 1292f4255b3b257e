#include "coordinator/host_agent/host_agent_service.h"

#include <algorithm>
#include <utility>

#include "common/refused_stream.h"
#include "spdlog/spdlog.h"

namespace ccl::coordinator {
namespace {

constexpr char kAuthorization[] = "authorization";

// What the members of one upstream RegisterHost share with it: whether the
// call still runs, and which of its workers are still owed an answer and
// still there. When every one still owed has gone away, the call is
// cancelled: the coordinator then withdraws their registrations.
struct UpstreamState {
  std::mutex mutex;
  grpc::ClientContext* context = nullptr;  // valid while !done
  bool done = false;
  std::vector<bool> settled;  // answered or gone, by member
  int open = 0;               // members neither answered nor gone

  void Answered(int member) {
    std::lock_guard<std::mutex> lock(mutex);
    SettleLocked(member);
  }
  void Gone(int member) {
    std::lock_guard<std::mutex> lock(mutex);
    if (SettleLocked(member) && open == 0 && !done) context->TryCancel();
  }

 private:
  bool SettleLocked(int member) {
    if (settled[member]) return false;
    settled[member] = true;
    --open;
    return true;
  }
};

// A call passed through: the upstream call is cancelled with the caller's.
class ForwardCall final : public grpc::ServerUnaryReactor {
 public:
  void OnCancel() override { upstream.TryCancel(); }
  void OnDone() override { delete this; }
  grpc::ClientContext upstream;
};

}  // namespace

// A worker's Register, waiting in the batcher, then in an upstream
// RegisterHost until its member's reply comes.
class HostAgentService::MemberCall final : public grpc::ServerUnaryReactor {
 public:
  MemberCall(HostAgentService& service, RegistrationBatcher::CallId id,
             grpc::CallbackServerContext* context,
             const v1::RegisterRequest* request, v1::RegisterResponse* response,
             std::string authorization)
      : service_(service),
        id_(id),
        context_(context),
        request_(request),
        response_(response),
        authorization_(std::move(authorization)) {}

  const v1::RegisterRequest& request() const { return *request_; }
  const std::string& authorization() const { return authorization_; }
  v1::RegisterResponse* response() { return response_; }
  std::chrono::system_clock::time_point deadline() const {
    return context_->deadline();
  }

  // Its batch left in `upstream`, where it is member `member`.
  void Sent(std::shared_ptr<UpstreamState> upstream, int member) {
    bool gone;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      upstream_ = upstream;
      member_ = member;
      gone = gone_;
    }
    if (gone) upstream->Gone(member);
  }

  void OnCancel() override {
    if (service_.batcher_.Remove(id_)) {
      {
        std::lock_guard<std::mutex> lock(service_.mutex_);
        service_.waiting_.erase(id_);
      }
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "the worker went away before its registration "
                          "was sent"));
      return;
    }
    std::shared_ptr<UpstreamState> upstream;
    int member;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      gone_ = true;
      upstream = upstream_;
      member = member_;
    }
    if (upstream != nullptr) upstream->Gone(member);
  }
  void OnDone() override { delete this; }

 private:
  HostAgentService& service_;
  const RegistrationBatcher::CallId id_;
  grpc::CallbackServerContext* const context_;
  const v1::RegisterRequest* const request_;
  v1::RegisterResponse* const response_;
  const std::string authorization_;
  std::mutex mutex_;
  bool gone_ = false;
  std::shared_ptr<UpstreamState> upstream_;
  int member_ = -1;
};

namespace {

// One RegisterHost to the coordinator for a batch of workers; each reply
// finishes its worker's Register with the reply's status and response.
class UpstreamHostCall final
    : public grpc::ClientReadReactor<v1::RegisterHostReply> {
 public:
  explicit UpstreamHostCall(std::vector<HostAgentService::MemberCall*> members)
      : members_(std::move(members)),
        answered_(members_.size(), false),
        state_(std::make_shared<UpstreamState>()) {
    state_->context = &context_;
    state_->settled.assign(members_.size(), false);
    state_->open = static_cast<int>(members_.size());
    std::chrono::system_clock::time_point deadline{};
    for (auto* member : members_) {
      *request_.add_members() = member->request();
      deadline = std::max(deadline, member->deadline());
    }
    if (deadline != std::chrono::system_clock::time_point::max()) {
      context_.set_deadline(deadline);
    }
  }

  void Start(v1::Coordinator::Stub& stub, const std::string& authorization) {
    if (!authorization.empty()) {
      context_.AddMetadata(kAuthorization, authorization);
    }
    stub.async()->RegisterHost(&context_, &request_, this);
    for (size_t m = 0; m < members_.size(); ++m) {
      members_[m]->Sent(state_, static_cast<int>(m));
    }
    StartRead(&reply_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone has its status
    const int m = reply_.member();
    if (m >= 0 && m < static_cast<int>(members_.size()) && !answered_[m]) {
      answered_[m] = true;
      // The reply leaves out keys an earlier reply on the stream carried;
      // the worker gets all of them, as its own Register would have.
      auto& kv = *reply_.mutable_response()->mutable_kv();
      for (const auto& [key, value] : kv) stream_kv_.emplace(key, value);
      HostAgentService::MemberCall* member = members_[m];
      if (reply_.code() == 0) {
        *member->response() = std::move(*reply_.mutable_response());
        auto& member_kv = *member->response()->mutable_kv();
        for (const auto& [key, value] : stream_kv_) {
          member_kv.insert({key, value});
        }
      }
      state_->Answered(m);
      member->Finish(grpc::Status(static_cast<grpc::StatusCode>(reply_.code()),
                                  reply_.message()));
    } else {
      spdlog::warn(
          "the coordinator answered member {} of a RegisterHost of "
          "{}; ignored",
          m, members_.size());
    }
    reply_.Clear();
    StartRead(&reply_);
  }

  void OnDone(const grpc::Status& status) override {
    const grpc::Status unanswered =
        status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                   "the coordinator ended the host's "
                                   "registration without answering this "
                                   "worker")
                    : status;
    for (size_t m = 0; m < members_.size(); ++m) {
      if (!answered_[m]) members_[m]->Finish(unanswered);
    }
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->done = true;
    }
    delete this;
  }

 private:
  const std::vector<HostAgentService::MemberCall*> members_;
  std::vector<bool> answered_;
  const std::shared_ptr<UpstreamState> state_;
  grpc::ClientContext context_;
  v1::RegisterHostRequest request_;
  v1::RegisterHostReply reply_;
  std::map<std::string, std::string> stream_kv_;
};

}  // namespace

HostAgentService::HostAgentService(std::shared_ptr<grpc::Channel> upstream,
                                   HostAgentOptions options)
    : stub_(v1::Coordinator::NewStub(std::move(upstream))),
      options_(options),
      batcher_(options.expected_workers, options.window,
               [this](std::vector<RegistrationBatcher::CallId> batch) {
                 SendBatch(std::move(batch));
               }) {}

HostAgentService::~HostAgentService() = default;

std::string HostAgentService::Authorization(
    const grpc::CallbackServerContext& context) const {
  if (!options_.forward_authorization) return "";
  auto it = context.client_metadata().find(kAuthorization);
  if (it == context.client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

grpc::ServerUnaryReactor* HostAgentService::Register(
    grpc::CallbackServerContext* context, const v1::RegisterRequest* request,
    v1::RegisterResponse* response) {
  std::string authorization = Authorization(*context);
  RegistrationBatcher::CallId id;
  MemberCall* call;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    id = next_call_++;
    call = new MemberCall(*this, id, context, request, response, authorization);
    waiting_[id] = call;
  }
  batcher_.Add(id, authorization);
  return call;
}

void HostAgentService::SendBatch(
    std::vector<RegistrationBatcher::CallId> batch) {
  std::vector<MemberCall*> members;
  std::string authorization;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (RegistrationBatcher::CallId id : batch) {
      auto it = waiting_.find(id);
      if (it == waiting_.end()) continue;
      members.push_back(it->second);
      waiting_.erase(it);
    }
  }
  if (members.empty()) return;
  // One credential per batch: the batcher's key.
  authorization = members.front()->authorization();
  registrations_sent_ += static_cast<int64_t>(members.size());
  ++batches_sent_;
  spdlog::info("registering {} worker(s) in one RegisterHost", members.size());
  auto* call = new UpstreamHostCall(std::move(members));
  call->Start(*stub_, authorization);
}

template <typename Request, typename Response, typename Method>
grpc::ServerUnaryReactor* HostAgentService::Forward(
    grpc::CallbackServerContext* context, const Request* request,
    Response* response, Method method) {
  auto* call = new ForwardCall();
  if (context->deadline() != std::chrono::system_clock::time_point::max()) {
    call->upstream.set_deadline(context->deadline());
  }
  if (const std::string token = Authorization(*context); !token.empty()) {
    call->upstream.AddMetadata(kAuthorization, token);
  }
  (stub_->async()->*method)(
      &call->upstream, request, response,
      [call](grpc::Status status) { call->Finish(std::move(status)); });
  return call;
}

grpc::ServerWriteReactor<v1::RegisterHostReply>* HostAgentService::RegisterHost(
    grpc::CallbackServerContext* /*context*/,
    const v1::RegisterHostRequest* /*request*/) {
  return new RefusedStream<v1::RegisterHostReply>(grpc::Status(
      grpc::StatusCode::UNIMPLEMENTED,
      "a host agent takes Register calls and sends RegisterHost itself; "
      "send RegisterHost to the coordinator"));
}

// The identical pass-throughs of every method but Register; the stub's async
// methods are overloaded (callback and reactor forms), so each needs its
// signature spelled out.
#define CCL_FORWARD(Method, Request, Response)                             \
  grpc::ServerUnaryReactor* HostAgentService::Method(                      \
      grpc::CallbackServerContext* context, const v1::Request* request,    \
      v1::Response* response) {                                            \
    return Forward(context, request, response,                             \
                   static_cast<void (v1::Coordinator::Stub::async::*)(     \
                       grpc::ClientContext*, const v1::Request*,           \
                       v1::Response*, std::function<void(grpc::Status)>)>( \
                       &v1::Coordinator::Stub::async::Method));            \
  }
CCL_COORDINATOR_PLAIN_METHODS(CCL_FORWARD)
#undef CCL_FORWARD

}  // namespace ccl::coordinator
