// A gRPC server on the completion-queue API, driven by threads of our own, for
// a daemon whose handlers never block (they answer at once, or later from
// another thread: an op's completion, a timer).
//
// Why not the callback API the coordinator uses: on gRPC 1.51 a unary call to
// a callback-API server costs 45-65 us more than the same call to a server on
// this API (one more hand-off through gRPC's own threads per call), and one
// callback service anywhere on a server (the default health service, a
// callback generic service) brings that cost back for every method of it
// (bench/results/rpc_floor_2026-12-01.md). So a server built on this has no
// callback service at all: every method is registered "raw" (requests are
// parsed here, so one that does not parse gets an answer naming the message
// it should have been, rather than gRPC's bare INTERNAL), a method nobody
// serves lands on an async generic service that names what is served, and
// grpc.health.v1 is answered here too (common/grpc_health.h, QueueHealth).
//
// Lifetime of a call: an object waits for the next call of one method; when
// one arrives it puts a fresh waiter in its place, runs the handler, and lives
// until both its answer has gone and gRPC says the call ended. A handler (or
// whatever answers later) calls Finish exactly once.
#pragma once

#include <google/protobuf/arena.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message_lite.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/async_stream.h>
#include <grpcpp/support/async_unary_call.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grpc_errors.h"

namespace ccl {

// What a tag on the queue stands for.
class QueueEvent {
 public:
  virtual void Complete(bool ok) = 0;

 protected:
  ~QueueEvent() = default;
};

// The completion queue of one server and the threads that take its events.
class ServerQueue {
 public:
  // Before BuildAndStart.
  explicit ServerQueue(grpc::ServerBuilder& builder);
  // Close(0) if not closed yet.
  ~ServerQueue();
  ServerQueue(const ServerQueue&) = delete;
  ServerQueue& operator=(const ServerQueue&) = delete;

  // After BuildAndStart, once every method's first waiter is posted. With a
  // `busy_poll` budget, each thread keeps polling the queue (and the sockets
  // behind it) without sleeping for that long after its last event
  // (common/busy_poll.h); every thread spins, because only the thread that
  // polls the sockets sees a request arrive, and a sleeping one may hold
  // that role.
  void Start(int threads, std::chrono::microseconds busy_poll = {});

  // Runs `start_operation` (which starts an operation on this queue) unless
  // the queue is closed; says whether it ran. Starting one on a queue that
  // was shut down would abort the process; an answer that comes after the
  // close (an op finishing as the daemon exits) is dropped instead.
  template <typename Operation>
  bool Post(Operation&& start_operation) {
    std::shared_lock<std::shared_mutex> lock(close_mutex_);
    if (closed_) return false;
    start_operation();
    return true;
  }
  grpc::ServerCompletionQueue* cq() { return cq_.get(); }

  // After Server::Shutdown and once nothing will answer a call any more
  // (the core shut down): waits up to `grace` for the calls still open to
  // end, then shuts the queue down and joins its threads.
  void Close(std::chrono::milliseconds grace);

  // Streams a client may hold open for its whole life (ExchangeStreamCall):
  // CancelStreams cancels each one open and every later arrival, so that a
  // stopping daemon does not wait out Server::Shutdown's deadline for them.
  // Call it before Server::Shutdown. AddStream says false once cancelled
  // (the caller cancels its own); RemoveStream before the context goes.
  bool AddStream(grpc::ServerContext* context);
  void RemoveStream(grpc::ServerContext* context);
  void CancelStreams();

  // Calls between their arrival and their end, for Close.
  void CallOpened();
  void CallClosed();
  int64_t open_calls();

 private:
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::vector<std::thread> threads_;
  std::shared_mutex close_mutex_;
  bool closed_ = false;
  std::mutex open_mutex_;
  std::condition_variable open_changed_;
  int64_t open_ = 0;
  std::mutex streams_mutex_;
  std::set<grpc::ServerContext*> streams_;
  bool streams_cancelled_ = false;
};

// A generated service (v1::Worker's Service, ...) with every method marked
// raw: requests and answers are bytes, parsed and serialized by the calls
// below. Register it with the builder as any service.
class RawMethods {
 public:
  virtual ~RawMethods() = default;
  virtual grpc::Service* service() = 0;
  // "/ccl.v1.Worker/Submit" for index 7.
  virtual std::string MethodPath(int method) const = 0;
  // The index of `name` ("Submit"); NOT_FOUND if the service has none.
  virtual absl::StatusOr<int> MethodIndex(std::string_view name) const = 0;

