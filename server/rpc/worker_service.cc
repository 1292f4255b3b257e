#include "server/rpc/worker_service.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc_status.h"
#include "common/proto_convert.h"
#include "server/rpc/convert.h"

namespace ccl {
namespace {

constexpr int64_t kDefaultChunkBytes = 1 << 20;
// gRPC's default receive limit is 4 MiB; stay well under it with framing.
constexpr int64_t kMaxChunkBytes = 3 << 20;

// The request checked against the limits, then converted.
template <typename Request, typename Convert>
auto ValidThen(const Request& request, const RequestLimits& limits,
               Convert convert) -> decltype(convert(request)) {
  if (absl::Status valid = ValidateRequest(request, limits); !valid.ok()) {
    return valid;
  }
  return convert(request);
}

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

// Streams a tensor range one chunk per write, pulling each chunk from the
// core when the previous write is done, so memory stays at one chunk. The
// core checks the range.
class ReadReactor final : public grpc::ServerWriteReactor<v1::ReadTensorChunk> {
 public:
  ReadReactor(WorkerCore& core, const v1::ReadTensorRequest& request)
      : core_(core), name_(request.name()) {
    auto meta = core_.Lookup(name_);
    if (!meta.ok()) {
      Finish(ToGrpcStatus(meta.status()));
      return;
    }
    dtype_ = meta->dtype;
    element_bytes_ = static_cast<int64_t>(DTypeSize(dtype_));
    next_ = request.offset();
    end_ =
        request.count() == 0 ? meta->numel : request.offset() + request.count();
    int64_t chunk_bytes =
        request.chunk_bytes() > 0 ? request.chunk_bytes() : kDefaultChunkBytes;
    chunk_bytes = std::min(chunk_bytes, kMaxChunkBytes);
    chunk_elements_ = std::max<int64_t>(1, chunk_bytes / element_bytes_);
    first_ = true;
    Next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
      return;
    }
    Next();
  }
  void OnDone() override { delete this; }

 private:
  void Next() {
    // The first call also lets the core check the whole range.
    if (next_ >= end_ && !first_) {
      Finish(grpc::Status::OK);
      return;
    }
    const int64_t count =
        first_ && next_ >= end_ ? 0 : std::min(chunk_elements_, end_ - next_);
    chunk_.Clear();
    chunk_.set_dtype(ToProto(dtype_));
    chunk_.set_offset_bytes(next_ * element_bytes_);
    std::string* data = chunk_.mutable_data();
    data->reserve(static_cast<size_t>(count * element_bytes_));
    absl::Status status = absl::OkStatus();
    if (count > 0 || first_) {
      status =
          core_.Read(name_, next_, count > 0 ? count : end_ - next_,
                     count * element_bytes_,
                     [&](int64_t, std::span<const std::byte> bytes) {
                       data->append(reinterpret_cast<const char*>(bytes.data()),
                                    bytes.size());
                       return false;  // one chunk per write
                     });
    }
    first_ = false;
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
    if (count == 0) {
      Finish(grpc::Status::OK);
      return;
    }
    next_ += count;
    StartWrite(&chunk_);
  }

