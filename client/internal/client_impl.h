// Behind ClusterClient: the channels and stubs (one per rank, kept for the
// client's life), the fan-out of requests on the callback API, the one place
// an op is stamped with its group, seq and generation, and the sequence
// windows with the calls that give unused seqs back.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "ccl/v1/worker.grpc.pb.h"
#include "client/cluster_client.h"
#include "client/internal/fan_out.h"
#include "client/internal/op_streams.h"
#include "client/internal/sequence_lease.h"
#include "client/internal/sequence_windows.h"
#include "common/credentials.h"
#include "common/timer_queue.h"
#include "coordinator/client/coordinator_client.h"

namespace ccl::client {

template <typename T>
RankResults<T> FailEach(const std::vector<int>& ranks,
                        const absl::Status& status) {
  RankResults<T> out;
  out.reserve(ranks.size());
  for (int rank : ranks) out.push_back({rank, status});
  return out;
}

template <typename T>
RankResults<T> Zip(const std::vector<int>& ranks,
                   std::vector<absl::StatusOr<T>> results) {
  RankResults<T> out;
  out.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    out.push_back({ranks[i], std::move(results[i])});
  }
  return out;
}

// An async unary method of the worker's stub, as the callback API has it.
template <typename Request, typename Response>
using WorkerMethod = void (v1::Worker::StubInterface::async_interface::*)(
    grpc::ClientContext*, const Request*, Response*,
    std::function<void(grpc::Status)>);

namespace internal {

struct ClientImpl {
  // Between an op's own deadline and its RPC's, so that the worker's clear
  // error arrives before the RPC gives up.
  static constexpr std::chrono::milliseconds kRpcMargin{5000};

  ClientImpl(ClientOptions options,
             std::unique_ptr<CoordinatorClient> coordinator,
             ChannelFactory channels, World world);
  // Gives back reserved seqs and waits for the calls that do.
  ~ClientImpl();

  // --- Ranks and groups -----------------------------------------------------
  std::vector<int> AllRanks() const;
  absl::StatusOr<int> GroupRank(int world_rank) const;
  const Device& DeviceOf(int rank) const;
  // Adopts `group` (its world ranks in group-rank order) for later ops.
  void SetGroup(const std::string& group, std::vector<int> ranks);

  // --- Calls ----------------------------------------------------------------
  // The stub of `rank`, its channel made (and connected) on first use.
  absl::StatusOr<v1::Worker::Stub*> Stub(int rank);
  // Makes the channels of `ranks` that do not exist yet, connecting them in
  // parallel.
  void Connect(const std::vector<int>& ranks);
  // The client's timeout (plus `extra`) from now.
  std::chrono::system_clock::time_point Deadline(
      std::chrono::milliseconds extra = std::chrono::milliseconds(0)) const;
  // The RPC deadline of ops whose own timeouts add up to `op_time`: their
  // worker's error must arrive before the RPC gives up. The client's own
  // timeout is added on top of the margin (as before the native API): a
  // worker on a loaded machine reports a peer that never arrived well after
  // the op's timeout, and that report, not gRPC's bare DEADLINE_EXCEEDED, is
  // what the user needs.
  static std::chrono::system_clock::time_point OpDeadline(
      std::chrono::milliseconds op_time,
      std::chrono::milliseconds client_timeout);

  // One call per rank, all in flight at once; `requests[i]` goes to
  // `ranks[i]`, or fails locally when it is an error. Results in order.
  template <typename Request, typename Response>
  std::vector<absl::StatusOr<Response>> CallEach(
      const std::vector<int>& ranks,
      std::vector<absl::StatusOr<Request>> requests,
      WorkerMethod<Request, Response> method,
      const std::function<
          std::chrono::system_clock::time_point(const Request&)>& deadline) {
    Connect(ranks);
    UnaryBatch<Request, Response> batch(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
      auto stub = Stub(ranks[i]);
      if (!requests[i].ok() || !stub.ok()) {
        batch.Fail(i, requests[i].ok() ? stub.status() : requests[i].status());
        continue;
      }
      auto& call = batch.call(i);
      call.request = *std::move(requests[i]);
      call.context.set_deadline(deadline(call.request));
      ((*stub)->async()->*method)(&call.context, &call.request, &call.response,
                                  batch.Done(i));
    }
    return batch.Wait();
  }
  // The same request to every rank, with the client's deadline.
  template <typename Request, typename Response>
  std::vector<absl::StatusOr<Response>> CallEach(
      const std::vector<int>& ranks, const Request& request,
      WorkerMethod<Request, Response> method) {
    const auto deadline = Deadline();
    return CallEach<Request, Response>(
        ranks, std::vector<absl::StatusOr<Request>>(ranks.size(), request),
        method, [deadline](const Request&) { return deadline; });
  }

