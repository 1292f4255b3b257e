// What the service costs a client per op, piece by piece, on a running
// cluster: the round trip of a request every worker answers at once
// (GetInfo: RPC and fan-out only), an 8-byte all_reduce as ccctl bench --e2e
// times it (with the worker's own share), the same without the cross-rank
// agreement, and a plan of ops (the RPC paid once). Every figure is the
// client's wall clock through the client library; p50 and p99 over --iters.
// Beside them, the peer for the RPC part: the same fan-out on bare gRPC
// stubs to the workers themselves and to servers that do nothing (this
// binary, one process per rank, as the workers are) on each of gRPC's server
// APIs, so the service's RPC cost reads as a ratio to what gRPC itself costs
// on the machine, and the server API's share of it shows; and one message
// each way on a long-lived stream per rank, what a unary call's setup costs
// beside it. The client library sends ops on such streams (SubmitStream);
// the all_reduce is also timed through a second client that sends each op
// as a unary Submit, the way it did before.
//
// With --idle-gap-ms G, also the same GetInfo and all_reduce each after G ms
// with nothing in flight, and the all_reduce after G ms of the client's
// thread spinning instead of sleeping: what a user pays who issues single
// ops with time between them, and whether the client's sleep is the cause.
//
//   ./build/bench/client_latency --coordinator HOST:PORT [--iters 2000]
//       [--bytes 8] [--plan 1000] [--plan-rounds 5] [--idle-gap-ms 0]
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/child_servers.h"
#include "ccl/v1/worker.grpc.pb.h"
#include "client/cluster_client.h"
#include "common/grpc_errors.h"
#include "common/grpc_health.h"

namespace {

using ccl::client::ClusterClient;
using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * values.size()));
  return values[std::clamp<size_t>(rank, 1, values.size()) - 1];
}

double Since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start)
      .count();
}

void Row(const char* what, const std::vector<double>& us) {
  std::printf("%-44s %10.1f %10.1f\n", what, Percentile(us, 0.5),
              Percentile(us, 0.99));
}

bool AllOk(const auto& results, const char* what) {
  for (const auto& r : results) {
    if (!r.result.ok()) {
      std::fprintf(stderr, "%s: rank %d: %s\n", what, r.rank,
                   ccl::client::StatusText(r.result.status()).c_str());
      return false;
    }
  }
  return true;
}

// Per op, the slowest worker's share (its acceptance to completion, split
// into waiting behind earlier ops, the backend's op, and the rest) and how
// far apart the requests reached the workers (a rank that got its request
// first waits in the op for the last one).
struct WorkerShare {
  std::vector<double> total, queue, op, rest, skew;

  void Add(const ccl::client::RankResults<ccl::client::OpResult>& results) {
    const ccl::client::OpTiming* slowest = nullptr;
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (const auto& r : results) {
      const auto& timing = r.result->timing;
      if (slowest == nullptr || timing.total_us > slowest->total_us) {
        slowest = &timing;
      }
      first = std::min(first, timing.enqueued_unix_us);
      last = std::max(last, timing.enqueued_unix_us);
    }
    total.push_back(slowest->total_us);
    queue.push_back(slowest->queue_us);
    op.push_back(slowest->device_us);
    rest.push_back(slowest->total_us - slowest->queue_us - slowest->device_us);
    skew.push_back(static_cast<double>(last - first));
  }
  void Print(const std::string& rest_is) const {
    Row("  of which on the slowest worker", total);
    Row("    queued behind earlier ops there", queue);
    Row("    in the backend's op (data, peer waits)", op);
    Row(("    the rest (" + rest_is + ")").c_str(), rest);
    Row("  requests' arrival skew across ranks", skew);
  }
};