  WorkerCore& core_;
  const std::string name_;
  DType dtype_ = DType::kFloat32;
  int64_t element_bytes_ = 1;
  int64_t chunk_elements_ = 1;
  int64_t next_ = 0;
  int64_t end_ = 0;
  bool first_ = true;
  v1::ReadTensorChunk chunk_;
};

// Answers a request that failed validation before any reactor work.
class RejectedReadReactor final
    : public grpc::ServerWriteReactor<v1::ReadTensorChunk> {
 public:
  explicit RejectedReadReactor(const absl::Status& status) {
    Finish(ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

class WriteReactor final
    : public grpc::ServerReadReactor<v1::WriteTensorChunk> {
 public:
  WriteReactor(WorkerCore& core, const RequestLimits& limits,
               v1::TensorInfo* response)
      : core_(core), limits_(limits), response_(response) {
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side: every chunk is written
      if (name_.empty()) {
        Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "WriteTensor got no chunk naming a tensor"));
        return;
      }
      if (last_.has_value()) *response_ = TensorInfoToProto(*last_);
      Finish(grpc::Status::OK);
      return;
    }
    if (absl::Status valid = ValidateRequest(chunk_, limits_); !valid.ok()) {
      Finish(ToGrpcStatus(valid));
      return;
    }
    if (name_.empty()) name_ = chunk_.name();
    if (name_.empty()) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "the first WriteTensor chunk must name the tensor"));
      return;
    }
    if (!chunk_.name().empty() && chunk_.name() != name_) {
      Finish(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("one WriteTensor stream writes one tensor: got '",
                       chunk_.name(), "' after '", name_, "'")));
      return;
    }
    const std::string& data = chunk_.data();
    auto result = core_.Write(
        name_, chunk_.offset_bytes(),
        std::span<const std::byte>(
            reinterpret_cast<const std::byte*>(data.data()), data.size()));
    if (!result.ok()) {
      Finish(ToGrpcStatus(result.status()));
      return;
    }
    last_ = *std::move(result);
    StartRead(&chunk_);
  }
  void OnDone() override { delete this; }

 private:
  WorkerCore& core_;
  const RequestLimits& limits_;
  v1::TensorInfo* response_;
  std::string name_;
  std::optional<TensorMeta> last_;
  v1::WriteTensorChunk chunk_;
};

}  // namespace

// Answers a unary call that starts work: at once with an error, or when its
// work completes. A client that cancels the call cancels the work
// (Work::RequestCancel), also one attached after the cancel came.
//
// Work that can be withdrawn (Work::withdrawable) and is still queued a
// little before the call's deadline is withdrawn then, and the call is
// answered DEADLINE_EXCEEDED with what it waited for (the seq a dead client
// never sent, say): the client hears why, not gRPC's bare "Deadline
// Exceeded", and no rank runs an op its caller has given up on. The work's
// completion and that timer race to answer; whichever wins the shared flag
// finishes the reactor, and only the winner touches it (gRPC deletes it
// after Finish).
class CallReactor final : public grpc::ServerUnaryReactor {
 public:
  CallReactor(grpc::CallbackServerContext* context, TimerQueue& timers,
              int rank)
      : deadline_(context->deadline()), timers_(timers), rank_(rank) {}

  void Fail(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
  // Says why the work attached next is still queued, should its call's
  // deadline come first; without one, the work is not withdrawn at the
  // deadline.
  void ExplainQueue(std::function<std::string()> why_queued) {
    why_queued_ = std::move(why_queued);
  }
  void Attach(std::shared_ptr<Work> work,
              std::function<absl::Status()> respond) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      work_ = work;
      if (cancelled_) work->RequestCancel();
    }
    auto answered = std::make_shared<std::atomic<bool>>(false);
    TimerQueue::TimerId timer = 0;
    if (deadline_ != std::chrono::system_clock::time_point::max() &&
        why_queued_ && work->withdrawable()) {
      // Time for the answer to travel back: a tenth of the call, within
      // [100 ms, 2 s].
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline_ - std::chrono::system_clock::now());
      const auto margin = std::clamp(left / 10, std::chrono::milliseconds(100),
                                     std::chrono::milliseconds(2000));
      const auto at = std::chrono::steady_clock::now() + (left - margin);
      work->SetCallDeadline(at);
      timer = timers_.Schedule(at, [answered, work, self = this,
                                    why_queued = why_queued_, rank = rank_] {
        if (!work->TryWithdraw()) return;  // it runs; its end answers
        if (answered->exchange(true)) return;
        self->Finish(grpc::Status(
            grpc::StatusCode::DEADLINE_EXCEEDED,
            absl::StrCat(work->Describe(), " was still queued at rank ", rank,
                         " as the call's deadline came: ", why_queued(),
                         ". It was withdrawn: no rank runs it")));
      });
    }
    work->OnDone([answered, self = this, respond = std::move(respond),
                  timers = &timers_, timer] {
      if (answered->exchange(true)) return;
      if (timer != 0) timers->Cancel(timer);
      self->Finish(ToGrpcStatus(respond()));
    });
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
    if (work_) work_->RequestCancel();
  }
  void OnDone() override { delete this; }

 private:
  const std::chrono::system_clock::time_point deadline_;
  TimerQueue& timers_;
  const int rank_;
  std::function<std::string()> why_queued_;
  std::mutex mutex_;
  bool cancelled_ = false;
  std::shared_ptr<Work> work_;
};