  // --- Ops ------------------------------------------------------------------
  // The ops each rank of the group runs for `step`, in group-rank order:
  // roots and peers translated to group ranks, the client's timeout filled
  // in, a no-op for ranks outside a point-to-point step. INVALID_ARGUMENT,
  // before any seq is taken, for a root or peer outside the group.
  absl::StatusOr<std::vector<v1::OpRequest>> OpsForRanks(const PlanStep& step);
  // One op's wire form, root and peer translated (the steps above).
  absl::StatusOr<v1::OpRequest> ToWireOp(const Op& op) const;
  // Places an op of the client's group at `seq` of this generation.
  void Stamp(v1::OpRequest& op, int64_t seq) const;
  // `count` consecutive seqs of `of_group` (empty: the client's group).
  absl::StatusOr<int64_t> TakeSeqs(int64_t count,
                                   const std::string& of_group = "");
  // Gives back every reserved seq not taken yet.
  void ReleaseAllSeqs();
  // After a failed op of `of_group`: gives back what the group holds, so
  // that the next op asks the coordinator (and learns of a re-form)
  // instead of using seqs of a generation that may be ending.
  void DropSeqs(const std::string& of_group);
  // The coordinator refused to reserve (`refusal`): if that is because
  // the world is re-forming, waits for the next generation (within the
  // client's timeout), moves the client to it and tells options.on_reform;
  // OK then. Otherwise, or if none begins in time, an error that says so.
  // Asks the coordinator for the world now and adopts it
  // (ClusterClient::RefreshWorld).
  absl::Status RefreshWorld();
  absl::Status AwaitNextGeneration(const absl::Status& refusal);
  // Submits `ops[i]` (stamped) to the group's i-th rank.
  RankResults<OpResult> SubmitEach(std::vector<v1::OpRequest> ops);
  // SubmitEach's answers, by stream or by unary call (ClientOptions).
  std::vector<absl::StatusOr<v1::OpResponse>> SubmitOps(
      std::vector<v1::OpRequest> ops);
  RankResults<PlanResult> SubmitPlan(const Plan& plan);

  // Tells every rank of `group` that [begin, end) will carry no op. Workers
  // without ReleaseSequence get a no-op at each seq instead, and from then
  // on the client reserves only what it uses.
  void ReleaseSeqs(const std::string& group, int64_t begin, int64_t end);

  ClientOptions options;
  std::unique_ptr<CoordinatorClient> coordinator;
  ChannelFactory channels;
  World world;
  // The client's group and its world ranks in group-rank order; set by
  // Connect and UseGroup, which are not called concurrently with ops.
  std::string group = "world";
  std::vector<int> group_ranks;

 private:
  // Runs at the client's side: reserved seqs nobody took go back after the
  // linger. Made on first need, so a one-shot command starts no thread.
  void Schedule(std::chrono::steady_clock::time_point when,
                std::function<void()> callback);
  void SubmitNops(const std::string& group, int rank, int64_t begin,
                  int64_t end);

  // The world of a later generation (AwaitNextGeneration).
  void Adopt(World next);

  mutable std::mutex mutex_;
  std::map<int, std::unique_ptr<v1::Worker::Stub>> stubs_;
  // Stubs of workers a re-form replaced: kept, as op streams opened on
  // them may still be closing.
  std::vector<std::unique_ptr<v1::Worker::Stub>> retired_stubs_;
  // Every group the client used, by name: where to give its seqs back.
  std::map<std::string, std::vector<int>> group_members_;
  BackgroundCalls background_;
  std::mutex timers_mutex_;
  std::unique_ptr<TimerQueue> timers_;
  bool timers_stopped_ = false;
  // Before the stubs go: its streams ride their channels.
  std::unique_ptr<OpStreams> op_streams_;
  // The lease the reservations are held under; ended (the stream closed)
  // after ~Impl gave back what it held.
  std::unique_ptr<SequenceLease> lease_;
  // Last member: destroyed first, after ~Impl gave back what it held.
  std::unique_ptr<SequenceWindows> windows_;
};

}  // namespace internal

// Tensor bytes, one stream per rank, all at once (tensor_streams.cc). A
// write refers to the caller's bytes, which outlive the call: a tensor is
// not copied on its way to the wire but chunk by chunk.
struct TensorWriteRef {
  int rank = 0;
  const std::string* name = nullptr;
  int64_t offset_bytes = 0;
  std::string_view bytes;
};
RankResults<TensorInfo> WriteTensors(internal::ClientImpl& impl,
                                     const std::vector<TensorWriteRef>& writes);
RankResults<std::string> ReadTensors(internal::ClientImpl& impl,
                                     const std::vector<int>& ranks,
                                     const std::string& name, int64_t offset,
                                     int64_t count);

}  // namespace ccl::client
