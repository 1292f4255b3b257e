#include "server/rpc/worker_service.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/container/flat_hash_map.h"
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

// A tensor range, one chunk per message, each pulled from the core when the
// previous one is written, so memory stays at one chunk. The core checks the
// range (with the first chunk).
class TensorChunks final : public StreamSource {
 public:
  TensorChunks(WorkerCore& core, const v1::ReadTensorRequest& request,
               const TensorMeta& meta)
      : core_(core), name_(request.name()), dtype_(meta.dtype) {
    element_bytes_ = static_cast<int64_t>(DTypeSize(dtype_));
    next_ = request.offset();
    end_ =
        request.count() == 0 ? meta.numel : request.offset() + request.count();
    int64_t chunk_bytes =
        request.chunk_bytes() > 0 ? request.chunk_bytes() : kDefaultChunkBytes;
    chunk_bytes = std::min(chunk_bytes, kMaxChunkBytes);
    chunk_elements_ = std::max<int64_t>(1, chunk_bytes / element_bytes_);
  }

  absl::StatusOr<const google::protobuf::MessageLite*> Next() override {
    // The first call also lets the core check the whole range.
    if (next_ >= end_ && !first_) return nullptr;
    const int64_t count =
        first_ && next_ >= end_ ? 0 : std::min(chunk_elements_, end_ - next_);
    chunk_.Clear();
    chunk_.set_dtype(ToProto(dtype_));
    chunk_.set_offset_bytes(next_ * element_bytes_);
    if (first_) chunk_.set_total_bytes((end_ - next_) * element_bytes_);
    std::string* data = chunk_.mutable_data();
    data->reserve(static_cast<size_t>(count * element_bytes_));
    if (count > 0 || first_) {
      absl::Status status =
          core_.Read(name_, next_, count > 0 ? count : end_ - next_,
                     count * element_bytes_,
                     [&](int64_t, std::span<const std::byte> bytes) {
                       data->append(reinterpret_cast<const char*>(bytes.data()),
                                    bytes.size());
                       return false;  // one chunk per message
                     });
      if (!status.ok()) return status;
    }
    first_ = false;
    if (count == 0) return nullptr;
    next_ += count;
    return &chunk_;
  }

 private:
  WorkerCore& core_;
  const std::string name_;
  const DType dtype_;
  int64_t element_bytes_ = 1;
  int64_t chunk_elements_ = 1;
  int64_t next_ = 0;
  int64_t end_ = 0;
  bool first_ = true;
  v1::ReadTensorChunk chunk_;
};

// The chunks of one WriteTensor stream, written as they arrive.
class TensorWriter final
    : public StreamSink<v1::WriteTensorChunk, v1::TensorInfo> {
 public:
  TensorWriter(WorkerCore& core, const RequestLimits& limits)
      : core_(core), limits_(limits) {}

  absl::Status Take(const v1::WriteTensorChunk& chunk) override {
    if (absl::Status valid = ValidateRequest(chunk, limits_); !valid.ok()) {
      return valid;
    }
    if (name_.empty()) name_ = chunk.name();
    if (name_.empty()) {
      return absl::InvalidArgumentError(
          "the first WriteTensor chunk must name the tensor");
    }
    if (!chunk.name().empty() && chunk.name() != name_) {
      return absl::InvalidArgumentError(
          absl::StrCat("one WriteTensor stream writes one tensor: got '",
                       chunk.name(), "' after '", name_, "'"));
    }
    const std::string& data = chunk.data();
    auto result = core_.Write(
        name_, chunk.offset_bytes(),
        std::span<const std::byte>(
            reinterpret_cast<const std::byte*>(data.data()), data.size()));
    if (!result.ok()) return result.status();
    last_ = *std::move(result);
    return absl::OkStatus();
  }

  absl::Status End(v1::TensorInfo* response) override {
    if (name_.empty()) {
      return absl::InvalidArgumentError(
          "WriteTensor got no chunk naming a tensor");
    }
    if (last_.has_value()) *response = TensorInfoToProto(*last_);
    return absl::OkStatus();
  }

 private:
  WorkerCore& core_;
  const RequestLimits& limits_;
  std::string name_;
  std::optional<TensorMeta> last_;
};

}  // namespace

