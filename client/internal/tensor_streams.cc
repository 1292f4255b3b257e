// Tensor bytes in and out: one stream per rank, all in flight together on
// the callback API's reactors, the caller's thread waiting for the lot.
#include <algorithm>
#include <exception>
#include <memory>
#include <utility>

#include "client/internal/client_impl.h"
#include "client/internal/convert.h"
#include "common/huge_pages.h"

namespace ccl::client {
namespace {

// What the workers accept per message; gRPC's default limit is 4 MiB.
constexpr size_t kChunkBytes = 1 << 20;

// The caller owns each reactor and frees it once its OnDone counted down
// (see fan_out.h for why no completion may own a context).
class WriteCall final : public grpc::ClientWriteReactor<v1::WriteTensorChunk> {
 public:
  WriteCall(const TensorWriteRef& write, internal::Countdown* countdown)
      : write_(write), countdown_(countdown) {}

  void Start(v1::Worker::Stub* stub,
             std::chrono::system_clock::time_point deadline) {
    context_.set_deadline(deadline);
    stub->async()->WriteTensor(&context_, &response_, this);
    WriteNext();
    StartCall();
  }
  absl::StatusOr<v1::TensorInfo> TakeResult() {
    if (!status_.ok()) return status_;
    return std::move(response_);
  }

  void OnWriteDone(bool ok) override {
    // Not ok: the worker ended the stream, and OnDone says why.
    if (ok && sent_ < write_.bytes.size()) WriteNext();
  }
  void OnDone(const grpc::Status& status) override {
    status_ = FromGrpcStatus(status);
    countdown_->Done();  // last: the caller may free this now
  }

 private:
  // The first chunk names the tensor; an empty write still sends it. The
  // chunk's buffer is reused: Clear keeps a string field's capacity.
  void WriteNext() {
    chunk_.Clear();
    if (sent_ == 0) chunk_.set_name(*write_.name);
    chunk_.set_offset_bytes(write_.offset_bytes + static_cast<int64_t>(sent_));
    const size_t n = std::min(kChunkBytes, write_.bytes.size() - sent_);
    chunk_.mutable_data()->assign(write_.bytes.data() + sent_, n);
    sent_ += n;
    if (sent_ >= write_.bytes.size()) {
      StartWriteLast(&chunk_, grpc::WriteOptions());
    } else {
      StartWrite(&chunk_);
    }
  }

  const TensorWriteRef write_;
  internal::Countdown* const countdown_;
  grpc::ClientContext context_;
  v1::WriteTensorChunk chunk_;
  size_t sent_ = 0;
  v1::TensorInfo response_;
  absl::Status status_;
};

class ReadCall final : public grpc::ClientReadReactor<v1::ReadTensorChunk> {
 public:
  ReadCall(v1::ReadTensorRequest request, internal::Countdown* countdown)
      : request_(std::move(request)), countdown_(countdown) {}

  void Start(v1::Worker::Stub* stub,
             std::chrono::system_clock::time_point deadline) {
    context_.set_deadline(deadline);
    stub->async()->ReadTensor(&context_, &request_, this);
    StartRead(&chunk_);
    StartCall();
  }
  absl::StatusOr<std::string> TakeResult() {
    if (!status_.ok()) return status_;
    return std::move(bytes_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended; OnDone follows
    if (bytes_.empty() && chunk_.total_bytes() > 0) {
      // Sized once from the first chunk (a worker before total_bytes sends
      // 0: the string grows as before). A size this process cannot hold
      // leaves it growing, and the read fails as it would have anyway.
      try {
        bytes_.reserve(static_cast<size_t>(chunk_.total_bytes()));
        // The chunks are the first to touch it (common/huge_pages.h).
        AdviseHugePages(bytes_.data(), bytes_.capacity());
      } catch (const std::exception&) {
      }
    }
    bytes_ += chunk_.data();
    StartRead(&chunk_);
  }
  void OnDone(const grpc::Status& status) override {
    status_ = FromGrpcStatus(status);
    countdown_->Done();  // last: the caller may free this now
  }

 private:
  const v1::ReadTensorRequest request_;
  internal::Countdown* const countdown_;
  grpc::ClientContext context_;
  v1::ReadTensorChunk chunk_;
  std::string bytes_;
  absl::Status status_;
};

// Starts one reactor per entry and waits for all of them.
template <typename Call, typename Result, typename MakeCall>
std::vector<absl::StatusOr<Result>> RunEach(internal::ClientImpl& impl,
                                            const std::vector<int>& ranks,
                                            const MakeCall& make_call) {
  impl.Connect(ranks);
  internal::Countdown countdown(ranks.size());
  std::vector<std::unique_ptr<Call>> calls(ranks.size());
  std::vector<absl::Status> local(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto stub = impl.Stub(ranks[i]);
    if (!stub.ok()) {
      local[i] = stub.status();
      countdown.Done();
      continue;
    }
    calls[i] = make_call(i, &countdown);
    calls[i]->Start(*stub, impl.Deadline());
  }
  countdown.Wait();
  std::vector<absl::StatusOr<Result>> out;
  out.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (calls[i]) {
      out.push_back(calls[i]->TakeResult());
    } else {
      out.push_back(local[i]);
    }
  }
  return out;
}

}  // namespace

RankResults<TensorInfo> WriteTensors(
    internal::ClientImpl& impl, const std::vector<TensorWriteRef>& writes) {
  std::vector<int> ranks;
  for (const auto& write : writes) ranks.push_back(write.rank);
  auto results = RunEach<WriteCall, v1::TensorInfo>(
      impl, ranks, [&](size_t i, internal::Countdown* countdown) {
        return std::make_unique<WriteCall>(writes[i], countdown);
      });
  return internal::ToNativeEach<TensorInfo>(ranks, std::move(results));
}

RankResults<std::string> ReadTensors(internal::ClientImpl& impl,
                                     const std::vector<int>& ranks,
                                     const std::string& name, int64_t offset,
                                     int64_t count) {
  v1::ReadTensorRequest request;
  request.set_name(name);
  request.set_offset(offset);
  request.set_count(count);
  return Zip(ranks,
             RunEach<ReadCall, std::string>(
                 impl, ranks, [&](size_t, internal::Countdown* countdown) {
                   return std::make_unique<ReadCall>(request, countdown);
                 }));
}

}  // namespace ccl::client