WorkerService::WorkerService(WorkerCore& core, WorkerIdentity identity,
                             RequestLimits limits)
    : core_(core), limits_(limits), identity_(std::move(identity)) {}

void WorkerService::set_address(std::string address) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  identity_.address = std::move(address);
}

void WorkerService::set_state(std::string state) {
  std::lock_guard<std::mutex> lock(state_mutex_);
  state_ = std::move(state);
}

grpc::ServerUnaryReactor* WorkerService::GetInfo(
    grpc::CallbackServerContext* context, const v1::GetInfoRequest*,
    v1::WorkerInfo* response) {
  response->set_rank(core_.rank());
  response->set_world_size(core_.world_size());
  response->set_generation(core_.generation());
  *response->mutable_device() = ToProto(core_.config().device);
  response->set_backend(core_.backend());
  response->set_worker_id(identity_.worker_id);
  response->set_tensor_count(static_cast<int64_t>(core_.List().size()));
  response->set_tensor_bytes(core_.BytesInUse());
  response->set_tensor_quota_bytes(core_.config().tensor_quota_bytes);
  for (const GroupInfo& group : core_.Groups()) {
    GroupToProto(group, response->add_groups());
  }
  response->set_version(identity_.version);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    response->set_state(state_);
    response->set_address(identity_.address);
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* WorkerService::AllocTensor(
    grpc::CallbackServerContext* context, const v1::AllocTensorRequest* request,
    v1::TensorInfo* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context, valid);
  }
  auto meta = TensorSpecFromProto(request->spec());
  if (!meta.ok()) return Finish(context, meta.status());
  auto fill = FillFromProto(request->fill());
  if (!fill.ok()) return Finish(context, fill.status());
  auto* reactor = context->DefaultReactor();
  core_.AllocAsync(*meta, *fill,
                   [reactor, response](absl::StatusOr<TensorMeta> result) {
                     if (result.ok()) *response = TensorInfoToProto(*result);
                     reactor->Finish(ToGrpcStatus(result.status()));
                   });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::FreeTensor(
    grpc::CallbackServerContext* context, const v1::FreeTensorRequest* request,
    v1::FreeTensorResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context, valid);
  }
  auto freed = core_.Free(request->name());
  if (freed.ok()) response->set_freed_bytes(*freed);
  return Finish(context, freed.status());
}

grpc::ServerUnaryReactor* WorkerService::ListTensors(
    grpc::CallbackServerContext* context, const v1::ListTensorsRequest*,
    v1::ListTensorsResponse* response) {
  for (const TensorMeta& meta : core_.List()) {
    *response->add_tensors() = TensorInfoToProto(meta);
  }
  response->set_bytes_in_use(core_.BytesInUse());
  response->set_quota_bytes(core_.config().tensor_quota_bytes);
  return Finish(context, absl::OkStatus());
}

grpc::ServerReadReactor<v1::WriteTensorChunk>* WorkerService::WriteTensor(
    grpc::CallbackServerContext*, v1::TensorInfo* response) {
  return new WriteReactor(core_, limits_, response);
}

grpc::ServerWriteReactor<v1::ReadTensorChunk>* WorkerService::ReadTensor(
    grpc::CallbackServerContext*, const v1::ReadTensorRequest* request) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return new RejectedReadReactor(valid);
  }
  return new ReadReactor(core_, *request);
}

grpc::ServerUnaryReactor* WorkerService::SummarizeTensor(
    grpc::CallbackServerContext* context,
    const v1::SummarizeTensorRequest* request, v1::TensorSummary* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context, valid);
  }
  auto* reactor = context->DefaultReactor();
  core_.SummarizeAsync(
      request->name(), request->head(),
      [reactor, response](absl::StatusOr<TensorSummary> summary) {
        if (summary.ok()) SummaryToProto(*summary, response);
        reactor->Finish(ToGrpcStatus(summary.status()));
      });
  return reactor;
}

