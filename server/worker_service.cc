#include "server/worker_service.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_status.h"
#include "common/proto_convert.h"
#include "common/status_macros.h"

namespace ccl {
namespace {

constexpr int64_t kDefaultChunkBytes = 1 << 20;
// gRPC's default receive limit is 4 MiB; stay well under it with framing.
constexpr int64_t kMaxChunkBytes = 3 << 20;

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

v1::WorkState StateToProto(WorkState state) {
  switch (state) {
    case WorkState::kQueued:
      return v1::WORK_STATE_QUEUED;
    case WorkState::kRunning:
      return v1::WORK_STATE_RUNNING;
    case WorkState::kCompleted:
      return v1::WORK_STATE_COMPLETED;
    case WorkState::kFailed:
      return v1::WORK_STATE_FAILED;
  }
  return v1::WORK_STATE_UNSPECIFIED;
}

FillKind FillKindFromProto(v1::FillKind kind) {
  switch (kind) {
    case v1::FILL_KIND_ONES:
      return FillKind::kOnes;
    case v1::FILL_KIND_CONSTANT:
      return FillKind::kConstant;
    case v1::FILL_KIND_RANK:
      return FillKind::kRank;
    case v1::FILL_KIND_RANK_PLUS_ONE:
      return FillKind::kRankPlusOne;
    case v1::FILL_KIND_ARANGE:
      return FillKind::kArange;
    case v1::FILL_KIND_ARANGE_PLUS_RANK:
      return FillKind::kArangePlusRank;
    case v1::FILL_KIND_RANDOM:
      return FillKind::kRandom;
    case v1::FILL_KIND_AFFINE:
      return FillKind::kAffine;
    case v1::FILL_KIND_UNINITIALIZED:
      return FillKind::kUninitialized;
    default:
      return FillKind::kZeros;
  }
}

// A sequenced request refused by validation still takes its seq on this
// rank, as one the core refuses does, so the other ranks of the group do not
// wait out a gap for it. A no-op at that seq is how the core is told.
absl::Status RefuseSequenced(WorkerCore& core, const std::string& group,
                             int64_t seq, int64_t generation,
                             absl::Status reason) {
  if (seq < 0) return reason;
  OpSpec nop;
  nop.group = group.empty() ? kWorldGroup : group;
  nop.seq = seq;
  nop.kind = OpKind::kNop;
  nop.generation = generation;
  auto work = core.Submit(nop);
  if (work.ok()) core.ForgetWork((*work)->id());
  return reason;
}

void GroupToProto(const GroupInfo& group, v1::GroupInfo* out) {
  out->set_name(group.name);
  for (int rank : group.ranks) out->add_ranks(rank);
  out->set_group_rank(group.group_rank);
  out->set_next_seq(group.next_seq);
  out->set_backend(group.backend);
  out->set_state(group.state);
}

// Streams a tensor range one chunk per write, pulling each chunk from the
// core when the previous write is done, so memory stays at one chunk.
class ReadReactor final : public grpc::ServerWriteReactor<v1::ReadTensorChunk> {
 public:
  ReadReactor(WorkerCore& core, const v1::ReadTensorRequest& request)
      : core_(core), name_(request.name()) {
    absl::Status status = Start(request);
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
      return;
    }
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
  absl::Status Start(const v1::ReadTensorRequest& request) {
    const std::vector<TensorMeta> tensors = core_.List();
    auto it =
        std::find_if(tensors.begin(), tensors.end(),
                     [&](const TensorMeta& m) { return m.name == name_; });
    if (it == tensors.end()) {
      return absl::NotFoundError(absl::StrCat("no tensor named '", name_, "'"));
    }
    dtype_ = it->dtype;
    element_bytes_ = static_cast<int64_t>(DTypeSize(dtype_));
    if (request.offset() < 0 || request.count() < 0 ||
        request.offset() > it->numel) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "read range offset %d count %d is outside tensor '%s' of %d elements",
          request.offset(), request.count(), name_, it->numel));
    }
    next_ = request.offset();
    end_ =
        request.count() == 0 ? it->numel : request.offset() + request.count();
    if (end_ > it->numel) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "read range [%d, %d) is outside tensor '%s' of %d elements", next_,
          end_, name_, it->numel));
    }
    int64_t chunk_bytes =
        request.chunk_bytes() > 0 ? request.chunk_bytes() : kDefaultChunkBytes;
    chunk_bytes = std::min(chunk_bytes, kMaxChunkBytes);
    chunk_elements_ = std::max<int64_t>(1, chunk_bytes / element_bytes_);
    return absl::OkStatus();
  }

  void Next() {
    if (next_ >= end_) {
      Finish(grpc::Status::OK);
      return;
    }
    const int64_t count = std::min(chunk_elements_, end_ - next_);
    chunk_.Clear();
    chunk_.set_dtype(ToProto(dtype_));
    chunk_.set_offset_bytes(next_ * element_bytes_);
    std::string* data = chunk_.mutable_data();
    data->reserve(count * element_bytes_);
    absl::Status status =
        core_.Read(name_, next_, count, count * element_bytes_,
                   [&](int64_t, std::span<const std::byte> bytes) {
                     data->append(reinterpret_cast<const char*>(bytes.data()),
                                  bytes.size());
                     return true;
                   });
    if (!status.ok()) {
      Finish(ToGrpcStatus(status));
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

absl::StatusOr<TensorMeta> TensorSpecFromProto(const v1::TensorSpec& spec) {
  TensorMeta meta;
  meta.name = spec.name();
  CCL_ASSIGN_OR_RETURN(meta.dtype, FromProto(spec.dtype()));
  meta.shape.assign(spec.shape().begin(), spec.shape().end());
  CCL_ASSIGN_OR_RETURN(meta.device, FromProto(spec.device()));
  return meta;
}

absl::StatusOr<Fill> FillFromProto(const v1::Fill& fill) {
  if (!v1::FillKind_IsValid(fill.kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown fill kind ", fill.kind()));
  }
  Fill out;
  out.kind = FillKindFromProto(fill.kind());
  out.value = fill.value();
  out.rank_scale = fill.rank_scale();
  out.step = fill.step();
  out.seed = fill.seed();
  return out;
}

absl::StatusOr<OpSpec> OpSpecFromProto(const v1::OpRequest& request) {
  OpSpec spec;
  spec.group = request.group().empty() ? kWorldGroup : request.group();
  if (request.seq() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq ", request.seq(), " is negative"));
  }
  spec.seq = request.seq();
  CCL_ASSIGN_OR_RETURN(spec.kind, FromProto(request.kind()));
  spec.input = request.input();
  spec.output = request.output();
  if (request.reduce_op() != v1::REDUCE_OP_UNSPECIFIED) {
    CCL_ASSIGN_OR_RETURN(spec.reduce_op, FromProto(request.reduce_op()));
  }
  spec.premul_scale = request.premul_scale();
  if (spec.reduce_op == ReduceOp::kPremulSum && request.premul_scale() == 0) {
    return absl::InvalidArgumentError(
        "premul_sum needs a non-zero premul_scale");
  }
  spec.root = request.root();
  spec.peer = request.peer();
  if (request.timeout_ms() < 0) {
    return absl::InvalidArgumentError("timeout_ms is negative");
  }
  spec.timeout = std::chrono::milliseconds(request.timeout_ms());
  spec.generation = request.generation();
  spec.agree = !request.skip_agreement();
  return spec;
}

v1::TensorInfo TensorInfoToProto(const TensorMeta& meta) {
  v1::TensorInfo info;
  auto* spec = info.mutable_spec();
  spec->set_name(meta.name);
  spec->set_dtype(ToProto(meta.dtype));
  for (int64_t dim : meta.shape) spec->add_shape(dim);
  *spec->mutable_device() = ToProto(meta.device);
  info.set_numel(meta.numel);
  info.set_bytes(meta.bytes);
  return info;
}

v1::OpTiming TimingToProto(const OpTiming& timing) {
  v1::OpTiming out;
  out.set_enqueued_unix_us(timing.enqueued_unix_us);
  out.set_queue_us(timing.queue_us);
  out.set_device_us(timing.device_us);
  out.set_total_us(timing.total_us);
  return out;
}

void WorkToProto(const Work& work, v1::WorkStatus* out) {
  out->set_work_id(work.id());
  const WorkState state = work.state();
  out->set_state(StateToProto(state));
  out->set_kind(ToProto(work.spec().kind));
  out->set_group(work.spec().group);
  out->set_seq(work.spec().seq);
  if (state == WorkState::kFailed) {
    const absl::Status status = work.status();
    out->set_error_code(static_cast<int32_t>(status.code()));
    out->set_error_message(std::string(status.message()));
  }
  *out->mutable_timing() = TimingToProto(work.timing());
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
  if (absl::Status valid = ValidateRequest(
          *request, limits_, static_cast<int64_t>(core_.List().size()));
      !valid.ok()) {
    return Finish(context, valid);
  }
  auto meta = TensorSpecFromProto(request->spec());
  if (!meta.ok()) return Finish(context, meta.status());
  auto fill = FillFromProto(request->fill());
  if (!fill.ok()) return Finish(context, fill.status());
  auto result = core_.Alloc(*meta, *fill);
  if (result.ok()) *response = TensorInfoToProto(*result);
  return Finish(context, result.status());
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
  auto summary = core_.Summarize(request->name(), request->head());
  if (summary.ok()) {
    *response->mutable_info() = TensorInfoToProto(summary->meta);
    response->set_sum(summary->sum);
    response->set_min(summary->min);
    response->set_max(summary->max);
    response->set_checksum(absl::StrFormat("%016x", summary->checksum));
    for (double value : summary->head) response->add_head(value);
    response->set_nan_count(summary->nan_count);
  }
  return Finish(context, summary.status());
}

grpc::ServerUnaryReactor* WorkerService::Submit(
    grpc::CallbackServerContext* context, const v1::OpRequest* request,
    v1::OpResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context,
                  RefuseSequenced(core_, request->group(), request->seq(),
                                  request->generation(), valid));
  }
  auto spec = OpSpecFromProto(*request);
  if (!spec.ok()) return Finish(context, spec.status());
  auto work = core_.Submit(*spec);
  if (!work.ok()) return Finish(context, work.status());
  response->set_rank(core_.rank());
  response->set_generation(core_.generation());
  response->set_group(spec->group);
  response->set_seq(spec->seq);
  if (request->async()) {
    response->set_work_id((*work)->id());
    response->set_state(StateToProto((*work)->state()));
    return Finish(context, absl::OkStatus());
  }
  // The async table is for async ops only; a sync op is answered here.
  core_.ForgetWork((*work)->id());
  auto* reactor = context->DefaultReactor();
  std::shared_ptr<Work> held = *work;
  held->OnDone([reactor, response, held] {
    response->set_state(StateToProto(held->state()));
    *response->mutable_timing() = TimingToProto(held->timing());
    reactor->Finish(ToGrpcStatus(held->status()));
  });
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::Bench(
    grpc::CallbackServerContext* context, const v1::BenchRequest* request,
    v1::BenchResponse* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    const v1::OpRequest& op = request->op();
    return Finish(context, RefuseSequenced(core_, op.group(), op.seq(),
                                           op.generation(), valid));
  }
  auto spec = OpSpecFromProto(request->op());
  if (!spec.ok()) return Finish(context, spec.status());
  auto* reactor = context->DefaultReactor();
  const int rank = core_.rank();
  absl::Status status = core_.Bench(
      *spec, request->warmup_iters(), request->iters(), request->check(),
      [reactor, response, rank](absl::StatusOr<BenchResult> result) {
        if (result.ok()) {
          response->set_rank(rank);
          response->set_avg_us(result->avg_us);
          response->set_min_us(result->min_us);
          response->set_max_us(result->max_us);
          response->set_wrong(result->wrong);
        }
        reactor->Finish(ToGrpcStatus(result.status()));
      });
  if (!status.ok()) reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* WorkerService::Wait(
    grpc::CallbackServerContext* context, const v1::WaitRequest* request,
    v1::WorkStatus* response) {
  if (absl::Status valid = ValidateRequest(*request, limits_); !valid.ok()) {
    return Finish(context, valid);
  }
  std::shared_ptr<Work> work = core_.FindWork(request->work_id());
  if (!work) {
    return Finish(context,
                  absl::NotFoundError(absl::StrCat(
                      "no async work with id ", request->work_id(), " on rank ",
                      core_.rank(),
                      " (ids are per worker; a waited work is forgotten)")));
  }
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
  std::shared_ptr<Work> work = core_.FindWork(request->work_id());
  if (!work) {
    return Finish(context, absl::NotFoundError(absl::StrCat(
                               "no async work with id ", request->work_id(),
                               " on rank ", core_.rank())));
  }
  WorkToProto(*work, response);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* WorkerService::CreateGroup(
    grpc::CallbackServerContext* context, const v1::CreateGroupRequest* request,
    v1::GroupInfo* response) {
  if (absl::Status valid = ValidateRequest(
          *request, limits_, static_cast<int64_t>(core_.Groups().size()));
      !valid.ok()) {
    return Finish(
        context, RefuseSequenced(core_, kWorldGroup, request->seq(), 0, valid));
  }
  std::vector<int> ranks(request->ranks().begin(), request->ranks().end());
  // The split waits for every rank of the world; bound it by most of the
  // RPC's deadline when the caller set one, so the worker's clear error
  // arrives before the RPC gives up.
  std::chrono::milliseconds timeout(0);
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
        (deadline - std::chrono::system_clock::now()) * 4 / 5);
    if (timeout.count() <= 0) timeout = std::chrono::milliseconds(1);
  }
  auto work =
      core_.CreateGroup(request->name(), ranks, request->seq(), timeout);
  if (!work.ok()) return Finish(context, work.status());
  auto* reactor = context->DefaultReactor();
  std::shared_ptr<Work> held = *work;
  WorkerCore* core = &core_;
  const std::string name = request->name();
  held->OnDone([reactor, response, held, core, name] {
    absl::Status status = held->status();
    if (status.ok()) {
      for (const GroupInfo& group : core->Groups()) {
        if (group.name == name) GroupToProto(group, response);
      }
    }
    reactor->Finish(ToGrpcStatus(status));
  });
  return reactor;
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
    v1::OpRecord* out = response->add_records();
    out->set_seq(record.spec.seq);
    out->set_kind(ToProto(record.spec.kind));
    out->set_dtype(ToProto(record.dtype));
    out->set_count(record.count);
    out->set_root(record.spec.root);
    out->set_peer(record.spec.peer);
    out->set_reduce_op(ToProto(record.spec.reduce_op));
    out->set_input(record.spec.input);
    out->set_output(record.spec.output);
    out->set_state(StateToProto(record.state));
    *out->mutable_timing() = TimingToProto(record.timing);
    if (!record.status.ok()) {
      out->set_error_code(static_cast<int32_t>(record.status.code()));
      out->set_error_message(std::string(record.status.message()));
    }
    out->set_work_id(record.work_id);
    out->set_generation(record.spec.generation);
  }
  return Finish(context, absl::OkStatus());
}

}  // namespace ccl
