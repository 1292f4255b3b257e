#include "client/internal/op_streams.h"

#include <grpc/support/time.h>

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/busy_poll.h"
#include "common/grpc_status.h"

namespace ccl::client::internal {

struct OpStreams::Stream {
  explicit Stream(int rank_in) : rank(rank_in) {}
  const int rank;
  grpc::ClientContext context;
  std::unique_ptr<
      grpc::ClientAsyncReaderWriter<v1::OpStreamRequest, v1::OpStreamResponse>>
      call;
  Tag started{this, Tag::kStarted};
  Tag read{this, Tag::kRead};
  Tag written{this, Tag::kWritten};
  Tag finished{this, Tag::kFinished};
  bool start_pending = true;
  bool open = false;  // started, and answers may still come
  bool writing = false;
  bool reading = false;
  bool finishing = false;  // Finish asked; its tag is the stream's last
  grpc::Status status;     // Finish's
  std::deque<v1::OpStreamRequest> to_write;
  v1::OpStreamResponse answer;
  std::map<uint64_t, Slot*> waiting;
};

OpStreams::OpStreams(StubFor stub_for, std::chrono::microseconds busy_poll)
    : stub_for_(std::move(stub_for)), busy_poll_(busy_poll) {}

OpStreams::~OpStreams() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (auto& [rank, stream] : open_) closing_.push_back(std::move(stream));
  open_.clear();
  for (auto& stream : closing_) stream->context.TryCancel();
  while (!closing_.empty()) {
    if (!polling_) {
      PollOnce(lock, std::chrono::system_clock::time_point::max());
    } else {
      changed_.wait(lock);
    }
  }
  lock.unlock();
  queue_.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue_.Next(&tag, &ok)) {
  }
}

OpStreams::Stream* OpStreams::StreamOf(int rank, v1::Worker::Stub* stub) {
  auto it = open_.find(rank);
  if (it != open_.end()) {
    if (it->second->open || it->second->start_pending) return it->second.get();
    closing_.push_back(std::move(it->second));
    open_.erase(it);
  }
  auto stream = std::make_unique<Stream>(rank);
  stream->call = stub->PrepareAsyncSubmitStream(&stream->context, &queue_);
  stream->call->StartCall(&stream->started);
  Stream* raw = stream.get();
  open_[rank] = std::move(stream);
  return raw;
}

std::vector<absl::StatusOr<v1::OpResponse>> OpStreams::Run(
    const std::vector<int>& ranks, std::vector<v1::OpRequest> ops,
    const std::vector<std::chrono::system_clock::time_point>& deadlines) {
  const size_t n = ranks.size();
  // Stubs first: making one may connect a channel, which is not done under
  // this lock.
  std::vector<absl::StatusOr<v1::Worker::Stub*>> stubs;
  stubs.reserve(n);
  for (int rank : ranks) stubs.push_back(stub_for_(rank));

  Batch batch;
  std::vector<Slot> slots(n);
  std::vector<std::pair<Stream*, uint64_t>> sent(n, {nullptr, 0});
  std::unique_lock<std::mutex> lock(mutex_);
  const auto now = std::chrono::system_clock::now();
  for (size_t i = 0; i < n; ++i) {
    if (!stubs[i].ok()) {
      slots[i].result = stubs[i].status();
      slots[i].done = true;
      continue;
    }
    Stream* stream = StreamOf(ranks[i], *stubs[i]);
    const uint64_t id = next_id_++;
    slots[i].batch = &batch;
    ++batch.remaining;
    stream->waiting[id] = &slots[i];
    sent[i] = {stream, id};
    v1::OpStreamRequest& request = stream->to_write.emplace_back();
    request.set_id(id);
    *request.mutable_op() = std::move(ops[i]);
    request.set_deadline_ms(std::max<int64_t>(
        1, std::chrono::duration_cast<std::chrono::milliseconds>(deadlines[i] -
                                                                 now)
               .count()));
    WriteNext(*stream);
  }
  while (batch.remaining > 0) {
    const auto at = std::chrono::system_clock::now();
    auto next_deadline = std::chrono::system_clock::time_point::max();
    for (size_t i = 0; i < n; ++i) {
      if (slots[i].done) continue;
      if (at >= deadlines[i]) {
        // A stream whose slot is not done is still alive: it fails its
        // waiting slots before it goes.
        sent[i].first->waiting.erase(sent[i].second);
        Complete(slots[i],
                 absl::DeadlineExceededError(absl::StrCat(
                     "rank ", ranks[i],
                     " did not answer the op before the client's deadline")));
        continue;
      }
      next_deadline = std::min(next_deadline, deadlines[i]);
    }
    if (batch.remaining == 0) break;
    if (!polling_) {
      PollOnce(lock, next_deadline);
    } else {
      changed_.wait_until(lock, next_deadline);
    }
  }
  lock.unlock();
  std::vector<absl::StatusOr<v1::OpResponse>> out;
  out.reserve(n);
  for (Slot& slot : slots) out.push_back(std::move(slot.result));
  return out;
}

