// The streaming calls of a server on common/queue_server.h: a server stream
// written one message at a time, a client stream taken one message at a
// time, and a bidirectional stream of independent exchanges (the worker's
// op stream). Each is a QueueCall; the same lifetime rules hold.
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/support/async_stream.h>

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/grpc_errors.h"
#include "common/queue_server.h"

namespace ccl {

// A server-streaming call's messages, one at a time: the next is asked for
// once the last one is written.
class StreamSource {
 public:
  virtual ~StreamSource() = default;
  // The next message, or nullptr at the end (the call then ends OK); an error
  // ends the call with it. The message stays valid until the next call.
  virtual absl::StatusOr<const google::protobuf::MessageLite*> Next() = 0;
};

template <typename Request>
class ServerStreamCall final : public QueueCall {
 public:
  using Open = std::function<absl::StatusOr<std::unique_ptr<StreamSource>>(
      const Request&)>;

  static void Serve(ServerQueue& queue, RawMethods& methods, int method,
                    Open open) {
    (new ServerStreamCall(queue, methods, method,
                          std::make_shared<const Open>(std::move(open))))
        ->StartWaiting();
  }

 private:
  ServerStreamCall(ServerQueue& queue, RawMethods& methods, int method,
                   std::shared_ptr<const Open> open)
      : QueueCall(queue),
        methods_(methods),
        method_(method),
        open_(std::move(open)) {}

  void RequestNext() override {
    methods_.RequestServerStream(method_, &context_, &request_bytes_, &writer_,
                                 queue_.cq(), &arrival_);
  }
  QueueCall* MakeNext() override {
    return new ServerStreamCall(queue_, methods_, method_, open_);
  }
  void Arrived() override {
    Request request;
    if (!grpc::SerializationTraits<Request>::Deserialize(&request_bytes_,
                                                         &request)
             .ok()) {
      End(absl::InvalidArgumentError(UnparsedRequestMessage(
          methods_.MethodPath(method_), Request::descriptor()->full_name())));
      return;
    }
    auto source = (*open_)(request);
    if (!source.ok()) {
      End(source.status());
      return;
    }
    source_ = *std::move(source);
    WriteNext();
  }
  void IoDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("the client went away"));
      return;
    }
    WriteNext();
  }
  void WriteNext() {
    auto message = source_->Next();
    if (!message.ok()) {
      End(message.status());
      return;
    }
    if (*message == nullptr) {
      End(absl::OkStatus());
      return;
    }
    if (absl::Status s = SerializeMessage(**message, &out_); !s.ok()) {
      End(s);
      return;
    }
    Start([&] { writer_.Write(out_, &io_); });
  }
  void End(const absl::Status& status) {
    Start([&] { writer_.Finish(GrpcStatusOf(status), &finished_); });
  }

  RawMethods& methods_;
  const int method_;
  const std::shared_ptr<const Open> open_;
  grpc::ByteBuffer request_bytes_;
  grpc::ServerAsyncWriter<grpc::ByteBuffer> writer_{&context_};
  std::unique_ptr<StreamSource> source_;
  grpc::ByteBuffer out_;
};

// A client-streaming call's messages, taken one at a time as they arrive.
template <typename Chunk, typename Response>
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  // One message; an error ends the call with it.
  virtual absl::Status Take(const Chunk& chunk) = 0;
  // The client sent its last message: the answer.
  virtual absl::Status End(Response* response) = 0;
};

template <typename Chunk, typename Response>
class ClientStreamCall final : public QueueCall {
 public:
  using Open = std::function<std::unique_ptr<StreamSink<Chunk, Response>>()>;

  static void Serve(ServerQueue& queue, RawMethods& methods, int method,
                    Open open) {
    (new ClientStreamCall(queue, methods, method,
                          std::make_shared<const Open>(std::move(open))))
        ->StartWaiting();
  }

 private:
  ClientStreamCall(ServerQueue& queue, RawMethods& methods, int method,
                   std::shared_ptr<const Open> open)
      : QueueCall(queue),
        methods_(methods),
        method_(method),
        open_(std::move(open)) {}

