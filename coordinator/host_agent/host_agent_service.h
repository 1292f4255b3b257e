// cchostagent's gRPC adapter: the Coordinator service for the workers of one
// host, in front of the real coordinator. Register calls are gathered by a
// RegistrationBatcher and sent as one RegisterHost per batch, each worker
// answered from the stream as the coordinator answers it; every other call is
// passed through as it is, with the caller's deadline, cancellation and
// token. The coordinator then holds one parked call per host instead of one
// per worker while a world forms (docs/scale.md: its cost per rank is
// gRPC's per call).
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ccl/v1/coordinator.grpc.pb.h"
#include "coordinator/coordinator_methods.h"
#include "coordinator/host_agent/registration_batcher.h"

namespace ccl::coordinator {

struct HostAgentOptions {
  // The host's workers, when known: a batch leaves once this many wait.
  int expected_workers = 0;
  // How long the first waiting Register waits for others to join it.
  std::chrono::milliseconds window{std::chrono::milliseconds(200)};
  // Send the caller's "authorization" upstream (the coordinator checks
  // it); false when the agent's own channel carries a token.
  bool forward_authorization = true;
};

class HostAgentService final : public v1::Coordinator::CallbackService {
 public:
  // `upstream` is the coordinator's channel; it outlives every call.
  HostAgentService(std::shared_ptr<grpc::Channel> upstream,
                   HostAgentOptions options);
  ~HostAgentService() override;

  // Registrations sent upstream, and in how many RegisterHost calls.
  int64_t registrations_sent() const { return registrations_sent_; }
  int64_t batches_sent() const { return batches_sent_; }

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerWriteReactor<v1::RegisterHostReply>* RegisterHost(
      grpc::CallbackServerContext* context,
      const v1::RegisterHostRequest* request) override;

  CCL_COORDINATOR_PLAIN_METHODS(CCL_DECLARE_COORDINATOR_METHOD)

  class MemberCall;  // a worker's Register, in host_agent_service.cc

 private:
  template <typename Request, typename Response, typename Method>
  grpc::ServerUnaryReactor* Forward(grpc::CallbackServerContext* context,
                                    const Request* request, Response* response,
                                    Method method);
  // The caller's token, to send upstream ("" when not forwarded).
  std::string Authorization(const grpc::CallbackServerContext& context) const;
  void SendBatch(std::vector<RegistrationBatcher::CallId> batch);

  const std::unique_ptr<v1::Coordinator::Stub> stub_;
  const HostAgentOptions options_;
  std::atomic<int64_t> registrations_sent_{0};
  std::atomic<int64_t> batches_sent_{0};
  std::mutex mutex_;
  RegistrationBatcher::CallId next_call_ = 1;
  std::map<RegistrationBatcher::CallId, MemberCall*> waiting_;
  // Last: its timer thread may call SendBatch until it is gone.
  RegistrationBatcher batcher_;
};

}  // namespace ccl::coordinator
