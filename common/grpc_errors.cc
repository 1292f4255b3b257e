#include "common/grpc_errors.h"

#include <google/protobuf/descriptor.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/support/server_interceptor.h>

#include <utility>
#include <vector>

namespace ccl {
namespace {

// "/ccl.v1.Worker/Submit" -> "ccl.v1.OpRequest"; empty if unknown.
std::string RequestTypeOf(const std::string& method) {
  if (method.size() < 2 || method[0] != '/') return "";
  std::string dotted = method.substr(1);
  const size_t slash = dotted.find('/');
  if (slash == std::string::npos) return "";
  dotted[slash] = '.';
  const google::protobuf::MethodDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
          dotted);
  return descriptor == nullptr ? "" : descriptor->input_type()->full_name();
}

class ParseErrorInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit ParseErrorInterceptor(std::string method)
      : method_(std::move(method)) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    using grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      // Handlers of this project never answer UNIMPLEMENTED without saying
      // why, so an empty one on a served method is the request that did not
      // parse.
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
          status.error_message().empty()) {
        const std::string type = RequestTypeOf(method_);
        if (!type.empty()) {
          methods->ModifySendStatus(
              grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                           UnparsedRequestMessage(method_, type)));
        }
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
};

class ParseErrorInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new ParseErrorInterceptor(info->method() ? info->method() : "");
  }
};

}  // namespace

std::string UnknownMethodMessage(const std::string& method,
                                 const std::string& served) {
  return "no method " + method + " here; this server serves " + served +
         " (ccl/v1/*.proto) and grpc.health.v1.Health";
}

std::string UnparsedRequestMessage(const std::string& method_path,
                                   const std::string& type) {
  return "the request of " + method_path + " does not parse as a " + type +
         " message (a corrupt body, or a client built from other .proto files "
         "than this server)";
}

// Every method no registered service serves ends up here.
class RequestErrorDetails::UnknownMethods final
    : public grpc::CallbackGenericService {
 public:
  explicit UnknownMethods(const std::string& served) : served_(served) {}

  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    class Refusal final : public grpc::ServerGenericBidiReactor {
     public:
      explicit Refusal(grpc::Status status) { Finish(std::move(status)); }
      void OnDone() override { delete this; }
    };
    // The method is the caller's own string: only its length is bounded.
    return new Refusal(grpc::Status(
        grpc::StatusCode::UNIMPLEMENTED,
        UnknownMethodMessage(context->method().substr(0, 256), served_)));
  }

 private:
  const std::string served_;
};

RequestErrorDetails::RequestErrorDetails(std::string served)
    : served_(std::move(served)),
      unknown_(std::make_unique<UnknownMethods>(served_)) {}

RequestErrorDetails::~RequestErrorDetails() = default;

void RequestErrorDetails::Install(grpc::ServerBuilder& builder) {
  builder.RegisterCallbackGenericService(unknown_.get());
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      creators;
  creators.push_back(std::make_unique<ParseErrorInterceptorFactory>());
  builder.experimental().SetInterceptorCreators(std::move(creators));
}

}  // namespace ccl