  void RequestNext() override {
    methods_.RequestClientStream(method_, &context_, &reader_, queue_.cq(),
                                 &arrival_);
  }
  QueueCall* MakeNext() override {
    return new ClientStreamCall(queue_, methods_, method_, open_);
  }
  void Arrived() override {
    sink_ = (*open_)();
    ReadNext();
  }
  void ReadNext() {
    Start([&] { reader_.Read(&in_, &io_); });
  }
  void IoDone(bool ok) override {
    if (!ok) {  // the client closed its side: every message is in
      Response response;
      absl::Status status = sink_->End(&response);
      grpc::ByteBuffer bytes;
      if (status.ok()) status = SerializeMessage(response, &bytes);
      Start([&] {
        if (status.ok()) {
          reader_.Finish(bytes, grpc::Status::OK, &finished_);
        } else {
          reader_.FinishWithError(GrpcStatusOf(status), &finished_);
        }
      });
      return;
    }
    Chunk chunk;
    absl::Status status =
        grpc::SerializationTraits<Chunk>::Deserialize(&in_, &chunk).ok()
            ? sink_->Take(chunk)
            : absl::InvalidArgumentError(
                  UnparsedRequestMessage(methods_.MethodPath(method_),
                                         Chunk::descriptor()->full_name()));
    if (!status.ok()) {
      Start([&] { reader_.FinishWithError(GrpcStatusOf(status), &finished_); });
      return;
    }
    ReadNext();
  }

  RawMethods& methods_;
  const int method_;
  const std::shared_ptr<const Open> open_;
  grpc::ServerAsyncReader<grpc::ByteBuffer, grpc::ByteBuffer> reader_{
      &context_};
  std::unique_ptr<StreamSink<Chunk, Response>> sink_;
  grpc::ByteBuffer in_;
};

// A bidirectional stream of independent exchanges: each request is handed to
// the handler as it arrives and answered once, whenever its work ends, so
// answers leave in the order work finishes (async ops, ops of other groups),
// each carrying its request's id. One stream per client and worker replaces a
// unary call per request: no call set-up and none of gRPC's per-call
// hand-offs, which are most of what a small op pays
// (bench/results/rpc_floor_2026-12-01.md).
//
// `Request` has id() and deadline_ms() (how long its client waits, from the
// arrival; 0: no limit), `Response` set_id(), set_error_code() and
// set_error_message(). The call ends OK once the client has closed its side
// and every exchange is answered; a client that goes away (or a daemon that
// stops: ServerQueue::CancelStreams) cancels every exchange still open
// (UnaryAnswer::CallCancelled) and their answers are dropped.
template <typename Request, typename Response>
class ExchangeStreamCall final : public QueueCall {
 public:
  class Exchange final : public UnaryAnswer {
   public:
    const Request& request() const { return request_; }
    Response* response() { return &response_; }
    // The answer joins the stream's write queue; this exchange is gone once
    // it returns.
    void Finish(const absl::Status& status) override {
      stream_->Answer(this, status);
    }
    std::chrono::system_clock::time_point call_deadline() const override {
      return deadline_;
    }
    void CallCancelled(std::function<void()> on_cancel) override {
      stream_->OnExchangeCancel(this, std::move(on_cancel));
    }

   private:
    friend class ExchangeStreamCall;
    explicit Exchange(ExchangeStreamCall* stream) : stream_(stream) {}
    ExchangeStreamCall* const stream_;
    Request request_;
    Response response_;
    std::chrono::system_clock::time_point deadline_ =
        std::chrono::system_clock::time_point::max();
    std::function<void()> on_cancel_;  // guarded by the stream's mutex_
  };
  using Handler = std::function<void(Exchange*)>;

  static void Serve(ServerQueue& queue, RawMethods& methods, int method,
                    Handler handler) {
    (new ExchangeStreamCall(
         queue, methods, method,
         std::make_shared<const Handler>(std::move(handler))))
        ->StartWaiting();
  }

 private:
  ExchangeStreamCall(ServerQueue& queue, RawMethods& methods, int method,
                     std::shared_ptr<const Handler> handler)
      : QueueCall(queue),
        methods_(methods),
        method_(method),
        handler_(std::move(handler)) {}
  ~ExchangeStreamCall() override { queue_.RemoveStream(&context_); }

  // Reads and writes run side by side, so each has its own tag.
  class Io final : public QueueEvent {
   public:
    using Handler = void (ExchangeStreamCall::*)(bool);
    Io(ExchangeStreamCall* call, Handler handler)
        : call_(call), handler_(handler) {}
    void Complete(bool ok) override { (call_->*handler_)(ok); }

   private:
    ExchangeStreamCall* call_;
    Handler handler_;
  };

  void RequestNext() override {
    methods_.RequestBidiStream(method_, &context_, &stream_, queue_.cq(),
                               &arrival_);
  }
  QueueCall* MakeNext() override {
    return new ExchangeStreamCall(queue_, methods_, method_, handler_);
  }
  void Arrived() override {
    if (!queue_.AddStream(&context_)) context_.TryCancel();
    OnCancel([this] { CancelAll(); });
    ReadNext();
  }

