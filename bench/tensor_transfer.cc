// How fast tensor bytes move between a client and a worker: the client
// library's Write (WriteTensor, a client stream of chunks) and Read
// (ReadTensor, a server stream), rank 0 of a running cluster, what `ccctl
// tensor write/read` and every test that loads a tensor pay. Beside them the
// peer: the same bytes in the same chunk size on bare gRPC streams, to a
// server in a process of its own (this binary with --sink-server) that
// drops what it gets and sends from a buffer it holds, so the ratio is what
// the service adds to what gRPC itself carries on the machine. Time per
// transfer, p50 of --rounds after one warm-up; algbw as nccl-tests prints
// it (bytes / time, GB/s).
//
//   ./build/bench/tensor_transfer --coordinator HOST:PORT [--rounds 5]
//       [--sizes 65536,1048576,16777216,67108864,268435456]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/child_servers.h"
#include "ccl/v1/worker.grpc.pb.h"
#include "client/cluster_client.h"

namespace {

using ccl::client::ClusterClient;
using Clock = std::chrono::steady_clock;

// What the client library sends per message (client/internal/
// tensor_streams.cc) and what the worker sends back by default.
constexpr int64_t kChunkBytes = 1 << 20;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start)
      .count();
}

// The peer's server: WriteTensor reads every chunk and keeps none;
// ReadTensor sends `count` bytes in chunks from one buffer it fills once.
class SinkService final : public ccl::v1::Worker::Service {
  grpc::Status WriteTensor(
      grpc::ServerContext*,
      grpc::ServerReader<ccl::v1::WriteTensorChunk>* reader,
      ccl::v1::TensorInfo*) override {
    ccl::v1::WriteTensorChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return grpc::Status::OK;
  }
  grpc::Status ReadTensor(
      grpc::ServerContext*, const ccl::v1::ReadTensorRequest* request,
      grpc::ServerWriter<ccl::v1::ReadTensorChunk>* writer) override {
    const int64_t chunk_bytes =
        request->chunk_bytes() > 0 ? request->chunk_bytes() : kChunkBytes;
    if (static_cast<int64_t>(source_.size()) < chunk_bytes) {
      source_.assign(static_cast<size_t>(chunk_bytes), '\x5a');
    }
    ccl::v1::ReadTensorChunk chunk;
    for (int64_t sent = 0; sent < request->count();) {
      const int64_t n = std::min(chunk_bytes, request->count() - sent);
      chunk.set_offset_bytes(sent);
      chunk.set_data(source_.data(), static_cast<size_t>(n));
      if (!writer->Write(chunk)) break;
      sent += n;
    }
    return grpc::Status::OK;
  }
  std::string source_;
};

int ServeSink() {
  SinkService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.SetMaxReceiveMessageSize(16 << 20);
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  if (!server || port == 0) return 1;
  ccl::bench::AnnouncePort(port);
  server->Wait();
  return 0;
}

// The peer's client: one stream per transfer, as the library opens.
bool PeerWrite(ccl::v1::Worker::Stub& stub, const std::string& bytes) {
  grpc::ClientContext context;
  ccl::v1::TensorInfo info;
  auto writer = stub.WriteTensor(&context, &info);
  ccl::v1::WriteTensorChunk chunk;
  chunk.set_name("x");
  for (size_t sent = 0; sent < bytes.size();) {
    const size_t n = std::min<size_t>(kChunkBytes, bytes.size() - sent);
    chunk.set_offset_bytes(static_cast<int64_t>(sent));
    chunk.set_data(bytes.data() + sent, n);
    if (!writer->Write(chunk)) break;
    chunk.clear_name();
    sent += n;
  }
  writer->WritesDone();
  return writer->Finish().ok();
}