// Answers `call` when its work completes. A client that cancels the call
// cancels the work (Work::RequestCancel), also one attached after the cancel
// came; work that can be withdrawn and is still queued is withdrawn then, so
// it lets go of its tensors at once instead of when its turn comes (behind a
// seq nobody sends, the gap timeout away): the client that went away, or
// the one that takes its place, can free them.
//
// Work that can be withdrawn (Work::withdrawable) and is still queued a
// little before the call's deadline is withdrawn then, and the call is
// answered DEADLINE_EXCEEDED with what it waited for (`why_queued`: the seq a
// dead client never sent, say): the client hears why, not gRPC's bare
// "Deadline Exceeded", and no rank runs an op its caller has given up on.
// Without `why_queued` the work is not withdrawn at the deadline. The work's
// completion and that timer race to answer; whichever wins the shared flag
// finishes the call, and only the winner touches it (it may be gone after).
void WorkerService::AnswerWhenDone(UnaryAnswer* call,
                                   std::shared_ptr<Work> work,
                                   std::function<std::string()> why_queued,
                                   std::function<absl::Status()> respond) {
  call->CallCancelled([work] {
    if (work->withdrawable() && work->TryWithdraw()) return;
    work->RequestCancel();
  });
  auto answered = std::make_shared<std::atomic<bool>>(false);
  TimerQueue::TimerId timer = 0;
  const auto deadline = call->call_deadline();
  if (deadline != std::chrono::system_clock::time_point::max() && why_queued &&
      work->withdrawable()) {
    // Time for the answer to travel back: a tenth of the call, within
    // [100 ms, 2 s].
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::system_clock::now());
    const auto margin = std::clamp(left / 10, std::chrono::milliseconds(100),
                                   std::chrono::milliseconds(2000));
    const auto at = std::chrono::steady_clock::now() + (left - margin);
    work->SetCallDeadline(at);
    timer = timers_.Schedule(
        at, [answered, work, call, why_queued = std::move(why_queued),
             rank = core_.rank()] {
          if (!work->TryWithdraw()) return;  // it runs; its end answers
          if (answered->exchange(true)) return;
          call->Finish(absl::DeadlineExceededError(
              absl::StrCat(work->Describe(), " was still queued at rank ", rank,
                           " as the call's deadline came: ", why_queued(),
                           ". It was withdrawn: no rank runs it")));
        });
  }
  work->OnDone(
      [answered, call, respond = std::move(respond), timers = &timers_, timer] {
        if (answered->exchange(true)) return;
        if (timer != 0) timers->Cancel(timer);
        call->Finish(respond());
      });
}

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

void WorkerService::Register(grpc::ServerBuilder& builder) {
  builder.RegisterService(methods_.service());
}

absl::Status WorkerService::Serve(ServerQueue& queue) {
  // Each method's index in the service, looked up once by name: a method
  // renamed in worker.proto without its handler here fails the start.
  absl::flat_hash_map<std::string, int> index;
  for (const char* name :
       {"GetInfo", "AllocTensor", "FreeTensor", "ListTensors", "WriteTensor",
        "ReadTensor", "SummarizeTensor", "Submit", "SubmitStream", "SubmitPlan",
        "ReleaseSequence", "Bench", "Wait", "Test", "CreateGroup",
        "DestroyGroup", "GetOpLog"}) {
    absl::StatusOr<int> found = methods_.MethodIndex(name);
    if (!found.ok()) return found.status();
    index[name] = *found;
  }
  auto serve = [&]<typename Call>(const char* name,
                                  void (WorkerService::*member)(Call*)) {
    Call::Serve(queue, methods_, index.at(name),
                [this, member](Call* call) { (this->*member)(call); });
  };
  serve("GetInfo", &WorkerService::GetInfo);
  serve("AllocTensor", &WorkerService::AllocTensor);
  serve("FreeTensor", &WorkerService::FreeTensor);
  serve("ListTensors", &WorkerService::ListTensors);
  serve("SummarizeTensor", &WorkerService::SummarizeTensor);
  serve("Submit", &WorkerService::Submit);
  serve("SubmitPlan", &WorkerService::SubmitPlan);
  serve("ReleaseSequence", &WorkerService::ReleaseSequence);
  serve("Bench", &WorkerService::Bench);
  serve("Wait", &WorkerService::Wait);
  serve("Test", &WorkerService::Test);
  serve("CreateGroup", &WorkerService::CreateGroup);
  serve("DestroyGroup", &WorkerService::DestroyGroup);
  serve("GetOpLog", &WorkerService::GetOpLog);
  ClientStreamCall<v1::WriteTensorChunk, v1::TensorInfo>::Serve(
      queue, methods_, index.at("WriteTensor"),
      [this] { return std::make_unique<TensorWriter>(core_, limits_); });
  SubmitStreamCall::Serve(
      queue, methods_, index.at("SubmitStream"),
      [this](SubmitStreamCall::Exchange* exchange) { SubmitStream(exchange); });
  ServerStreamCall<v1::ReadTensorRequest>::Serve(
      queue, methods_, index.at("ReadTensor"),
      [this](const v1::ReadTensorRequest& request) {
        return ReadTensor(request);
      });
  return absl::OkStatus();
}

