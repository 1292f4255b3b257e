// Requests to many ranks at once without a thread per rank: each goes out
// on gRPC's callback API, its completion runs on gRPC's own threads, and the
// caller's thread waits for all of them (Ray's ClientCallManager is the
// pattern).
//
// One rule keeps this safe: a completion never owns a ClientContext. A
// context holds its channel, and a channel whose last reference goes on one
// of gRPC's callback threads shuts that thread's own pool down under it
// (grpc/grpc#32584). So contexts live in state the caller (or the client)
// owns and destroys on its own thread, once their completion said, as its
// very last act, that it is done.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grpc_status.h"

namespace ccl::client::internal {

// Counts completions down to zero; Wait blocks until then.
class Countdown {
 public:
  explicit Countdown(size_t count) : remaining_(count) {}
  void Done() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--remaining_ == 0) done_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return remaining_ == 0; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  size_t remaining_;
};

// One unary call per slot, all in flight together; the caller waits in
// Wait (the destructor waits too, should a caller return early).
template <typename Request, typename Response>
class UnaryBatch {
 public:
  struct Call {
    grpc::ClientContext context;
    Request request;
    Response response;
    absl::Status status;
  };

  explicit UnaryBatch(size_t size) : countdown_(size) {
    calls_.reserve(size);
    for (size_t i = 0; i < size; ++i)
      calls_.push_back(std::make_unique<Call>());
  }
  ~UnaryBatch() { countdown_.Wait(); }
  UnaryBatch(const UnaryBatch&) = delete;
  UnaryBatch& operator=(const UnaryBatch&) = delete;

  size_t size() const { return calls_.size(); }
  Call& call(size_t i) { return *calls_[i]; }
  // Call i ends without being sent (a request that failed locally).
  void Fail(size_t i, absl::Status status) {
    calls_[i]->status = std::move(status);
    countdown_.Done();
  }
  // What the stub calls back with when call i ends.
  std::function<void(grpc::Status)> Done(size_t i) {
    return [this, i](grpc::Status status) {
      calls_[i]->status = FromGrpcStatus(status);
      countdown_.Done();  // last: the batch may be gone after this
    };
  }
  // Blocks until every call ended; the responses in slot order.
  std::vector<absl::StatusOr<Response>> Wait() {
    countdown_.Wait();
    std::vector<absl::StatusOr<Response>> out;
    out.reserve(size());
    for (auto& call : calls_) {
      if (call->status.ok()) {
        out.emplace_back(std::move(call->response));
      } else {
        out.emplace_back(std::move(call->status));
      }
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<Call>> calls_;
  Countdown countdown_;
};

// Calls nobody waits for (giving seqs back, say). Their state stays here
// until they end and is freed on a thread of the client's (Reap, or the
// destructor after WaitIdle), never on the thread that completed them.
class BackgroundCalls {
 public:
  struct Call {
    virtual ~Call() = default;
    grpc::ClientContext context;
    bool done = false;  // guarded by BackgroundCalls::mutex_
  };
  template <typename Request, typename Response>
  struct Unary : Call {
    Request request;
    Response response;
  };

  // Keeps `call` until it ends; frees the ones that ended already.
  template <typename T>
  T* Add(std::unique_ptr<T> call) {
    std::lock_guard<std::mutex> lock(mutex_);
    T* raw = call.get();
    calls_.push_back(std::move(call));
    return raw;
  }
  // The completion of `call`; its last act.
  void Ended(Call* call) {
    std::lock_guard<std::mutex> lock(mutex_);
    call->done = true;
    if (++ended_ == calls_.size()) idle_.notify_all();
  }
  // Frees the calls that ended. Not from a gRPC callback thread.
  void Reap() {
    std::vector<std::unique_ptr<Call>> ended;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = calls_.begin(); it != calls_.end();) {
        if ((*it)->done) {
          ended.push_back(std::move(*it));
          it = calls_.erase(it);
          --ended_;
        } else {
          ++it;
        }
      }
    }
  }
  void WaitIdle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return ended_ == calls_.size(); });
  }

 private:
  std::mutex mutex_;
  std::condition_variable idle_;
  std::vector<std::unique_ptr<Call>> calls_;
  size_t ended_ = 0;
};

}  // namespace ccl::client::internal