  void ReadNext() {
    if (queue_.Post([&] { stream_.Read(&in_, &read_done_); })) return;
    std::unique_lock<std::mutex> lock(mutex_);
    reading_ = false;
    EndIfIdle(lock);
  }
  void OnRead(bool ok) {
    std::unique_ptr<Exchange> exchange;
    if (ok) {  // else the client closed its side, or went away
      exchange.reset(new Exchange(this));
      if (!grpc::SerializationTraits<Request>::Deserialize(&in_,
                                                           &exchange->request_)
               .ok()) {
        std::unique_lock<std::mutex> lock(mutex_);
        end_status_ = absl::InvalidArgumentError(UnparsedRequestMessage(
            methods_.MethodPath(method_), Request::descriptor()->full_name()));
        reading_ = false;
        EndIfIdle(lock);
        return;
      }
    }
    if (!exchange) {
      std::unique_lock<std::mutex> lock(mutex_);
      reading_ = false;
      EndIfIdle(lock);
      return;
    }
    if (exchange->request_.deadline_ms() > 0) {
      exchange->deadline_ =
          std::chrono::system_clock::now() +
          std::chrono::milliseconds(exchange->request_.deadline_ms());
    }
    Exchange* raw = exchange.release();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.insert(raw);
    }
    // The handler runs before the next read is posted, so requests reach it
    // in the order the client sent them.
    (*handler_)(raw);
    ReadNext();
  }

  void Answer(Exchange* exchange, const absl::Status& status) {
    Response& answer = exchange->response_;
    if (!status.ok()) {
      answer.Clear();
      answer.set_error_code(static_cast<int>(status.code()));
      answer.set_error_message(std::string(status.message()));
    }
    answer.set_id(exchange->request_.id());
    grpc::ByteBuffer bytes;
    absl::Status serialized = SerializeMessage(answer, &bytes);
    std::unique_lock<std::mutex> lock(mutex_);
    pending_.erase(exchange);
    delete exchange;
    if (!serialized.ok()) {
      // Nothing the client could match: the stream ends with the error.
      end_status_ = serialized;
      context_.TryCancel();
    } else if (!broken_) {
      out_.push_back(std::move(bytes));
      if (!writing_) WriteFrontLocked();
    }
    EndIfIdle(lock);
  }
  void WriteFrontLocked() {
    writing_ = queue_.Post([&] { stream_.Write(out_.front(), &write_done_); });
    if (!writing_) {
      broken_ = true;
      out_.clear();
    }
  }
  void OnWritten(bool ok) {
    std::unique_lock<std::mutex> lock(mutex_);
    out_.pop_front();
    writing_ = false;
    if (!ok) {
      broken_ = true;
      out_.clear();
    }
    if (!out_.empty()) WriteFrontLocked();
    EndIfIdle(lock);
  }

  void OnExchangeCancel(Exchange* exchange, std::function<void()> on_cancel) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!cancelled_) {
        exchange->on_cancel_ = std::move(on_cancel);
        return;
      }
    }
    on_cancel();
  }
  void CancelAll() {
    std::vector<std::function<void()>> cancels;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      cancelled_ = true;
      broken_ = true;
      // The answer being written stays until its write completes.
      while (out_.size() > (writing_ ? 1u : 0u)) out_.pop_back();
      for (Exchange* exchange : pending_) {
        if (exchange->on_cancel_) cancels.push_back(exchange->on_cancel_);
      }
    }
    for (auto& cancel : cancels) cancel();
  }

  // The call's answer goes once nothing more will be read or written; the
  // lock is released first (a closed queue ends the call, and this, at once).
  void EndIfIdle(std::unique_lock<std::mutex>& lock) {
    if (reading_ || writing_ || !pending_.empty() || ended_) return;
    ended_ = true;
    lock.unlock();
    Start([&] { stream_.Finish(GrpcStatusOf(end_status_), &finished_); });
  }

  RawMethods& methods_;
  const int method_;
  const std::shared_ptr<const Handler> handler_;
  grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> stream_{
      &context_};
  grpc::ByteBuffer in_;
  Io read_done_{this, &ExchangeStreamCall::OnRead};
  Io write_done_{this, &ExchangeStreamCall::OnWritten};

  std::mutex mutex_;
  bool reading_ = true;
  bool writing_ = false;
  // The client is gone or a write failed: answers are dropped.
  bool broken_ = false;
  bool cancelled_ = false;
  bool ended_ = false;
  absl::Status end_status_;
  std::set<Exchange*> pending_;
  std::deque<grpc::ByteBuffer> out_;
};

}  // namespace ccl