void WorkerService::GetInfo(GetInfoCall* call) {
  v1::WorkerInfo* response = call->response();
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
  call->Finish(absl::OkStatus());
}

void WorkerService::AllocTensor(AllocTensorCall* call) {
  const v1::AllocTensorRequest& request = call->request();
  if (absl::Status valid = ValidateRequest(request, limits_); !valid.ok()) {
    return call->Finish(valid);
  }
  auto meta = TensorSpecFromProto(request.spec());
  if (!meta.ok()) return call->Finish(meta.status());
  auto fill = FillFromProto(request.fill());
  if (!fill.ok()) return call->Finish(fill.status());
  RankView view;
  view.generation = request.generation();
  if (request.has_rank()) view.rank = request.rank();
  // A wait for the rank ends a little before the call's deadline, so that
  // the caller gets the worker's reason rather than its own timeout.
  std::chrono::milliseconds wait = core_.config().default_op_timeout;
  if (const auto deadline = call->call_deadline();
      deadline != std::chrono::system_clock::time_point::max()) {
    wait = std::min(wait,
                    std::chrono::duration_cast<std::chrono::milliseconds>(
                        (deadline - std::chrono::system_clock::now()) * 4 / 5));
  }
  core_.AllocAsync(*meta, *fill, view, wait,
                   [call](absl::StatusOr<TensorMeta> result) {
                     if (result.ok()) {
                       *call->response() = TensorInfoToProto(*result);
                     }
                     call->Finish(result.status());
                   });
}

void WorkerService::FreeTensor(FreeTensorCall* call) {
  if (absl::Status valid = ValidateRequest(call->request(), limits_);
      !valid.ok()) {
    return call->Finish(valid);
  }
  auto freed = core_.Free(call->request().name());
  if (freed.ok()) call->response()->set_freed_bytes(*freed);
  call->Finish(freed.status());
}

void WorkerService::ListTensors(ListTensorsCall* call) {
  v1::ListTensorsResponse* response = call->response();
  for (const TensorMeta& meta : core_.List()) {
    *response->add_tensors() = TensorInfoToProto(meta);
  }
  response->set_bytes_in_use(core_.BytesInUse());
  response->set_quota_bytes(core_.config().tensor_quota_bytes);
  call->Finish(absl::OkStatus());
}

absl::StatusOr<std::unique_ptr<StreamSource>> WorkerService::ReadTensor(
    const v1::ReadTensorRequest& request) {
  if (absl::Status valid = ValidateRequest(request, limits_); !valid.ok()) {
    return valid;
  }
  auto meta = core_.Lookup(request.name());
  if (!meta.ok()) return meta.status();
  return std::make_unique<TensorChunks>(core_, request, *meta);
}

void WorkerService::SummarizeTensor(SummarizeTensorCall* call) {
  const v1::SummarizeTensorRequest& request = call->request();
  if (absl::Status valid = ValidateRequest(request, limits_); !valid.ok()) {
    return call->Finish(valid);
  }
  core_.SummarizeAsync(request.name(), request.head(),
                       [call](absl::StatusOr<TensorSummary> summary) {
                         if (summary.ok()) {
                           SummaryToProto(*summary, call->response());
                         }
                         call->Finish(summary.status());
                       });
}

void WorkerService::Submit(SubmitCall* call) {
  SubmitOp(call->request(), call->response(), call);
}

void WorkerService::SubmitStream(SubmitStreamCall::Exchange* exchange) {
  SubmitOp(exchange->request().op(), exchange->response()->mutable_response(),
           exchange);
}

