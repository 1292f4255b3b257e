#include "common/queue_server.h"

#include <grpc/support/time.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <utility>

#include "common/busy_poll.h"
#include "common/grpc_status.h"

namespace ccl {

ServerQueue::ServerQueue(grpc::ServerBuilder& builder)
    : cq_(builder.AddCompletionQueue()) {}

ServerQueue::~ServerQueue() { Close(std::chrono::milliseconds(0)); }

void ServerQueue::Start(int threads, std::chrono::microseconds busy_poll) {
  for (int i = 0; i < threads; ++i) {
    threads_.emplace_back([this, busy_poll] {
      void* tag = nullptr;
      bool ok = false;
      while (true) {
        // A deadline in the past polls once without blocking.
        grpc::CompletionQueue::NextStatus polled =
            grpc::CompletionQueue::TIMEOUT;
        SpinUntil(busy_poll, [&] {
          polled = cq_->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
          return polled != grpc::CompletionQueue::TIMEOUT;
        });
        if (polled == grpc::CompletionQueue::SHUTDOWN) return;
        if (polled == grpc::CompletionQueue::TIMEOUT && !cq_->Next(&tag, &ok)) {
          return;
        }
        static_cast<QueueEvent*>(tag)->Complete(ok);
      }
    });
  }
}

bool ServerQueue::AddStream(grpc::ServerContext* context) {
  std::lock_guard<std::mutex> lock(streams_mutex_);
  if (streams_cancelled_) return false;
  streams_.insert(context);
  return true;
}

void ServerQueue::RemoveStream(grpc::ServerContext* context) {
  std::lock_guard<std::mutex> lock(streams_mutex_);
  streams_.erase(context);
}

void ServerQueue::CancelStreams() {
  std::lock_guard<std::mutex> lock(streams_mutex_);
  streams_cancelled_ = true;
  for (grpc::ServerContext* context : streams_) context->TryCancel();
}

void ServerQueue::CallOpened() {
  std::lock_guard<std::mutex> lock(open_mutex_);
  ++open_;
}

void ServerQueue::CallClosed() {
  std::lock_guard<std::mutex> lock(open_mutex_);
  if (--open_ == 0) open_changed_.notify_all();
}

int64_t ServerQueue::open_calls() {
  std::lock_guard<std::mutex> lock(open_mutex_);
  return open_;
}

void ServerQueue::Close(std::chrono::milliseconds grace) {
  {
    std::shared_lock<std::shared_mutex> lock(close_mutex_);
    if (closed_) return;
  }
  {
    std::unique_lock<std::mutex> lock(open_mutex_);
    open_changed_.wait_for(lock, grace, [this] { return open_ == 0; });
  }
  {
    std::unique_lock<std::shared_mutex> lock(close_mutex_);
    if (closed_) return;
    closed_ = true;
    cq_->Shutdown();
  }
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  // A queue that never ran a thread still holds the events of the waits
  // posted on it; they are taken here so that it can be destroyed.
  void* tag = nullptr;
  bool ok = false;
  while (cq_->Next(&tag, &ok)) static_cast<QueueEvent*>(tag)->Complete(ok);
}

const google::protobuf::ServiceDescriptor* FindServiceDescriptor(
    const std::string& full_name) {
  return google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      full_name);
}

QueueCall::QueueCall(ServerQueue& queue) : queue_(queue) {}

void QueueCall::StartWaiting() {
  context_.AsyncNotifyWhenDone(&done_);
  if (!queue_.Post([this] { RequestNext(); })) delete this;
}

void QueueCall::OnArrival(bool ok) {
  // Not ok: the server is shutting down and this wait ends unanswered; gRPC
  // then never returns the done tag either.
  if (!ok) {
    delete this;
    return;
  }
  queue_.CallOpened();
  MakeNext()->StartWaiting();
  Arrived();
}

void QueueCall::OnFinished(bool) { Unref(); }

void QueueCall::OnDone(bool) {
  if (context_.IsCancelled()) {
    std::function<void()> on_cancel;
    {
      std::lock_guard<std::mutex> lock(cancel_mutex_);
      cancelled_ = true;
      on_cancel = std::move(on_cancel_);
    }
    if (on_cancel) on_cancel();
  }
  Unref();
}

void QueueCall::OnCancel(std::function<void()> on_cancel) {
  {
    std::lock_guard<std::mutex> lock(cancel_mutex_);
    if (!cancelled_) {
      on_cancel_ = std::move(on_cancel);
      return;
    }
  }
  on_cancel();
}

void QueueCall::Unref() {
  if (refs_.fetch_sub(1) != 1) return;
  ServerQueue& queue = queue_;
  delete this;
  queue.CallClosed();
}

absl::Status SerializeMessage(const google::protobuf::MessageLite& message,
                              grpc::ByteBuffer* out) {
  // gRPC's writer asserts on a buffer that still holds bytes (the previous
  // message of a stream).
  out->Clear();
  bool own_buffer = false;
  grpc::Status status =
      grpc::SerializationTraits<google::protobuf::MessageLite>::Serialize(
          message, out, &own_buffer);
  if (!status.ok()) {
    return absl::InternalError("could not serialize the answer: " +
                               status.error_message());
  }
  return absl::OkStatus();
}

grpc::Status GrpcStatusOf(const absl::Status& status) {
  return ToGrpcStatus(status);
}

// One call of a method nobody serves.
class UnknownMethods::Call final : public QueueCall {
 public:
  Call(ServerQueue& queue, UnknownMethods& owner)
      : QueueCall(queue), owner_(owner) {}
  static void Listen(ServerQueue& queue, UnknownMethods& owner) {
    (new Call(queue, owner))->StartWaiting();
  }

 private:
  void RequestNext() override {
    owner_.service_.RequestCall(&context_, &stream_, queue_.cq(), queue_.cq(),
                                &arrival_);
  }
  QueueCall* MakeNext() override { return new Call(queue_, owner_); }
  void Arrived() override {
    // The method is the caller's own string: only its length is bounded.
    const grpc::Status status(
        grpc::StatusCode::UNIMPLEMENTED,
        UnknownMethodMessage(context_.method().substr(0, 256), owner_.served_));
    Start([&] { stream_.Finish(status, &finished_); });
  }

  UnknownMethods& owner_;
  grpc::GenericServerAsyncReaderWriter stream_{&context_};
};

void UnknownMethods::Serve(ServerQueue& queue) { Call::Listen(queue, *this); }

}  // namespace ccl
