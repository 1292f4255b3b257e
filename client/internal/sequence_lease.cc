#include "client/internal/sequence_lease.h"

#include <random>

#include "absl/strings/str_format.h"

namespace ccl::client::internal {
namespace {

// 128 random bits: a lease id no other client picks.
std::string FreshLeaseId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) absl::StrAppendFormat(&id, "%08x", random());
  return id;
}

}  // namespace

// One HoldLease stream: the coordinator's one reply says the lease is held;
// the read after it ends only when the stream does.
class SequenceLease::Stream final
    : public grpc::ClientReadReactor<v1::HoldLeaseReply> {
 public:
  // `lost` is set when a lease that was held ends before the owner ends it.
  Stream(v1::Coordinator::Stub& stub, std::string id, std::atomic<bool>* lost)
      : id_(std::move(id)), lost_(lost) {
    request_.set_lease(id_);
    stub.async()->HoldLease(&context_, &request_, this);
    StartRead(&reply_);
    StartCall();
  }
  ~Stream() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ending_ = true;
    }
    context_.TryCancel();
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held_ = true;
    }
    cv_.notify_all();
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& status) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (held_ && !ending_) lost_->store(true);
    done_ = true;
    status_ = status;
    cv_.notify_all();
  }

  // Whether the lease is held. Only the first ask waits for the answer (up
  // to `timeout`): a coordinator that neither answers nor ends the stream
  // must not add that wait to every reservation.
  bool Held(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!waited_) {
      waited_ = true;
      cv_.wait_for(lock, timeout, [this] { return held_ || done_; });
    }
    return held_ && !done_;
  }
  bool Ended() {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  bool Unimplemented() {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ && status_.error_code() == grpc::StatusCode::UNIMPLEMENTED;
  }
  const std::string& id() const { return id_; }

 private:
  const std::string id_;
  grpc::ClientContext context_;
  v1::HoldLeaseRequest request_;
  v1::HoldLeaseReply reply_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool>* const lost_;
  bool held_ = false;
  bool done_ = false;
  bool ending_ = false;
  bool waited_ = false;
  grpc::Status status_;
};

SequenceLease::SequenceLease(v1::Coordinator::Stub& stub,
                             std::chrono::milliseconds open_timeout)
    : stub_(stub), open_timeout_(open_timeout) {}

SequenceLease::~SequenceLease() = default;

std::string SequenceLease::Id() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (unsupported_) return std::string();
  if (stream_ && stream_->Ended()) {
    unsupported_ = stream_->Unimplemented();
    stream_.reset();
    if (unsupported_) return std::string();
  }
  if (!stream_) {
    stream_ = std::make_unique<Stream>(stub_, FreshLeaseId(), &lost_);
  }
  if (stream_->Held(open_timeout_)) return stream_->id();
  if (stream_->Ended() && stream_->Unimplemented()) {
    unsupported_ = true;
    stream_.reset();
  }
  return std::string();
}

}  // namespace ccl::client::internal