// Worker services that answer GetInfo at once and nothing else, on each of
// gRPC's server APIs: the floor a worker's RPCs stand on.
class CallbackNoop final : public ccl::v1::Worker::CallbackService {
  grpc::ServerUnaryReactor* GetInfo(grpc::CallbackServerContext* context,
                                    const ccl::v1::GetInfoRequest*,
                                    ccl::v1::WorkerInfo*) override {
    auto* reactor = context->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
};
class SyncNoop final : public ccl::v1::Worker::Service {
  grpc::Status GetInfo(grpc::ServerContext*, const ccl::v1::GetInfoRequest*,
                       ccl::v1::WorkerInfo*) override {
    return grpc::Status::OK;
  }
};
using QueueNoop =
    ccl::v1::Worker::WithAsyncMethod_GetInfo<ccl::v1::Worker::Service>;

// How the no-op server is built: its API, and which of the worker's other
// server features ride along ("callback+worker" is ccworker before cbcde87;
// it is on the queue API now, with health and unknown methods on its queue).
struct ServerKind {
  std::string api = "callback";  // callback, sync, queue
  bool worker_extras = false;    // RequestErrorDetails, health, reflection
};
absl::StatusOr<ServerKind> ParseServerKind(const std::string& text) {
  ServerKind kind;
  std::string api = text;
  if (const size_t plus = text.find('+'); plus != std::string::npos) {
    if (text.substr(plus) != "+worker") {
      return absl::InvalidArgumentError("unknown server kind " + text);
    }
    kind.worker_extras = true;
    api = text.substr(0, plus);
  }
  if (api != "callback" && api != "sync" && api != "queue" && api != "stream") {
    return absl::InvalidArgumentError("unknown server kind " + text);
  }
  // The echo stream is a bare generic service: there is no worker to add.
  if (api == "stream" && kind.worker_extras) {
    return absl::InvalidArgumentError("server kind " + text +
                                      ": \"stream\" takes no \"+worker\"");
  }
  kind.api = api;
  return kind;
}

// The "stream" kind: one long-lived bidirectional stream per client on the
// completion-queue API that echoes each message back, so a round trip pays
// for two messages and none of a unary call's setup (call object, metadata,
// deadline timer). It measures what an op per message on a stream would
// stand on, beside a unary call's floor.
constexpr char kEchoMethod[] = "/ccl.bench.Echo/Stream";

int ServeStreamEcho() {
  grpc::AsyncGenericService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterAsyncGenericService(&service);
  std::unique_ptr<grpc::ServerCompletionQueue> queue =
      builder.AddCompletionQueue();
  auto server = builder.BuildAndStart();
  if (!server || port == 0) return 1;
  ccl::bench::AnnouncePort(port);
  // One stream at a time is all the bench opens per server; tags say which
  // step completed: the stream's arrival, a read, or a write.
  enum Step : intptr_t { kArrived = 1, kRead, kWritten };
  grpc::GenericServerContext context;
  grpc::GenericServerAsyncReaderWriter stream(&context);
  grpc::ByteBuffer message;
  service.RequestCall(&context, &stream, queue.get(), queue.get(),
                      reinterpret_cast<void*>(kArrived));
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) {
    if (!ok) break;  // the client went: this server's job is done
    switch (static_cast<Step>(reinterpret_cast<intptr_t>(tag))) {
      case kArrived:
      case kWritten:
        stream.Read(&message, reinterpret_cast<void*>(kRead));
        break;
      case kRead:
        stream.Write(message, reinterpret_cast<void*>(kWritten));
        break;
    }
  }
  return 0;
}