  virtual void RequestUnary(
      int method, grpc::ServerContext* context, grpc::ByteBuffer* request,
      grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* writer,
      grpc::ServerCompletionQueue* cq, void* tag) = 0;
  virtual void RequestClientStream(
      int method, grpc::ServerContext* context,
      grpc::ServerAsyncReader<grpc::ByteBuffer, grpc::ByteBuffer>* reader,
      grpc::ServerCompletionQueue* cq, void* tag) = 0;
  virtual void RequestServerStream(
      int method, grpc::ServerContext* context, grpc::ByteBuffer* request,
      grpc::ServerAsyncWriter<grpc::ByteBuffer>* writer,
      grpc::ServerCompletionQueue* cq, void* tag) = 0;
  virtual void RequestBidiStream(
      int method, grpc::ServerContext* context,
      grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream,
      grpc::ServerCompletionQueue* cq, void* tag) = 0;
};

const google::protobuf::ServiceDescriptor* FindServiceDescriptor(
    const std::string& full_name);

// `Generated` is the generated outer class (v1::Worker).
template <typename Generated>
class AllRaw final : public Generated::Service, public RawMethods {
 public:
  AllRaw()
      : descriptor_(FindServiceDescriptor(Generated::service_full_name())) {
    for (int i = 0; i < descriptor_->method_count(); ++i) {
      grpc::Service::MarkMethodRaw(i);
    }
  }
  grpc::Service* service() override { return this; }
  std::string MethodPath(int method) const override {
    return "/" + descriptor_->full_name() + "/" +
           descriptor_->method(method)->name();
  }
  absl::StatusOr<int> MethodIndex(std::string_view name) const override {
    const auto* method = descriptor_->FindMethodByName(std::string(name));
    if (method == nullptr) {
      return absl::NotFoundError(std::string(name) + " is not a method of " +
                                 descriptor_->full_name());
    }
    return method->index();
  }
  void RequestUnary(int method, grpc::ServerContext* context,
                    grpc::ByteBuffer* request,
                    grpc::ServerAsyncResponseWriter<grpc::ByteBuffer>* writer,
                    grpc::ServerCompletionQueue* cq, void* tag) override {
    grpc::Service::RequestAsyncUnary(method, context, request, writer, cq, cq,
                                     tag);
  }
  void RequestClientStream(
      int method, grpc::ServerContext* context,
      grpc::ServerAsyncReader<grpc::ByteBuffer, grpc::ByteBuffer>* reader,
      grpc::ServerCompletionQueue* cq, void* tag) override {
    grpc::Service::RequestAsyncClientStreaming(method, context, reader, cq, cq,
                                               tag);
  }
  void RequestServerStream(int method, grpc::ServerContext* context,
                           grpc::ByteBuffer* request,
                           grpc::ServerAsyncWriter<grpc::ByteBuffer>* writer,
                           grpc::ServerCompletionQueue* cq,
                           void* tag) override {
    grpc::Service::RequestAsyncServerStreaming(method, context, request, writer,
                                               cq, cq, tag);
  }
  void RequestBidiStream(
      int method, grpc::ServerContext* context,
      grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>* stream,
      grpc::ServerCompletionQueue* cq, void* tag) override {
    grpc::Service::RequestAsyncBidiStreaming(method, context, stream, cq, cq,
                                             tag);
  }

 private:
  const google::protobuf::ServiceDescriptor* descriptor_;
};

// One call of any kind, from the wait for it to its end (see the top).
class QueueCall {
 public:
  QueueCall(const QueueCall&) = delete;
  QueueCall& operator=(const QueueCall&) = delete;

  grpc::ServerContext& context() { return context_; }
  std::chrono::system_clock::time_point deadline() const {
    return context_.deadline();
  }
  // Runs `on_cancel` once if the client cancels the call or goes away before
  // it ends; at once if it already has. Runs on a queue thread.
  void OnCancel(std::function<void()> on_cancel);

 protected:
  explicit QueueCall(ServerQueue& queue);
  virtual ~QueueCall() = default;

  // Posts the wait for the next call (`&arrival_` as its tag); deletes this
  // if the queue is closed.
  void StartWaiting();
  // Posts this method's wait: the Request* call of the right kind.
  virtual void RequestNext() = 0;
  // A fresh object of the same kind, for the next call.
  virtual QueueCall* MakeNext() = 0;
  // The call arrived; the next one is already waited for.
  virtual void Arrived() = 0;
  // A read or write started with `&io_` completed.
  virtual void IoDone(bool) {}
  // Starts `operation` (an answer, a read or a write) on the queue. After the
  // queue closed it cannot start, its completion never comes, and the call
  // ends here instead (the call's end was returned by the close already).
  template <typename Operation>
  void Start(Operation&& operation) {
    if (!queue_.Post(std::forward<Operation>(operation))) Unref();
  }

  ServerQueue& queue_;
  grpc::GenericServerContext context_;

  class Event final : public QueueEvent {
   public:
    using Handler = void (QueueCall::*)(bool);
    Event(QueueCall* call, Handler handler) : call_(call), handler_(handler) {}
    void Complete(bool ok) override { (call_->*handler_)(ok); }

   private:
    QueueCall* call_;
    Handler handler_;
  };
  Event arrival_{this, &QueueCall::OnArrival};
  Event io_{this, &QueueCall::IoDone};
  Event finished_{this, &QueueCall::OnFinished};
  Event done_{this, &QueueCall::OnDone};

 private:
  void OnArrival(bool ok);
  void OnFinished(bool ok);
  void OnDone(bool ok);

 protected:
  void Unref();

