// gRPC adapter of the worker: checks each request against the limits,
// converts it (convert.h), calls WorkerCore and converts the answer back. Holds
// no state of its own beyond in-flight reactors; nothing in here blocks a gRPC
// thread (sync ops finish their reactor from the op's completion callback, Wait
// parks on the work and a timer).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "ccl/v1/worker.grpc.pb.h"
#include "common/timer_queue.h"
#include "server/core/worker_core.h"
#include "server/rpc/request_limits.h"

namespace ccl {

class CallReactor;

// What GetInfo reports besides the core's own state.
struct WorkerIdentity {
  std::string address;
  std::string worker_id;
  std::string version;
};

class WorkerService final : public v1::Worker::CallbackService {
 public:
  // Every request is checked against `limits` before it reaches the core.
  WorkerService(WorkerCore& core, WorkerIdentity identity,
                RequestLimits limits = RequestLimits());

  // "joining", "ready", "draining": reported by GetInfo.
  void set_state(std::string state);
  // Known only once the server has bound its port.
  void set_address(std::string address);

  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const v1::GetInfoRequest* request,
                                    v1::WorkerInfo* response) override;
  grpc::ServerUnaryReactor* AllocTensor(grpc::CallbackServerContext* context,
                                        const v1::AllocTensorRequest* request,
                                        v1::TensorInfo* response) override;
  grpc::ServerUnaryReactor* FreeTensor(
      grpc::CallbackServerContext* context,
      const v1::FreeTensorRequest* request,
      v1::FreeTensorResponse* response) override;
  grpc::ServerUnaryReactor* ListTensors(
      grpc::CallbackServerContext* context,
      const v1::ListTensorsRequest* request,
      v1::ListTensorsResponse* response) override;
  grpc::ServerReadReactor<v1::WriteTensorChunk>* WriteTensor(
      grpc::CallbackServerContext* context, v1::TensorInfo* response) override;
  grpc::ServerWriteReactor<v1::ReadTensorChunk>* ReadTensor(
      grpc::CallbackServerContext* context,
      const v1::ReadTensorRequest* request) override;
  grpc::ServerUnaryReactor* SummarizeTensor(
      grpc::CallbackServerContext* context,
      const v1::SummarizeTensorRequest* request,
      v1::TensorSummary* response) override;
  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context,
                                   const v1::OpRequest* request,
                                   v1::OpResponse* response) override;
  grpc::ServerUnaryReactor* SubmitPlan(grpc::CallbackServerContext* context,
                                       const v1::PlanRequest* request,
                                       v1::PlanResponse* response) override;
  grpc::ServerUnaryReactor* ReleaseSequence(
      grpc::CallbackServerContext* context,
      const v1::ReleaseSequenceRequest* request,
      v1::ReleaseSequenceResponse* response) override;
  grpc::ServerUnaryReactor* Bench(grpc::CallbackServerContext* context,
                                  const v1::BenchRequest* request,
                                  v1::BenchResponse* response) override;
  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext* context,
                                 const v1::WaitRequest* request,
                                 v1::WorkStatus* response) override;
  grpc::ServerUnaryReactor* Test(grpc::CallbackServerContext* context,
                                 const v1::TestRequest* request,
                                 v1::WorkStatus* response) override;
  grpc::ServerUnaryReactor* GetOpLog(grpc::CallbackServerContext* context,
                                     const v1::GetOpLogRequest* request,
                                     v1::OpLog* response) override;
  grpc::ServerUnaryReactor* CreateGroup(grpc::CallbackServerContext* context,
                                        const v1::CreateGroupRequest* request,
                                        v1::GroupInfo* response) override;

 private:
  // Says, when asked, why the work at `seq` of `group` is still queued.
  std::function<std::string()> WhyQueuedFor(std::string group, int64_t seq);
  // Runs `start` now, or once this worker reaches `generation`. If it does
  // not, the request is refused and takes its `count` seqs from `seq` of
  // `group` as any refused request does (WorkerCore::Refuse).
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
  void InGeneration(int64_t generation, int64_t timeout_ms,
                    const std::string& group, int64_t seq, int64_t count,
                    CallReactor* reactor, std::function<void()> start);

  WorkerCore& core_;
  const RequestLimits limits_;
  WorkerIdentity identity_;  // address guarded by state_mutex_
  TimerQueue timers_;
  std::mutex state_mutex_;
  std::string state_ = "joining";
};

}  // namespace ccl