// --noop-server KIND: serves a no-op worker of that kind on an ephemeral
// loopback port, prints the port, and runs until killed.
int ServeNoop(const ServerKind& kind) {
  if (kind.api == "stream") return ServeStreamEcho();
  CallbackNoop callback;
  SyncNoop sync;
  QueueNoop queue_service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  if (kind.api == "sync") {
    builder.RegisterService(&sync);
  } else if (kind.api == "queue") {
    builder.RegisterService(&queue_service);
  } else {
    builder.RegisterService(&callback);
  }
  ccl::RequestErrorDetails error_details("ccl.v1.Worker");
  if (kind.worker_extras) {
    error_details.Install(builder);
    ccl::EnableHealthAndReflection();
  }
  std::unique_ptr<grpc::ServerCompletionQueue> queue;
  if (kind.api == "queue") queue = builder.AddCompletionQueue();
  auto server = builder.BuildAndStart();
  if (!server || port == 0) return 1;
  ccl::bench::AnnouncePort(port);
  if (!queue) {
    server->Wait();
    return 0;
  }
  // The async API's loop on this thread: each tag is a call, answered at
  // once and freed when its Finish comes back.
  struct Call {
    grpc::ServerContext context;
    ccl::v1::GetInfoRequest request;
    ccl::v1::WorkerInfo response;
    grpc::ServerAsyncResponseWriter<ccl::v1::WorkerInfo> writer{&context};
    bool answered = false;
  };
  auto await_next = [&] {
    auto* call = new Call;
    queue_service.RequestGetInfo(&call->context, &call->request, &call->writer,
                                 queue.get(), queue.get(), call);
  };
  await_next();
  void* tag = nullptr;
  bool ok = false;
  while (queue->Next(&tag, &ok)) {
    auto* call = static_cast<Call*>(tag);
    if (call->answered || !ok) {
      delete call;
      continue;
    }
    await_next();
    call->answered = true;
    call->writer.Finish(call->response, grpc::Status::OK, call);
  }
  return 0;
}

