// Ops on one long-lived SubmitStream per worker (worker.proto), instead of a
// unary Submit per op: a small op then pays one message each way rather than
// a call's set-up, and no thread hand-off through gRPC's callback threads.
//
// The streams share one completion queue, and nothing runs it but the threads
// that wait for answers: one of them at a time takes events off the queue (the
// leader) and hands each answer to whoever waits for it; when its own answers
// are in it gives the queue up to the next waiter. So a single caller (ccctl,
// a bench loop) gets its answer on its own thread, with no wake-up between.
//
// A stream that ends (its worker stopped, the connection broke) fails the ops
// still waiting on it with UNAVAILABLE and its reason, and the next op to that
// rank opens a new one, as a unary call would reconnect. A worker without
// SubmitStream (an older build) fails the ops sent to it UNIMPLEMENTED, none
// of them run, with a message that says how to send them as unary calls.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "ccl/v1/worker.grpc.pb.h"

namespace ccl::client::internal {

class OpStreams {
 public:
  using StubFor = std::function<absl::StatusOr<v1::Worker::Stub*>(int rank)>;

  // `busy_poll`: ClientOptions::busy_poll.
  OpStreams(StubFor stub_for, std::chrono::microseconds busy_poll);
  // Cancels every stream and waits for each to end.
  ~OpStreams();
  OpStreams(const OpStreams&) = delete;
  OpStreams& operator=(const OpStreams&) = delete;

  // Sends ops[i] to ranks[i], all at once, and waits for each answer until
  // deadlines[i] (then DEADLINE_EXCEEDED; the worker withdraws or bounds the
  // op on its side, as for a unary call). Results in order. Safe to call
  // from several threads.
  std::vector<absl::StatusOr<v1::OpResponse>> Run(
      const std::vector<int>& ranks, std::vector<v1::OpRequest> ops,
      const std::vector<std::chrono::system_clock::time_point>& deadlines);

 private:
  struct Stream;
  struct Batch;
  // One op waiting for its answer.
  struct Slot {
    Batch* batch = nullptr;
    absl::StatusOr<v1::OpResponse> result = absl::UnknownError("no answer");
    bool done = false;
  };
  struct Batch {
    size_t remaining = 0;
  };
  // What a tag on the queue stands for.
  struct Tag {
    enum Kind { kStarted, kRead, kWritten, kFinished };
    Stream* stream;
    Kind kind;
  };

  // The stream of `rank`, opened if it has none or its last one ended.
  Stream* StreamOf(int rank, v1::Worker::Stub* stub);
  void Handle(Tag* tag, bool ok);
  void WriteNext(Stream& stream);
  void Read(Stream& stream);
  // The stream will carry nothing more: ask for its status once no write
  // is in flight.
  void Close(Stream& stream);
  void Complete(Slot& slot, absl::StatusOr<v1::OpResponse> result);
  // Takes one event off the queue (waiting until `until` at most) and
  // handles it. Called with the lock held; releases it while waiting.
  void PollOnce(std::unique_lock<std::mutex>& lock,
                std::chrono::system_clock::time_point until);

  const StubFor stub_for_;
  const std::chrono::microseconds busy_poll_;
  grpc::CompletionQueue queue_;
  std::mutex mutex_;
  std::condition_variable changed_;
  bool polling_ = false;  // a waiter is taking events off the queue
  uint64_t next_id_ = 1;
  std::map<int, std::unique_ptr<Stream>> open_;
  // Streams that ended or were replaced, kept until their last event.
  std::vector<std::unique_ptr<Stream>> closing_;
};

}  // namespace ccl::client::internal