// A request stamped with a generation this worker has not reached yet (the
// coordinator announced it; this worker is still re-forming) waits for it,
// bounded by the request's timeout, instead of failing.
void WorkerService::InGeneration(int64_t generation, int64_t timeout_ms,
                                 const std::string& group, int64_t seq,
                                 int64_t count, CallReactor* reactor,
                                 std::function<void()> start) {
  if (generation <= core_.generation()) {
    start();
    return;
  }
  const std::chrono::milliseconds timeout =
      timeout_ms > 0 ? std::chrono::milliseconds(timeout_ms)
                     : core_.config().default_op_timeout;
  core_.AwaitGeneration(
      generation, timeout,
      [this, reactor, start = std::move(start), group, seq, count,
       generation](absl::Status s) {
        if (s.ok()) {
          start();
        } else {
          reactor->Fail(core_.Refuse(group, seq, count, generation, s));
        }
      });
}

grpc::ServerUnaryReactor* WorkerService::Submit(
    grpc::CallbackServerContext* context, const v1::OpRequest* request,
    v1::OpResponse* response) {
  absl::StatusOr<OpSpec> spec = ValidThen(*request, limits_, OpSpecFromProto);
  if (!spec.ok()) {
    return Finish(context, core_.Refuse(request->group(), request->seq(), 1,
                                        request->generation(), spec.status()));
  }
  auto* reactor = new CallReactor(context, timers_, core_.rank());
  // Copied first: the lambda below takes the spec.
  const std::string group = spec->group;
  const int64_t seq = spec->seq;
  InGeneration(spec->generation, request->timeout_ms(), group, seq, 1, reactor,
               [this, spec = *std::move(spec), reactor, response] {
                 auto work = core_.Submit(spec);
                 if (!work.ok()) return reactor->Fail(work.status());
                 response->set_rank(core_.rank());
                 response->set_generation(core_.generation());
                 response->set_group(spec.group);
                 response->set_seq(spec.seq);
                 Work* raw = work->get();
                 if (spec.async) {
                   response->set_work_id(raw->id());
                   response->set_worker_id(identity_.worker_id);
                   response->set_state(StateToProto(raw->state()));
                   return reactor->Fail(absl::OkStatus());
                 }
                 reactor->ExplainQueue(WhyQueuedFor(spec.group, spec.seq));
                 reactor->Attach(*work, [raw, response] {
                   response->set_state(StateToProto(raw->state()));
                   *response->mutable_timing() = TimingToProto(raw->timing());
                   return raw->status();
                 });
               });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::SubmitPlan(
    grpc::CallbackServerContext* context, const v1::PlanRequest* request,
    v1::PlanResponse* response) {
  absl::StatusOr<PlanSpec> plan =
      ValidThen(*request, limits_, PlanSpecFromProto);
  if (!plan.ok()) {
    return Finish(context, core_.Refuse(request->group(), request->seq(),
                                        std::max(1, request->ops_size()),
                                        request->generation(), plan.status()));
  }
  auto* reactor = new CallReactor(context, timers_, core_.rank());
  const int64_t timeout_ms =
      request->ops_size() > 0 ? request->ops(0).timeout_ms() : 0;
  // Copied first: the lambda below takes the plan.
  const std::string group = plan->group;
  const int64_t seq = plan->seq;
  const int64_t count = std::max(1, request->ops_size());
  InGeneration(
      plan->generation, timeout_ms, group, seq, count, reactor,
      [this, plan = *std::move(plan), reactor, response] {
        auto work = core_.SubmitPlan(plan);
        if (!work.ok()) return reactor->Fail(work.status());
        response->set_rank(core_.rank());
        response->set_generation(core_.generation());
        response->set_group(plan.group);
        response->set_seq(plan.seq);
        PlanWork* held = work->get();
        reactor->ExplainQueue(WhyQueuedFor(plan.group, plan.seq));
        reactor->Attach(*work, [held, response] {
          const std::vector<PlanOpResult> results = held->results();
          const std::vector<OpSpec>& specs = held->op_specs();
          for (size_t i = 0; i < results.size() && i < specs.size(); ++i) {
            v1::WorkStatus* out = response->add_results();
            out->set_work_id(held->id());
            out->set_kind(ToProto(specs[i].kind));
            out->set_group(specs[i].group);
            out->set_seq(specs[i].seq);
            out->set_state(results[i].status.ok() ? v1::WORK_STATE_COMPLETED
                                                  : v1::WORK_STATE_FAILED);
            if (!results[i].status.ok()) {
              out->set_error_code(
                  static_cast<int32_t>(results[i].status.code()));
              out->set_error_message(std::string(results[i].status.message()));
            }
            out->mutable_timing()->set_device_us(results[i].device_us);
          }
          // Each op's outcome is in the results; the call succeeded if the
          // plan was run, whatever its ops did.
          return absl::OkStatus();
        });
      });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::ReleaseSequence(
    grpc::CallbackServerContext* context,
    const v1::ReleaseSequenceRequest* request, v1::ReleaseSequenceResponse*) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context, valid);
  }
  return Finish(context,
                core_.ReleaseSequence(request->group(), request->generation(),
                                      request->begin(), request->end()));
}