// Into a string of its own, sized once, as the library returns one: the
// fresh pages' faults are part of what a reader pays (a buffer reused across
// rounds hides them: 29-42 ms against 197 ms for 64 MiB on the 2-vCPU VM).
bool PeerRead(ccl::v1::Worker::Stub& stub, int64_t count, std::string* out) {
  grpc::ClientContext context;
  ccl::v1::ReadTensorRequest request;
  request.set_name("x");
  request.set_count(count);
  auto reader = stub.ReadTensor(&context, request);
  ccl::v1::ReadTensorChunk chunk;
  std::string bytes;
  bytes.reserve(static_cast<size_t>(count));
  while (reader->Read(&chunk)) bytes.append(chunk.data());
  *out = std::move(bytes);
  return reader->Finish().ok() && static_cast<int64_t>(out->size()) == count;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--sink-server") == 0) {
    return ServeSink();
  }
  ccl::client::ClientOptions options;
  int rounds = 5;
  std::vector<int64_t> sizes = {64 << 10, 1 << 20, 16 << 20, 64 << 20,
                                256 << 20};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--coordinator") {
      options.coordinator = argv[i + 1];
    } else if (flag == "--rounds") {
      rounds = std::atoi(argv[i + 1]);
    } else if (flag == "--sizes") {
      sizes.clear();
      for (absl::string_view part : absl::StrSplit(argv[i + 1], ',')) {
        int64_t size = 0;
        if (!absl::SimpleAtoi(part, &size) || size < 4 || size % 4 != 0) {
          std::fprintf(stderr, "--sizes: %s is not a multiple of 4 >= 4\n",
                       std::string(part).c_str());
          return 2;
        }
        sizes.push_back(size);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (rounds < 1) {
    std::fprintf(stderr, "need --rounds >= 1\n");
    return 2;
  }
  auto client = ClusterClient::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n",
                 ccl::client::StatusText(client.status()).c_str());
    return 1;
  }
  ClusterClient& c = **client;
  ccl::bench::ChildServers sinks(1, {"--sink-server"});
  if (sinks.addresses().empty()) {
    std::fprintf(stderr, "the peer's server did not start\n");
    return 1;
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  auto peer = ccl::v1::Worker::NewStub(grpc::CreateCustomChannel(
      sinks.addresses()[0], grpc::InsecureChannelCredentials(), args));

  std::printf("# rank 0 of %zu, chunks of %lld bytes, p50 of %d rounds\n",
              c.AllRanks().size(), static_cast<long long>(kChunkBytes), rounds);
  std::printf("%12s  %10s %7s  %10s %7s  %10s %7s  %10s %7s  %6s %6s\n", "",
              "write", "", "read", "", "bare-write", "", "bare-read", "",
              "ratio", "");
  std::printf("%12s  %10s %7s  %10s %7s  %10s %7s  %10s %7s  %6s %6s\n",
              "size(B)", "time(us)", "algbw", "time(us)", "algbw", "time(us)",
              "algbw", "time(us)", "algbw", "write", "read");
  const std::string name = "tensor_transfer.x";
  for (const int64_t size : sizes) {
    (void)c.Free(0, name);
    if (auto info = c.Alloc(0, {name, ccl::DType::kFloat32, {size / 4}});
        !info.ok()) {
      std::fprintf(stderr, "alloc %lld bytes: %s\n",
                   static_cast<long long>(size),
                   ccl::client::StatusText(info.status()).c_str());
      return 1;
    }
    std::string bytes(static_cast<size_t>(size), '\0');
    for (size_t i = 0; i < bytes.size(); ++i) {
      bytes[i] = static_cast<char>(i * 131 + 7);
    }
    std::vector<double> write_us, read_us, peer_write_us, peer_read_us;
    std::string back;
    for (int round = 0; round <= rounds; ++round) {
      auto start = Clock::now();
      auto written = c.Write(0, name, 0, bytes);
      const double write_time = Since(start);
      start = Clock::now();
      auto read = c.Read(0, name, 0, 0);
      const double read_time = Since(start);
      if (!written.ok() || !read.ok() || *read != bytes) {
        std::fprintf(
            stderr, "%lld bytes: %s\n", static_cast<long long>(size),
            !written.ok() ? ccl::client::StatusText(written.status()).c_str()
            : !read.ok()  ? ccl::client::StatusText(read.status()).c_str()
                          : "read back other bytes than written");
        return 1;
      }
      start = Clock::now();
      const bool peer_wrote = PeerWrite(*peer, bytes);
      const double peer_write_time = Since(start);
      start = Clock::now();
      const bool peer_read = PeerRead(*peer, size, &back);
      const double peer_read_time = Since(start);
      if (!peer_wrote || !peer_read) {
        std::fprintf(stderr, "the bare-gRPC peer failed at %lld bytes\n",
                     static_cast<long long>(size));
        return 1;
      }
      if (round == 0) continue;  // warm-up
      write_us.push_back(write_time);
      read_us.push_back(read_time);
      peer_write_us.push_back(peer_write_time);
      peer_read_us.push_back(peer_read_time);
    }
    (void)c.Free(0, name);
    const double w = Median(write_us), r = Median(read_us);
    const double pw = Median(peer_write_us), pr = Median(peer_read_us);
    auto gbps = [&](double us) { return static_cast<double>(size) / us / 1e3; };
    std::printf(
        "%12lld  %10.0f %7.2f  %10.0f %7.2f  %10.0f %7.2f  %10.0f %7.2f  "
        "%6.2f %6.2f\n",
        static_cast<long long>(size), w, gbps(w), r, gbps(r), pw, gbps(pw), pr,
        gbps(pr), pw / w, pr / r);
    std::fflush(stdout);
  }
  return 0;
}
