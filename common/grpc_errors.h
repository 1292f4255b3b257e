// Answers a person can act on where gRPC's own are empty. A request body
// that does not parse as the method's message reaches no handler: gRPC's
// callback server answers it UNIMPLEMENTED with no message, as it answers a
// method nobody serves. Installed on a server, this turns the first into
// INVALID_ARGUMENT naming the message type it expected, and the second into
// UNIMPLEMENTED naming the method and the services that are served.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

namespace ccl {

// UNIMPLEMENTED's message for `method`, which no service of the server
// serves; `served` names the daemon's own service ("ccl.v1.Worker").
std::string UnknownMethodMessage(const std::string& method,
                                 const std::string& served);
// INVALID_ARGUMENT's message for a request body of `method_path`
// ("/ccl.v1.Worker/Submit") that does not parse as a `type` message.
std::string UnparsedRequestMessage(const std::string& method_path,
                                   const std::string& type);

class RequestErrorDetails {
 public:
  // `served` lists the daemon's services for the message ("ccl.v1.Worker").
  explicit RequestErrorDetails(std::string served);
  ~RequestErrorDetails();
  RequestErrorDetails(const RequestErrorDetails&) = delete;
  RequestErrorDetails& operator=(const RequestErrorDetails&) = delete;

  // Before BuildAndStart; this object must outlive the server.
  void Install(grpc::ServerBuilder& builder);

 private:
  class UnknownMethods;
  const std::string served_;
  std::unique_ptr<UnknownMethods> unknown_;
};

}  // namespace ccl