grpc::ServerUnaryReactor* WorkerService::Bench(
    grpc::CallbackServerContext* context, const v1::BenchRequest* request,
    v1::BenchResponse* response) {
  const v1::OpRequest& op = request->op();
  absl::StatusOr<OpSpec> spec =
      ValidThen(*request, limits_, [](const v1::BenchRequest& bench) {
        return OpSpecFromProto(bench.op());
      });
  if (!spec.ok()) {
    return Finish(context, core_.Refuse(op.group(), op.seq(), 1,
                                        op.generation(), spec.status()));
  }
  auto* reactor = new CallReactor(context, timers_, core_.rank());
  // Copied first: the lambda below takes the spec.
  const std::string group = spec->group;
  const int64_t seq = spec->seq;
  InGeneration(spec->generation, op.timeout_ms(), group, seq, 1, reactor,
               [this, spec = *std::move(spec),
                options = BenchOptionsFromProto(*request), reactor, response] {
                 auto work = core_.Bench(spec, options);
                 if (!work.ok()) return reactor->Fail(work.status());
                 BenchWork* held = work->get();
                 const int rank = core_.rank();
                 reactor->ExplainQueue(WhyQueuedFor(spec.group, spec.seq));
                 reactor->Attach(*work, [held, response, rank] {
                   const absl::Status status = held->status();
                   if (status.ok()) {
                     const BenchResult result = held->result();
                     response->set_rank(rank);
                     response->set_time_us(result.time_us);
                     response->set_avg_us(result.avg_us);
                     response->set_min_us(result.min_us);
                     response->set_max_us(result.max_us);
                     response->set_wrong(result.wrong);
                   }
                   return status;
                 });
               });
  return reactor;
}

absl::StatusOr<std::shared_ptr<Work>> WorkerService::IssuedWork(
    int64_t work_id, const std::string& worker_id) const {
  if (!worker_id.empty() && worker_id != identity_.worker_id) {
    return absl::NotFoundError(absl::StrCat(
        "no async work with id ", work_id, " on rank ", core_.rank(),
        ": it was issued by worker '", worker_id,
        "', which this rank's worker replaced ('", identity_.worker_id,
        "'); the work ended with that worker"));
  }
  std::shared_ptr<Work> work = core_.FindWork(work_id);
  if (!work) {
    return absl::NotFoundError(absl::StrCat(
        "no async work with id ", work_id, " on rank ", core_.rank(),
        " (ids are per worker; a waited work is forgotten)"));
  }
  return work;
}