// One GetInfo to each address at once on the callback API, as the client
// library fans out; microseconds per round, `iters` rounds after a warm-up.
std::vector<double> BareFanOut(const std::vector<std::string>& addresses,
                               int iters) {
  std::vector<std::unique_ptr<ccl::v1::Worker::Stub>> stubs;
  for (const std::string& address : addresses) {
    stubs.push_back(ccl::v1::Worker::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  }
  std::vector<double> us;
  for (int i = -iters / 10 - 1; i < iters; ++i) {
    const auto start = Clock::now();
    std::mutex mutex;
    std::condition_variable all_done;
    size_t left = stubs.size();
    std::vector<grpc::ClientContext> contexts(stubs.size());
    std::vector<ccl::v1::GetInfoRequest> requests(stubs.size());
    std::vector<ccl::v1::WorkerInfo> responses(stubs.size());
    bool ok = true;
    for (size_t k = 0; k < stubs.size(); ++k) {
      stubs[k]->async()->GetInfo(&contexts[k], &requests[k], &responses[k],
                                 [&](grpc::Status status) {
                                   std::lock_guard<std::mutex> lock(mutex);
                                   ok = ok && status.ok();
                                   if (--left == 0) all_done.notify_all();
                                 });
    }
    std::unique_lock<std::mutex> lock(mutex);
    all_done.wait(lock, [&] { return left == 0; });
    if (!ok) return {};
    if (i >= 0) us.push_back(Since(start));
  }
  return us;
}

// One message to each "stream" server and its echo back, on one stream per
// server opened once (the completion-queue client API, driven by this
// thread); microseconds per round, `iters` rounds after a warm-up.
std::vector<double> StreamFanOut(const std::vector<std::string>& addresses,
                                 int iters) {
  struct Peer {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<grpc::GenericStub> stub;
    grpc::ClientContext context;
    std::unique_ptr<grpc::GenericClientAsyncReaderWriter> stream;
    grpc::ByteBuffer echo;
  };
  grpc::CompletionQueue queue;
  std::vector<std::unique_ptr<Peer>> peers;
  // Takes every one of `completions` off the queue even after a failed one,
  // so no operation is left pending when the streams are torn down.
  auto await = [&](size_t completions) {
    void* tag = nullptr;
    bool ok = false;
    bool all_ok = true;
    for (size_t i = 0; i < completions; ++i) {
      if (!queue.Next(&tag, &ok)) return false;
      all_ok = all_ok && ok;
    }
    return all_ok;
  };
  for (const std::string& address : addresses) {
    auto peer = std::make_unique<Peer>();
    peer->channel =
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    peer->stub = std::make_unique<grpc::GenericStub>(peer->channel);
    peer->stream = peer->stub->PrepareCall(&peer->context, kEchoMethod, &queue);
    peer->stream->StartCall(peer.get());
    peers.push_back(std::move(peer));
  }
  std::vector<double> us;
  bool healthy = await(peers.size());
  const char payload[8] = {};
  grpc::Slice slice(payload, sizeof(payload));
  const grpc::ByteBuffer message(&slice, 1);
  for (int i = -iters / 10 - 1; healthy && i < iters; ++i) {
    const auto start = Clock::now();
    for (auto& peer : peers) {
      peer->stream->Write(message, peer.get());
      peer->stream->Read(&peer->echo, peer.get());
    }
    healthy = await(2 * peers.size());
    if (healthy && i >= 0) us.push_back(Since(start));
  }
  // A failed round yields no figures, and the streams still close in order.
  if (!healthy) us.clear();
  for (auto& peer : peers) peer->context.TryCancel();
  for (auto& peer : peers) {
    grpc::Status status;
    peer->stream->Finish(&status, peer.get());
  }
  await(peers.size());
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (queue.Next(&tag, &ok)) {
  }
  return us;
}

struct LatencyArgs {
  ccl::client::ClientOptions options;
  int iters = 2000, plan_ops = 1000, plan_rounds = 5, idle_gap_ms = 0;
  int64_t bytes = 8;
};

// False (after saying why) for a flag it does not know or a value out of
// range.
bool ParseArgs(int argc, char** argv, LatencyArgs& a) {
  // As ccctl: the client's own busy polling (ClientOptions::busy_poll).
  if (const char* poll = std::getenv("CCL_CLIENT_BUSY_POLL_US")) {
    a.options.busy_poll = std::chrono::microseconds(std::atoll(poll));
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--coordinator") {
      a.options.coordinator = argv[i + 1];
    } else if (flag == "--iters") {
      a.iters = std::atoi(argv[i + 1]);
    } else if (flag == "--bytes") {
      a.bytes = std::atoll(argv[i + 1]);
    } else if (flag == "--plan") {
      a.plan_ops = std::atoi(argv[i + 1]);
    } else if (flag == "--plan-rounds") {
      a.plan_rounds = std::atoi(argv[i + 1]);
    } else if (flag == "--idle-gap-ms") {
      a.idle_gap_ms = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  if (a.iters < 1 || a.plan_ops < 1 || a.plan_rounds < 1 || a.bytes < 4 ||
      a.idle_gap_ms < 0) {
    std::fprintf(stderr,
                 "need --iters >= 1, --plan >= 1, --plan-rounds >= 1, "
                 "--bytes >= 4, --idle-gap-ms >= 0\n");
    return false;
  }
  return true;
}

// One client's figures: GetInfo, the op with and without the agreement.
struct ClientRows {
  std::vector<double> info_us, op_us, unchecked_us;
  WorkerShare checked, without_agreement;
};

// `count` rounds through `via`; its reserved seqs given back at the end, so
// the other client's ops do not wait for them.
bool RunBlock(ClusterClient& via, const std::vector<int>& ranks,
              const ccl::client::Op& op, ClientRows& rows, int count) {
  for (int i = 0; i < count; ++i) {
    auto start = Clock::now();
    if (!AllOk(via.Info(ranks), "GetInfo")) return false;
    rows.info_us.push_back(Since(start));

    start = Clock::now();
    const auto results = via.Collective(op);
    rows.op_us.push_back(Since(start));
    if (!AllOk(results, "all_reduce")) return false;
    rows.checked.Add(results);

    ccl::client::Op unchecked = op;
    unchecked.skip_agreement = true;
    start = Clock::now();
    const auto unchecked_results = via.Collective(unchecked);
    rows.unchecked_us.push_back(Since(start));
    if (!AllOk(unchecked_results, "all_reduce")) return false;
    rows.without_agreement.Add(unchecked_results);
  }
  via.ReleaseReservedSequences();
  return true;
}

// Client-seen time per op after an idle gap, and after the same gap spent
// spinning.
struct GapRows {
  std::vector<double> info_us, op_us, op_after_spin_us;
};

bool RunAfterGaps(ClusterClient& c, const std::vector<int>& ranks,
                  const ccl::client::Op& op, const LatencyArgs& a,
                  GapRows& rows) {
  const auto gap = std::chrono::milliseconds(a.idle_gap_ms);
  for (int i = 0; i < a.iters; ++i) {
    std::this_thread::sleep_for(gap);
    auto start = Clock::now();
    if (!AllOk(c.Info(ranks), "GetInfo")) return false;
    rows.info_us.push_back(Since(start));
    std::this_thread::sleep_for(gap);
    start = Clock::now();
    if (!AllOk(c.Collective(op), "all_reduce")) return false;
    rows.op_us.push_back(Since(start));
    const auto until = Clock::now() + gap;
    while (Clock::now() < until) {
    }
    start = Clock::now();
    if (!AllOk(c.Collective(op), "all_reduce")) return false;
    rows.op_after_spin_us.push_back(Since(start));
  }
  return true;
}

// The floors without the library: bare calls to the workers themselves
// (plaintext, no token), beside no-op servers of each server API, and what
// the worker's other server features (the unknown-method service and
// parse-error interceptor, health, reflection) add to it. ccworker was
// "callback+worker"; it now serves on the queue API, so its row should sit
// at "queue".
struct Floors {
  std::vector<double> workers_us;
  std::vector<std::string> kinds = {"callback", "callback+worker", "sync",
                                    "queue", "queue+worker"};
  std::vector<std::vector<double>> kind_us;
  std::vector<double> stream_us;
};

Floors MeasureFloors(const ClusterClient& c, int ranks, int iters) {
  Floors floors;
  std::vector<std::string> worker_addresses;
  for (const auto& member : c.world().members) {
    worker_addresses.push_back(member.address);
  }
  floors.workers_us = BareFanOut(worker_addresses, iters);
  floors.kind_us.resize(floors.kinds.size());
  for (size_t k = 0; k < floors.kinds.size(); ++k) {
    ccl::bench::ChildServers servers(ranks, {"--noop-server", floors.kinds[k]});
    if (!servers.addresses().empty()) {
      floors.kind_us[k] = BareFanOut(servers.addresses(), iters);
    }
  }
  ccl::bench::ChildServers servers(ranks, {"--noop-server", "stream"});
  if (!servers.addresses().empty()) {
    floors.stream_us = StreamFanOut(servers.addresses(), iters);
  }
  return floors;
}

void RowOrFailed(const std::string& what, const std::vector<double>& us) {
  if (us.empty()) {
    std::printf("%-44s %10s %10s\n", what.c_str(), "failed", "-");
  } else {
    Row(what.c_str(), us);
  }
}

void PrintReport(const LatencyArgs& a, size_t ranks, const ClientRows& streamed,
                 const ClientRows& unary, const Floors& floors,
                 const std::vector<double>& plan_us, bool emulated,
                 const GapRows& gaps) {
  std::printf(
      "# client_latency: %zu ranks, %lld B float32 all_reduce (sum), "
      "%d iters\n",
      ranks, static_cast<long long>(a.bytes), a.iters);
  std::printf("%-44s %10s %10s\n", "# what", "p50 (us)", "p99 (us)");
  Row("GetInfo on every rank (RPC + fan-out)", streamed.info_us);
  RowOrFailed(floors.workers_us.empty()
                  ? "  bare gRPC to the workers"
                  : "  bare gRPC to the workers (no library)",
              floors.workers_us);
  for (size_t k = 0; k < floors.kinds.size(); ++k) {
    RowOrFailed(
        (k == 0 ? "  bare gRPC peer: no-op servers, " : "    the same, ") +
            floors.kinds[k],
        floors.kind_us[k]);
  }
  RowOrFailed("    one message each way on a stream", floors.stream_us);
  Row("all_reduce, client-seen", streamed.op_us);
  streamed.checked.Print("the agreement, hand-offs");
  Row("all_reduce without the agreement check", streamed.unchecked_us);
  streamed.without_agreement.Print("hand-offs");
  Row("all_reduce, a unary Submit per op (as before)", unary.op_us);
  unary.checked.Print("the agreement, hand-offs");
  Row("  the same without the agreement check", unary.unchecked_us);
  unary.without_agreement.Print("hand-offs");
  Row(emulated ? "plan, per op (EMULATED: no SubmitPlan)"
               : "plan of --plan ops, per op",
      plan_us);
  if (a.idle_gap_ms > 0) {
    const std::string after =
        " after " + std::to_string(a.idle_gap_ms) + " ms idle";
    Row(("GetInfo" + after).c_str(), gaps.info_us);
    Row(("all_reduce" + after).c_str(), gaps.op_us);
    Row("  the same, the client spinning meanwhile", gaps.op_after_spin_us);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--noop-server") == 0) {
    auto kind = ParseServerKind(argv[2]);
    if (!kind.ok()) {
      std::fprintf(stderr, "%s\n",
                   std::string(kind.status().message()).c_str());
      return 2;
    }
    return ServeNoop(*kind);
  }
  LatencyArgs args;
  if (!ParseArgs(argc, argv, args)) return 2;
  auto client = ClusterClient::Connect(args.options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n",
                 ccl::client::StatusText(client.status()).c_str());
    return 1;
  }
  ClusterClient& c = **client;
  // The same ops the way the client sent them before op streams: one unary
  // Submit per op and rank.
  ccl::client::ClientOptions unary_options = args.options;
  unary_options.op_streams = false;
  auto unary_client = ClusterClient::Connect(unary_options);
  if (!unary_client.ok()) {
    std::fprintf(stderr, "%s\n",
                 ccl::client::StatusText(unary_client.status()).c_str());
    return 1;
  }
  const std::vector<int> ranks = c.AllRanks();
  const std::string name = "client_latency.x";
  (void)c.Free(ranks, name);
  if (!AllOk(c.Alloc(ranks, {name, ccl::DType::kFloat32, {args.bytes / 4}}),
             "alloc")) {
    return 1;
  }
  ccl::client::Op op;
  op.kind = ccl::OpKind::kAllReduce;
  op.input = name;

  // The same loop through both clients, in alternating blocks so that both
  // see the machine alike.
  for (ClusterClient* via : {&c, unary_client->get()}) {
    for (int i = 0; i < args.iters / 10 + 1; ++i) {  // warm up channels
      if (!AllOk(via->Collective(op), "warmup")) return 1;
    }
    via->ReleaseReservedSequences();
  }
  ClientRows streamed, unary;
  constexpr int kBlock = 100;
  for (int done = 0; done < args.iters; done += kBlock) {
    const int count = std::min(kBlock, args.iters - done);
    if (!RunBlock(c, ranks, op, streamed, count) ||
        !RunBlock(**unary_client, ranks, op, unary, count)) {
      return 1;
    }
  }
  ccl::client::Plan plan;
  plan.steps.assign(args.plan_ops, ccl::client::PlanStep::Collective(op));
  std::vector<double> plan_us;
  bool emulated = false;
  for (int round = 0; round < args.plan_rounds; ++round) {
    const auto start = Clock::now();
    const auto results = c.SubmitPlan(plan);
    plan_us.push_back(Since(start) / args.plan_ops);
    if (!AllOk(results, "plan")) return 1;
    for (const auto& r : results) emulated |= r.result->emulated;
  }
  GapRows gaps;
  if (args.idle_gap_ms > 0 && !RunAfterGaps(c, ranks, op, args, gaps)) {
    return 1;
  }
  (void)c.Free(ranks, name);
  const Floors floors =
      MeasureFloors(c, static_cast<int>(ranks.size()), args.iters);
  PrintReport(args, ranks.size(), streamed, unary, floors, plan_us, emulated,
              gaps);
  return 0;
}