void WorkerService::SubmitOp(const v1::OpRequest& request,
                             v1::OpResponse* response, UnaryAnswer* call) {
  absl::StatusOr<OpSpec> spec = ValidThen(request, limits_, OpSpecFromProto);
  if (!spec.ok()) {
    return call->Finish(core_.Refuse(request.group(), request.seq(), 1,
                                     request.generation(), spec.status()));
  }
  const std::string group = spec->group;
  const int64_t seq = spec->seq;
  const bool async = spec->async;
  core_.SubmitInGeneration(
      *std::move(spec), std::chrono::milliseconds(request.timeout_ms()),
      [this, call, response, group, seq,
       async](absl::StatusOr<std::shared_ptr<Work>> work) {
        if (!work.ok()) return call->Finish(work.status());
        response->set_rank(core_.rank());
        response->set_generation(core_.generation());
        response->set_group(group);
        response->set_seq(seq);
        Work* raw = work->get();
        if (async) {
          response->set_work_id(raw->id());
          response->set_worker_id(identity_.worker_id);
          response->set_state(ToProto(raw->state()));
          return call->Finish(absl::OkStatus());
        }
        AnswerWhenDone(call, *work, WhyQueuedFor(group, seq), [raw, response] {
          response->set_state(ToProto(raw->state()));
          *response->mutable_timing() = TimingToProto(raw->timing());
          return raw->status();
        });
      });
}