 private:
  // The answer's completion and the call's end. Counted from the start:
  // gRPC may return the end of a call cancelled while queued (the done tag)
  // to another thread before the arrival is handled here.
  std::atomic<int> refs_{2};
  std::mutex cancel_mutex_;
  bool cancelled_ = false;
  std::function<void()> on_cancel_;
};

// What every unary call offers a handler that answers later.
class UnaryAnswer {
 public:
  virtual ~UnaryAnswer() = default;
  // Answers the call: the response when `status` is OK, else the error.
  // Exactly once; the call may be gone as soon as it returns.
  virtual void Finish(const absl::Status& status) = 0;
  virtual std::chrono::system_clock::time_point call_deadline() const = 0;
  virtual void CallCancelled(std::function<void()> on_cancel) = 0;
};

template <typename Request, typename Response>
class UnaryCall final : public QueueCall, public UnaryAnswer {
 public:
  using Handler = std::function<void(UnaryCall*)>;

  // Starts serving `method` of `methods` with `handler`.
  static void Serve(ServerQueue& queue, RawMethods& methods, int method,
                    Handler handler) {
    (new UnaryCall(queue, methods, method,
                   std::make_shared<const Handler>(std::move(handler))))
        ->StartWaiting();
  }

  const Request& request() const { return *request_; }
  Response* response() { return response_; }

  void Finish(const absl::Status& status) override;
  std::chrono::system_clock::time_point call_deadline() const override {
    return deadline();
  }
  void CallCancelled(std::function<void()> on_cancel) override {
    OnCancel(std::move(on_cancel));
  }

 private:
  UnaryCall(ServerQueue& queue, RawMethods& methods, int method,
            std::shared_ptr<const Handler> handler)
      : QueueCall(queue),
        methods_(methods),
        method_(method),
        handler_(std::move(handler)) {}

  void RequestNext() override {
    methods_.RequestUnary(method_, &context_, &request_bytes_, &writer_,
                          queue_.cq(), &arrival_);
  }
  QueueCall* MakeNext() override {
    return new UnaryCall(queue_, methods_, method_, handler_);
  }
  void Arrived() override {
    if (!grpc::SerializationTraits<Request>::Deserialize(&request_bytes_,
                                                         request_)
             .ok()) {
      Finish(absl::InvalidArgumentError(UnparsedRequestMessage(
          methods_.MethodPath(method_), Request::descriptor()->full_name())));
      return;
    }
    (*handler_)(this);
  }

  RawMethods& methods_;
  const int method_;
  const std::shared_ptr<const Handler> handler_;
  grpc::ByteBuffer request_bytes_;
  grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> writer_{&context_};
  // The request and the answer live in an arena, freed at once with the
  // call: a plan of thousands of ops parses into thousands of messages and
  // answers with as many, and allocating and freeing each on its own was
  // much of the malloc and free that made up a quarter of the worker's
  // profile per planned op. A small call fits the block inside the call
  // object and allocates nothing more; a large one grows in blocks kept
  // below glibc's mmap threshold (heap_policy.h), so they come from the
  // heap rather than fresh mappings.
  static google::protobuf::ArenaOptions CallArenaOptions(char* block,
                                                         size_t size) {
    google::protobuf::ArenaOptions options;
    options.initial_block = block;
    options.initial_block_size = size;
    options.start_block_size = 4 * 1024;
    options.max_block_size = 64 * 1024;
    return options;
  }
  alignas(std::max_align_t) char first_block_[1024];
  google::protobuf::Arena arena_{
      CallArenaOptions(first_block_, sizeof(first_block_))};
  Request* const request_ =
      google::protobuf::Arena::CreateMessage<Request>(&arena_);
  Response* const response_ =
      google::protobuf::Arena::CreateMessage<Response>(&arena_);
};

// Serializes `message` for the wire.
absl::Status SerializeMessage(const google::protobuf::MessageLite& message,
                              grpc::ByteBuffer* out);
grpc::Status GrpcStatusOf(const absl::Status& status);

template <typename Request, typename Response>
void UnaryCall<Request, Response>::Finish(const absl::Status& status) {
  grpc::ByteBuffer bytes;
  absl::Status answer = status;
  if (answer.ok()) answer = SerializeMessage(*response_, &bytes);
  Start([&] {
    if (answer.ok()) {
      writer_.Finish(bytes, grpc::Status::OK, &finished_);
    } else {
      writer_.FinishWithError(GrpcStatusOf(answer), &finished_);
    }
  });
}

// Answers every method no registered service serves: UNIMPLEMENTED, naming
// the method and what is served. Register before BuildAndStart; Serve after.
class UnknownMethods {
 public:
  // `served` names the daemon's services for the message ("ccl.v1.Worker").
  explicit UnknownMethods(std::string served) : served_(std::move(served)) {}
  void Register(grpc::ServerBuilder& builder) {
    builder.RegisterAsyncGenericService(&service_);
  }
  void Serve(ServerQueue& queue);

 private:
  class Call;
  const std::string served_;
  grpc::AsyncGenericService service_;
};

}  // namespace ccl
