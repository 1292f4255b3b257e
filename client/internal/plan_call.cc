// Plans: one SubmitPlan per rank, all in flight together. A worker that
// has no SubmitPlan (one older than the plan) answers UNIMPLEMENTED having
// taken none of the plan's seqs, so the client runs that rank's steps one
// Submit each at the same seqs, starting the moment the answer arrives: the
// ranks that do run the plan wait in each step for this one, as they would
// for a slow peer.
#include <google/protobuf/arena.h>

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/internal/client_impl.h"
#include "client/internal/convert.h"
#include "common/proto_convert.h"

namespace ccl::client {
namespace {

using std::chrono::milliseconds;

// One rank's plan: the SubmitPlan call, and its step-by-step fallback. The
// caller owns it and frees it once `countdown` said it is done (see
// fan_out.h for why no completion may own a context).
class RankPlan {
 public:
  RankPlan(v1::Worker::Stub* stub, milliseconds client_timeout,
           internal::Countdown* countdown)
      : stub_(stub), client_timeout_(client_timeout), countdown_(countdown) {}

  // Filled by the caller before Start.
  v1::PlanRequest& request() { return request_; }

  void Start() {
    milliseconds total(0);
    for (const auto& op : request_.ops())
      total += milliseconds(op.timeout_ms());
    context_.set_deadline(
        internal::ClientImpl::OpDeadline(total, client_timeout_));
    stub_->async()->SubmitPlan(
        &context_, &request_, &response_,
        [this](grpc::Status status) { OnPlanDone(status); });
  }

  absl::StatusOr<PlanResult> TakeResult() { return std::move(result_); }

 private:
  void OnPlanDone(const grpc::Status& status) {
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      emulated_.generation = request_.generation();
      emulated_.group = request_.group();
      emulated_.first_seq = request_.seq();
      emulated_.emulated = true;
      SubmitStep(0);
      return;
    }
    if (status.ok()) {
      result_ = internal::ToNative(response_);
    } else {
      result_ = FromGrpcStatus(status);
    }
    countdown_->Done();
  }

  // Step `k` as a single op; after a failed step, the rest take their seqs
  // with no-ops and fail naming it, as a worker's own plan reports them.
  void SubmitStep(int k) {
    if (k == request_.ops_size()) {
      result_ = std::move(emulated_);
      countdown_->Done();
      return;
    }
    v1::OpRequest op = request_.ops(k);
    op.set_group(request_.group());
    op.set_seq(request_.seq() + k);
    op.set_generation(request_.generation());
    op.set_async(false);
    if (!first_error_.ok()) {
      op.set_kind(v1::OP_KIND_NOP);
      op.set_skip_agreement(true);
    }
    step_context_ = std::make_unique<grpc::ClientContext>();
    step_context_->set_deadline(internal::ClientImpl::OpDeadline(
        milliseconds(op.timeout_ms()), client_timeout_));
    step_request_ = std::move(op);
    stub_->async()->Submit(
        step_context_.get(), &step_request_, &step_response_,
        [this, k](grpc::Status status) { OnStepDone(k, status); });
  }

  void OnStepDone(int k, const grpc::Status& status) {
    WorkStatus work;
    work.kind = ::ccl::FromProto(request_.ops(k).kind()).value_or(OpKind::kNop);
    work.group = request_.group();
    work.seq = request_.seq() + k;
    if (!first_error_.ok()) {
      work.state = WorkState::kFailed;
      work.error = absl::FailedPreconditionError(
          absl::StrCat("not run: ", first_error_.message()));
    } else if (!status.ok()) {
      work.state = WorkState::kFailed;
      work.error = FromGrpcStatus(status);
      first_error_ = absl::Status(
          work.error.code(),
          absl::StrCat("step ", k, " (seq ", work.seq,
                       ") of the plan failed: ", work.error.message()));
    } else {
      const OpResult done = internal::ToNative(step_response_);
      work.work_id = done.work_id;
      work.state = done.state;
      work.timing = done.timing;
    }
    emulated_.steps.push_back(std::move(work));
    SubmitStep(k + 1);
  }

  v1::Worker::Stub* const stub_;
  const milliseconds client_timeout_;
  internal::Countdown* const countdown_;
  // The plan and its answer: a message per op each way, allocated in one
  // arena and freed with it rather than one by one (as the worker does,
  // common/queue_server.h).
  google::protobuf::Arena arena_;
  v1::PlanRequest& request_ =
      *google::protobuf::Arena::CreateMessage<v1::PlanRequest>(&arena_);
  v1::PlanResponse& response_ =
      *google::protobuf::Arena::CreateMessage<v1::PlanResponse>(&arena_);
  grpc::ClientContext context_;
  absl::StatusOr<PlanResult> result_;
  // The fallback: one step in flight at a time.
  PlanResult emulated_;
  absl::Status first_error_;
  std::unique_ptr<grpc::ClientContext> step_context_;
  v1::OpRequest step_request_;
  v1::OpResponse step_response_;
};

}  // namespace

RankResults<PlanResult> internal::ClientImpl::SubmitPlan(const Plan& plan) {
  if (plan.steps.empty()) {
    return FailEach<PlanResult>(
        group_ranks, absl::InvalidArgumentError("the plan has no steps"));
  }
  // Every step is checked before a seq is taken, so a bad one leaves no gap.
  std::vector<std::vector<v1::OpRequest>> steps;
  steps.reserve(plan.steps.size());
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    auto ops = OpsForRanks(plan.steps[s]);
    if (!ops.ok()) {
      return FailEach<PlanResult>(
          group_ranks, absl::Status(ops.status().code(),
                                    absl::StrCat("plan step ", s, ": ",
                                                 ops.status().message())));
    }
    steps.push_back(*std::move(ops));
  }
  auto seq = TakeSeqs(static_cast<int64_t>(steps.size()));
  if (!seq.ok()) return FailEach<PlanResult>(group_ranks, seq.status());

  Connect(group_ranks);
  internal::Countdown countdown(group_ranks.size());
  std::vector<std::unique_ptr<RankPlan>> calls(group_ranks.size());
  std::vector<absl::Status> local_errors(group_ranks.size());
  for (size_t i = 0; i < group_ranks.size(); ++i) {
    auto stub = Stub(group_ranks[i]);
    if (!stub.ok()) {
      local_errors[i] = stub.status();
      countdown.Done();
      continue;
    }
    calls[i] = std::make_unique<RankPlan>(*stub, options.timeout, &countdown);
    v1::PlanRequest& request = calls[i]->request();
    request.set_group(group);
    request.set_seq(*seq);
    request.set_generation(world.generation);
    request.set_aggregate(plan.aggregate);
    request.mutable_ops()->Reserve(static_cast<int>(steps.size()));
    for (const auto& step : steps) *request.add_ops() = step[i];
    calls[i]->Start();
  }
  countdown.Wait();
  RankResults<PlanResult> out;
  out.reserve(group_ranks.size());
  for (size_t i = 0; i < group_ranks.size(); ++i) {
    if (!calls[i]) {
      out.push_back({group_ranks[i], local_errors[i]});
    } else {
      out.push_back({group_ranks[i], calls[i]->TakeResult()});
    }
  }
  return out;
}

}  // namespace ccl::client