grpc::ServerUnaryReactor* WorkerService::Wait(
    grpc::CallbackServerContext* context, const v1::WaitRequest* request,
    v1::WorkStatus* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context, valid);
  }
  absl::StatusOr<std::shared_ptr<Work>> found =
      IssuedWork(request->work_id(), request->worker_id());
  if (!found.ok()) return Finish(context, found.status());
  std::shared_ptr<Work> work = *std::move(found);
  auto* reactor = context->DefaultReactor();
  // Whichever of completion and the timer comes first finishes the reactor.
  struct Race {
    std::atomic<bool> finished{false};
    TimerQueue::TimerId timer = 0;
  };
  auto race = std::make_shared<Race>();
  const std::chrono::milliseconds timeout(
      request->timeout_ms() > 0 ? request->timeout_ms() : 3600 * 1000);
  WorkerCore* core = &core_;
  TimerQueue* timers = &timers_;
  race->timer = timers_.ScheduleAfter(timeout, [reactor, response, work, race] {
    if (race->finished.exchange(true)) return;
    WorkToProto(*work, response);
    reactor->Finish(grpc::Status(
        grpc::StatusCode::DEADLINE_EXCEEDED,
        absl::StrCat("work ", work->id(), " (",
                     std::string(OpKindName(work->spec().kind)), " seq ",
                     work->spec().seq,
                     ") is still running; wait again or test it")));
  });
  work->OnDone([reactor, response, work, race, core, timers] {
    if (race->finished.exchange(true)) return;
    timers->Cancel(race->timer);
    WorkToProto(*work, response);
    const absl::Status status = work->status();
    if (status.ok()) core->ForgetWork(work->id());
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::Test(
    grpc::CallbackServerContext* context, const v1::TestRequest* request,
    v1::WorkStatus* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context, valid);
  }
  absl::StatusOr<std::shared_ptr<Work>> work =
      IssuedWork(request->work_id(), request->worker_id());
  if (!work.ok()) return Finish(context, work.status());
  WorkToProto(**work, response);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* WorkerService::CreateGroup(
    grpc::CallbackServerContext* context, const v1::CreateGroupRequest* request,
    v1::GroupInfo* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context,
                  core_.Refuse(kWorldGroup, request->seq(), 1, 0, valid));
  }
  std::vector<int> ranks(request->ranks().begin(), request->ranks().end());
  // The split waits for every rank of the world; bound it by most of the
  // RPC's deadline when the caller set one, so the worker's clear error
  // arrives before the RPC gives up. Time spent waiting for the generation
  // or queued behind earlier world seqs counts against it too: Attach
  // gives the task its call's deadline, which the split may not outlast,
  // and withdraws it if it is still queued then.
  std::chrono::milliseconds timeout(0);
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        (deadline - std::chrono::system_clock::now()) * 4 / 5);
    if (timeout.count() <= 0) timeout = std::chrono::milliseconds(1);
  }
  auto* reactor = new CallReactor(context, timers_, core_.rank());
  // The world seq was reserved in request->generation(): a split for a
  // generation this worker is still forming waits for it, as ops do.
  InGeneration(
      request->generation(), timeout.count(), kWorldGroup, request->seq(), 1,
      reactor,
      [this, request, response, reactor, ranks = std::move(ranks), timeout] {
        auto work = core_.CreateGroup(request->name(), ranks, request->seq(),
                                      request->generation(), timeout);
        if (!work.ok()) return reactor->Fail(work.status());
        Work* held = work->get();
        WorkerCore* core = &core_;
        const std::string name = request->name();
        reactor->ExplainQueue(WhyQueuedFor(kWorldGroup, request->seq()));
        reactor->Attach(*work, [held, response, core, name] {
          absl::Status status = held->status();
          if (status.ok()) {
            for (const GroupInfo& group : core->Groups()) {
              if (group.name == name) GroupToProto(group, response);
            }
          }
          return status;
        });
      });
  return reactor;
}

std::function<std::string()> WorkerService::WhyQueuedFor(std::string group,
                                                         int64_t seq) {
  return [core = &core_, group = std::move(group), seq] {
    return core->WhyQueued(group, seq);
  };
}

grpc::ServerUnaryReactor* WorkerService::GetOpLog(
    grpc::CallbackServerContext* context, const v1::GetOpLogRequest* request,
    v1::OpLog* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context, valid);
  }
  auto log = core_.OpLog(request->group(), request->limit());
  if (!log.ok()) return Finish(context, log.status());
  response->set_rank(core_.rank());
  response->set_group(request->group().empty() ? kWorldGroup
                                               : request->group());
  response->set_next_seq(log->first);
  response->set_now_unix_us(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  for (const OpRecord& record : log->second) {
    OpRecordToProto(record, response->add_records());
  }
  return Finish(context, absl::OkStatus());
}

}  // namespace ccl
