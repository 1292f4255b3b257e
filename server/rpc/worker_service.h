// gRPC adapter of the worker: checks each request against the limits,
// converts it (convert.h), calls WorkerCore and converts the answer back. Holds
// no state of its own beyond calls in flight; nothing in here blocks a queue
// thread (sync ops are answered from the op's completion callback, Wait parks
// on the work and a timer). Served on the completion-queue API
// (common/queue_server.h says why).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "ccl/v1/worker.grpc.pb.h"
#include "common/queue_server.h"
#include "common/queue_streams.h"
#include "common/timer_queue.h"
#include "server/core/worker_core.h"
#include "server/rpc/request_limits.h"

namespace ccl {

// What GetInfo reports besides the core's own state.
struct WorkerIdentity {
  std::string address;
  std::string worker_id;
  std::string version;
};

class WorkerService final {
 public:
  // Every request is checked against `limits` before it reaches the core.
  WorkerService(WorkerCore& core, WorkerIdentity identity,
                RequestLimits limits = RequestLimits());

  // "joining", "ready", "draining": reported by GetInfo.
  void set_state(std::string state);
  // Known only once the server has bound its port.
  void set_address(std::string address);

  // Before BuildAndStart.
  void Register(grpc::ServerBuilder& builder);
  // After BuildAndStart: each method's first call is waited for on `queue`.
  absl::Status Serve(ServerQueue& queue);

 private:
  using GetInfoCall = UnaryCall<v1::GetInfoRequest, v1::WorkerInfo>;
  using AllocTensorCall = UnaryCall<v1::AllocTensorRequest, v1::TensorInfo>;
  using FreeTensorCall =
      UnaryCall<v1::FreeTensorRequest, v1::FreeTensorResponse>;
  using ListTensorsCall =
      UnaryCall<v1::ListTensorsRequest, v1::ListTensorsResponse>;
  using SummarizeTensorCall =
      UnaryCall<v1::SummarizeTensorRequest, v1::TensorSummary>;
  using SubmitCall = UnaryCall<v1::OpRequest, v1::OpResponse>;
  using SubmitStreamCall =
      ExchangeStreamCall<v1::OpStreamRequest, v1::OpStreamResponse>;
  using SubmitPlanCall = UnaryCall<v1::PlanRequest, v1::PlanResponse>;
  using ReleaseSequenceCall =
      UnaryCall<v1::ReleaseSequenceRequest, v1::ReleaseSequenceResponse>;
  using BenchCall = UnaryCall<v1::BenchRequest, v1::BenchResponse>;
  using WaitCall = UnaryCall<v1::WaitRequest, v1::WorkStatus>;
  using TestCall = UnaryCall<v1::TestRequest, v1::WorkStatus>;
  using CreateGroupCall = UnaryCall<v1::CreateGroupRequest, v1::GroupInfo>;
  using DestroyGroupCall =
      UnaryCall<v1::DestroyGroupRequest, v1::DestroyGroupResponse>;
  using GetOpLogCall = UnaryCall<v1::GetOpLogRequest, v1::OpLog>;

  void GetInfo(GetInfoCall* call);
  void AllocTensor(AllocTensorCall* call);
  void FreeTensor(FreeTensorCall* call);
  void ListTensors(ListTensorsCall* call);
  absl::StatusOr<std::unique_ptr<StreamSource>> ReadTensor(
      const v1::ReadTensorRequest& request);
  void SummarizeTensor(SummarizeTensorCall* call);
  void Submit(SubmitCall* call);
  void SubmitStream(SubmitStreamCall::Exchange* exchange);
  // Submit's work for either: answers `call`, filling `response`.
  void SubmitOp(const v1::OpRequest& request, v1::OpResponse* response,
                UnaryAnswer* call);
  void SubmitPlan(SubmitPlanCall* call);
  void ReleaseSequence(ReleaseSequenceCall* call);
  void Bench(BenchCall* call);
  void Wait(WaitCall* call);
  void Test(TestCall* call);
  void CreateGroup(CreateGroupCall* call);
  void DestroyGroup(DestroyGroupCall* call);
  void GetOpLog(GetOpLogCall* call);

  // Answers `call` with what `respond` fills in and returns once `work`
  // ends, or earlier if the call's deadline comes while the work is still
  // queued (see the .cc).
  void AnswerWhenDone(UnaryAnswer* call, std::shared_ptr<Work> work,
                      std::function<std::string()> why_queued,
                      std::function<absl::Status()> respond);

  // Says, when asked, why the work at `seq` of `group` is still queued.
  std::function<std::string()> WhyQueuedFor(std::string group, int64_t seq);
  // The async work `work_id` that Wait and Test ask about. NOT_FOUND,
  // saying why, when `worker_id` (a client's record of who issued it) is
  // neither empty nor this worker, or when no such work is remembered.
  // Work ids count from 1 in each worker process, so the id of a work that
  // a killed worker held is, on its restarted successor, some other
  // work's: without the check, waiting for it there reported that work's
  // outcome as the old one's and then forgot it, so its own caller found
  // NOT_FOUND (chaos seed 663522075).
  absl::StatusOr<std::shared_ptr<Work>> IssuedWork(
      int64_t work_id, const std::string& worker_id) const;

  WorkerCore& core_;
  const RequestLimits limits_;
  AllRaw<v1::Worker> methods_;
  WorkerIdentity identity_;  // address guarded by state_mutex_
  TimerQueue timers_;
  std::mutex state_mutex_;
  std::string state_ = "joining";
};

}  // namespace ccl
