// A server-streaming call refused before any reply: the reactor finishes
// with the status at once. gRPC's DefaultReactor is for unary calls only.
#pragma once

#include <grpcpp/support/server_callback.h>

#include <utility>

namespace ccl {

template <typename Reply>
class RefusedStream final : public grpc::ServerWriteReactor<Reply> {
 public:
  explicit RefusedStream(grpc::Status status) {
    this->Finish(std::move(status));
  }
  void OnDone() override { delete this; }
};

}  // namespace ccl
