#include "coordinator/client/coordinator_client.h"

#include <grpcpp/grpcpp.h>

#include "common/grpc_status.h"

namespace ccl {

CoordinatorClient::CoordinatorClient(std::shared_ptr<grpc::Channel> channel,
                                     std::chrono::milliseconds rpc_timeout)
    : stub_(v1::Coordinator::NewStub(channel)), rpc_timeout_(rpc_timeout) {}

std::unique_ptr<CoordinatorClient> CoordinatorClient::Connect(
    const std::string& address, std::chrono::milliseconds rpc_timeout) {
  // Default options make a plaintext channel, which cannot fail.
  return *Connect(address, rpc_timeout, SecurityOptions());
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const std::string& address, std::chrono::milliseconds rpc_timeout,
    const SecurityOptions& security) {
  auto channel = MakeChannel(address, security);
  if (!channel.ok()) return channel.status();
  auto client = std::make_unique<CoordinatorClient>(*channel, rpc_timeout);
  client->target_ = address;
  return client;
}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::Context(
    std::chrono::milliseconds extra) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + rpc_timeout_ +
                        extra);
  return context;
}

absl::StatusOr<v1::RegisterResponse> CoordinatorClient::Register(
    const v1::RegisterRequest& request) {
  v1::RegisterResponse response;
  auto context = Context(std::chrono::milliseconds(request.timeout_ms()));
  absl::Status status =
      FromGrpcStatus(stub_->Register(context.get(), request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> CoordinatorClient::Heartbeat(
    const v1::HeartbeatRequest& request,
    std::optional<std::chrono::milliseconds> timeout) {
  v1::HeartbeatResponse response;
  auto context = Context();
  if (timeout) {
    context->set_deadline(std::chrono::system_clock::now() + *timeout);
  }
  absl::Status status =
      FromGrpcStatus(stub_->Heartbeat(context.get(), request, &response));
  if (!status.ok()) return status;
  return response;
}

absl::Status CoordinatorClient::Deregister(
    const v1::DeregisterRequest& request) {
  v1::DeregisterResponse response;
  auto context = Context();
  return FromGrpcStatus(stub_->Deregister(context.get(), request, &response));
}

absl::StatusOr<v1::World> CoordinatorClient::GetWorld() {
  v1::World world;
  auto context = Context();
  absl::Status status = FromGrpcStatus(
      stub_->GetWorld(context.get(), v1::GetWorldRequest(), &world));
  if (!status.ok()) return status;
  return world;
}

absl::Status CoordinatorClient::KvSet(int64_t generation,
                                      const std::string& key,
                                      const std::string& value) {
  v1::KvSetRequest request;
  request.set_generation(generation);
  request.set_key(key);
  request.set_value(value);
  v1::KvSetResponse response;
  auto context = Context();
  return FromGrpcStatus(stub_->KvSet(context.get(), request, &response));
}

absl::StatusOr<std::string> CoordinatorClient::KvGet(int64_t generation,
                                                     const std::string& key) {
  v1::KvGetRequest request;
  request.set_generation(generation);
  request.set_key(key);
  v1::KvGetResponse response;
  auto context = Context();
  absl::Status status =
      FromGrpcStatus(stub_->KvGet(context.get(), request, &response));
  if (!status.ok()) return status;
  return response.value();
}

absl::Status CoordinatorClient::KvWait(int64_t generation,
                                       const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout) {
  v1::KvWaitRequest request;
  request.set_generation(generation);
  for (const auto& key : keys) request.add_keys(key);
  request.set_timeout_ms(timeout.count());
  v1::KvWaitResponse response;
  auto context = Context(timeout);
  return FromGrpcStatus(stub_->KvWait(context.get(), request, &response));
}

absl::StatusOr<std::vector<std::string>> CoordinatorClient::KvWaitGet(
    int64_t generation, const std::vector<std::string>& keys,
    std::chrono::milliseconds timeout) {
  v1::KvWaitRequest request;
  request.set_generation(generation);
  for (const auto& key : keys) request.add_keys(key);
  request.set_timeout_ms(timeout.count());
  request.set_include_values(true);
  v1::KvWaitResponse response;
  auto context = Context(timeout);
  absl::Status status =
      FromGrpcStatus(stub_->KvWait(context.get(), request, &response));
  if (!status.ok()) return status;
  if (response.values_size() == static_cast<int>(keys.size())) {
    return std::vector<std::string>(response.values().begin(),
                                    response.values().end());
  }
  // An older coordinator ignored include_values; the keys exist now, and
  // the generation the wait acted on still has them.
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& key : keys) {
    absl::StatusOr<std::string> value = KvGet(response.generation(), key);
    if (!value.ok()) return value.status();
    values.push_back(*std::move(value));
  }
  return values;
}

absl::StatusOr<int64_t> CoordinatorClient::ReserveSequence(
    int64_t generation, const std::string& group, int64_t count) {
  v1::ReserveSequenceRequest request;
  request.set_generation(generation);
  request.set_group(group);
  request.set_count(count);
  auto response = ReserveSequence(request);
  if (!response.ok()) return response.status();
  return response->first();
}

absl::StatusOr<v1::ReserveSequenceResponse> CoordinatorClient::ReserveSequence(
    const v1::ReserveSequenceRequest& request) {
  v1::ReserveSequenceResponse response;
  auto context = Context();
  absl::Status status =
      FromGrpcStatus(stub_->ReserveSequence(context.get(), request, &response));
  if (!status.ok()) return status;
  return response;
}

std::function<void()> CoordinatorClient::AwaitSequenceHolderAsync(
    const v1::AwaitSequenceHolderRequest& request,
    std::function<void(absl::StatusOr<v1::AwaitSequenceHolderResponse>)> done) {
  // Shared by the completion and the canceller, which may outlive each
  // other: the context must live as long as either can touch it.
  struct Call {
    grpc::ClientContext context;
    v1::AwaitSequenceHolderRequest request;
    v1::AwaitSequenceHolderResponse response;
  };
  auto call = std::make_shared<Call>();
  call->request = request;
  call->context.set_deadline(std::chrono::system_clock::now() + rpc_timeout_ +
                             std::chrono::milliseconds(request.timeout_ms()));
  stub_->async()->AwaitSequenceHolder(
      &call->context, &call->request, &call->response,
      [call, done = std::move(done)](grpc::Status status) {
        if (status.ok()) {
          done(std::move(call->response));
        } else {
          done(FromGrpcStatus(status));
        }
      });
  return [call] { call->context.TryCancel(); };
}

}  // namespace ccl