void OpStreams::PollOnce(std::unique_lock<std::mutex>& lock,
                         std::chrono::system_clock::time_point until) {
  polling_ = true;
  lock.unlock();
  void* tag = nullptr;
  bool ok = false;
  // A deadline in the past polls once without blocking.
  grpc::CompletionQueue::NextStatus status = grpc::CompletionQueue::TIMEOUT;
  SpinUntil(busy_poll_, [&] {
    status = queue_.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC));
    return status != grpc::CompletionQueue::TIMEOUT ||
           std::chrono::system_clock::now() >= until;
  });
  if (status == grpc::CompletionQueue::TIMEOUT) {
    status = queue_.AsyncNext(&tag, &ok, until);
  }
  lock.lock();
  polling_ = false;
  if (status == grpc::CompletionQueue::GOT_EVENT) {
    Handle(static_cast<Tag*>(tag), ok);
  }
  // Waiters whose answers came, and one to take the queue over.
  changed_.notify_all();
}

void OpStreams::Complete(Slot& slot, absl::StatusOr<v1::OpResponse> result) {
  slot.result = std::move(result);
  slot.done = true;
  --slot.batch->remaining;
}

void OpStreams::WriteNext(Stream& stream) {
  if (!stream.open || stream.writing || stream.to_write.empty()) return;
  stream.writing = true;
  stream.call->Write(stream.to_write.front(), &stream.written);
}

void OpStreams::Read(Stream& stream) {
  stream.reading = true;
  stream.call->Read(&stream.answer, &stream.read);
}

void OpStreams::Close(Stream& stream) {
  if (stream.finishing || stream.writing || stream.reading ||
      stream.start_pending) {
    return;
  }
  stream.finishing = true;
  stream.call->Finish(&stream.status, &stream.finished);
}

void OpStreams::Handle(Tag* tag, bool ok) {
  Stream& stream = *tag->stream;
  switch (tag->kind) {
    case Tag::kStarted:
      stream.start_pending = false;
      if (!ok) {
        Close(stream);
        return;
      }
      stream.open = true;
      Read(stream);
      WriteNext(stream);
      return;
    case Tag::kRead: {
      stream.reading = false;
      if (!ok) {  // the worker ended the stream: no more answers
        stream.open = false;
        Close(stream);
        return;
      }
      auto it = stream.waiting.find(stream.answer.id());
      // An answer nobody waits for any more (its deadline passed) is dropped.
      if (it != stream.waiting.end()) {
        Slot* slot = it->second;
        stream.waiting.erase(it);
        v1::OpStreamResponse& answer = stream.answer;
        if (answer.error_code() != 0) {
          Complete(
              *slot,
              absl::Status(static_cast<absl::StatusCode>(answer.error_code()),
                           answer.error_message()));
        } else {
          Complete(*slot, std::move(*answer.mutable_response()));
        }
      }
      Read(stream);
      return;
    }
    case Tag::kWritten:
      stream.writing = false;
      if (ok) {
        stream.to_write.pop_front();
        WriteNext(stream);
      } else {
        // The stream broke; its read fails too, and the ops still waiting
        // fail when it ends.
        stream.to_write.clear();
        stream.open = false;
      }
      if (!stream.open) Close(stream);
      return;
    case Tag::kFinished: {
      const absl::Status ended = FromGrpcStatus(stream.status);
      const absl::Status failed =
          ended.code() == absl::StatusCode::kUnimplemented
              ? absl::UnimplementedError(absl::StrCat(
                    "rank ", stream.rank,
                    "'s worker has no op stream (an older build?): ",
                    ended.message(),
                    ". Send ops as unary calls: ClientOptions::op_streams = "
                    "false (ccctl: CCL_CLIENT_OP_STREAMS=0)"))
              : absl::UnavailableError(absl::StrCat(
                    "the op stream to rank ", stream.rank,
                    " ended before the op's answer came: ",
                    ended.ok() ? "closed by the worker" : ended.ToString()));
      for (auto& [id, slot] : stream.waiting) Complete(*slot, failed);
      stream.waiting.clear();
      // Its last event: the stream goes (on this thread, a client's own).
      auto it = open_.find(stream.rank);
      if (it != open_.end() && it->second.get() == &stream) {
        open_.erase(it);
        return;
      }
      std::erase_if(closing_,
                    [&](const auto& held) { return held.get() == &stream; });
      return;
    }
  }
}

}  // namespace ccl::client::internal