void WorkerService::SubmitPlan(SubmitPlanCall* call) {
  const v1::PlanRequest& request = call->request();
  absl::StatusOr<PlanSpec> plan =
      ValidThen(request, limits_, PlanSpecFromProto);
  if (!plan.ok()) {
    return call->Finish(core_.Refuse(request.group(), request.seq(),
                                     std::max(1, request.ops_size()),
                                     request.generation(), plan.status()));
  }
  const std::chrono::milliseconds wait(
      request.ops_size() > 0 ? request.ops(0).timeout_ms() : 0);
  const std::string group = plan->group;
  const int64_t seq = plan->seq;
  core_.SubmitPlanInGeneration(
      *std::move(plan), wait,
      [this, group, seq, call](absl::StatusOr<std::shared_ptr<PlanWork>> work) {
        if (!work.ok()) return call->Finish(work.status());
        v1::PlanResponse* response = call->response();
        response->set_rank(core_.rank());
        response->set_generation(core_.generation());
        response->set_group(group);
        response->set_seq(seq);
        PlanWork* held = work->get();
        AnswerWhenDone(call, *work, WhyQueuedFor(group, seq), [held, response] {
          const std::vector<PlanOpResult> results = held->results();
          const std::vector<OpSpec>& specs = held->op_specs();
          response->mutable_results()->Reserve(
              static_cast<int>(std::min(results.size(), specs.size())));
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
}

void WorkerService::ReleaseSequence(ReleaseSequenceCall* call) {
  const v1::ReleaseSequenceRequest& request = call->request();
  if (absl::Status valid = ValidateRequest(request, limits_); !valid.ok()) {
    return call->Finish(valid);
  }
  call->Finish(core_.ReleaseSequence(request.group(), request.generation(),
                                     request.begin(), request.end()));
}

void WorkerService::Bench(BenchCall* call) {
  const v1::BenchRequest& request = call->request();
  const v1::OpRequest& op = request.op();
  absl::StatusOr<OpSpec> spec =
      ValidThen(request, limits_, [](const v1::BenchRequest& bench) {
        return OpSpecFromProto(bench.op());
      });
  if (!spec.ok()) {
    return call->Finish(
        core_.Refuse(op.group(), op.seq(), 1, op.generation(), spec.status()));
  }
  const std::string group = spec->group;
  const int64_t seq = spec->seq;
  core_.BenchInGeneration(
      *std::move(spec), BenchOptionsFromProto(request),
      std::chrono::milliseconds(op.timeout_ms()),
      [this, group, seq,
       call](absl::StatusOr<std::shared_ptr<BenchWork>> work) {
        if (!work.ok()) return call->Finish(work.status());
        BenchWork* held = work->get();
        const int rank = core_.rank();
        v1::BenchResponse* response = call->response();
        AnswerWhenDone(call, *work, WhyQueuedFor(group, seq),
                       [held, response, rank] {
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

void WorkerService::Wait(WaitCall* call) {
  const v1::WaitRequest& request = call->request();
  if (absl::Status valid = ValidateRequest(request, limits_); !valid.ok()) {
    return call->Finish(valid);
  }
  absl::StatusOr<std::shared_ptr<Work>> found =
      IssuedWork(request.work_id(), request.worker_id());
  if (!found.ok()) return call->Finish(found.status());
  std::shared_ptr<Work> work = *std::move(found);
  // Whichever of completion and the timer comes first finishes the call.
  struct Race {
    std::atomic<bool> finished{false};
    TimerQueue::TimerId timer = 0;
  };
  auto race = std::make_shared<Race>();
  const std::chrono::milliseconds timeout(
      request.timeout_ms() > 0 ? request.timeout_ms() : 3600 * 1000);
  WorkerCore* core = &core_;
  TimerQueue* timers = &timers_;
  race->timer = timers_.ScheduleAfter(timeout, [call, work, race] {
    if (race->finished.exchange(true)) return;
    WorkToProto(*work, call->response());
    call->Finish(absl::DeadlineExceededError(absl::StrCat(
        "work ", work->id(), " (", std::string(OpKindName(work->spec().kind)),
        " seq ", work->spec().seq,
        ") is still running; wait again or test it")));
  });
  work->OnDone([call, work, race, core, timers] {
    if (race->finished.exchange(true)) return;
    timers->Cancel(race->timer);
    WorkToProto(*work, call->response());
    const absl::Status status = work->status();
    if (status.ok()) core->ForgetWork(work->id());
    call->Finish(status);
  });
}

void WorkerService::Test(TestCall* call) {
  const v1::TestRequest& request = call->request();
  if (absl::Status valid = ValidateRequest(request, limits_); !valid.ok()) {
    return call->Finish(valid);
  }
  absl::StatusOr<std::shared_ptr<Work>> work =
      IssuedWork(request.work_id(), request.worker_id());
  if (!work.ok()) return call->Finish(work.status());
  WorkToProto(**work, call->response());
  call->Finish(absl::OkStatus());
}

void WorkerService::DestroyGroup(DestroyGroupCall* call) {
  if (absl::Status valid = ValidateRequest(call->request(), limits_);
      !valid.ok()) {
    return call->Finish(valid);
  }
  call->Finish(core_.DestroyGroup(call->request().name()));
}

void WorkerService::CreateGroup(CreateGroupCall* call) {
  const v1::CreateGroupRequest& request = call->request();
  if (absl::Status valid = ValidateRequest(request, limits_); !valid.ok()) {
    return call->Finish(core_.Refuse(kWorldGroup, request.seq(), 1, 0, valid));
  }
  std::vector<int> ranks(request.ranks().begin(), request.ranks().end());
  // The split waits for every rank of the world; bound it by most of the
  // RPC's deadline when the caller set one, so the worker's clear error
  // arrives before the RPC gives up. Time spent waiting for the generation
  // or queued behind earlier world seqs counts against it too:
  // AnswerWhenDone gives the task its call's deadline, which the split may
  // not outlast, and withdraws it if it is still queued then.
  std::chrono::milliseconds timeout(0);
  const auto deadline = call->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        (deadline - std::chrono::system_clock::now()) * 4 / 5);
    if (timeout.count() <= 0) timeout = std::chrono::milliseconds(1);
  }
  // The world seq was reserved in request.generation(): a split for a
  // generation this worker is still forming waits for it, as ops do.
  core_.CreateGroupInGeneration(
      request.name(), std::move(ranks), request.seq(), request.generation(),
      timeout, timeout,
      [this, call](absl::StatusOr<std::shared_ptr<Work>> work) {
        const v1::CreateGroupRequest& request = call->request();
        if (!work.ok()) return call->Finish(work.status());
        Work* held = work->get();
        WorkerCore* core = &core_;
        v1::GroupInfo* response = call->response();
        AnswerWhenDone(call, *work, WhyQueuedFor(kWorldGroup, request.seq()),
                       [held, response, core, name = request.name()] {
                         absl::Status status = held->status();
                         if (status.ok()) {
                           for (const GroupInfo& group : core->Groups()) {
                             if (group.name == name) {
                               GroupToProto(group, response);
                             }
                           }
                         }
                         return status;
                       });
      });
}

std::function<std::string()> WorkerService::WhyQueuedFor(std::string group,
                                                         int64_t seq) {
  return [core = &core_, group = std::move(group), seq] {
    return core->WhyQueued(group, seq);
  };
}

void WorkerService::GetOpLog(GetOpLogCall* call) {
  const v1::GetOpLogRequest& request = call->request();
  if (absl::Status valid = ValidateRequest(request, limits_); !valid.ok()) {
    return call->Finish(valid);
  }
  auto log = core_.OpLog(request.group(), request.limit());
  if (!log.ok()) return call->Finish(log.status());
  v1::OpLog* response = call->response();
  response->set_rank(core_.rank());
  response->set_group(request.group().empty() ? kWorldGroup : request.group());
  response->set_next_seq(log->first);
  response->set_now_unix_us(
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
  for (const OpRecord& record : log->second) {
    OpRecordToProto(record, response->add_records());
  }
  call->Finish(absl::OkStatus());
}

}  // namespace ccl
