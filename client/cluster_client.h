// The client library ccctl is a thin layer over: finds the workers through
// the coordinator, fans requests out to the ranks of a group and gathers the
// replies (one StatusOr per rank), and sequences ops so that any number of
// clients can drive one cluster without the ranks disagreeing on the order.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "ccl/v1/worker.grpc.pb.h"
#include "coordinator/client/coordinator_client.h"

namespace ccl {

struct ClientOptions {
  std::string coordinator = "127.0.0.1:29400";
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // The group ops run on. Ranks the client library takes and reports
  // (root, peer, the keys of PointToPoint, RankResult::rank) are world
  // ranks whatever the group, as torch.distributed's global ranks; the
  // client translates them to group ranks on the wire.
  std::string group = "world";
  // TLS and the token, for the coordinator and every worker.
  SecurityOptions security;
};

template <typename T>
struct RankResult {
  int rank = 0;
  absl::StatusOr<T> result;
};

class ClusterClient {
 public:
  static absl::StatusOr<std::unique_ptr<ClusterClient>> Connect(
      const ClientOptions& options);

  const ClientOptions& options() const { return options_; }
  CoordinatorClient& coordinator() { return *coordinator_; }
  const v1::World& world() const { return world_; }
  int world_size() const { return world_.world_size(); }
  std::vector<int> AllRanks() const;
  // World ranks of the client's group, in group-rank order (AllRanks for
  // the world).
  const std::vector<int>& GroupRanks() const { return group_ranks_; }
  int group_size() const { return static_cast<int>(group_ranks_.size()); }
  // The group rank of a world rank; INVALID_ARGUMENT if not a member.
  absl::StatusOr<int> GroupRank(int world_rank) const;
  // Switches the client to `group`, learning its members from the workers'
  // GetInfo; NOT_FOUND if no worker knows it. Connect does this for
  // options.group.
  absl::Status UseGroup(const std::string& group);
  // Every group the workers know (the union of their GetInfo), world first.
  absl::StatusOr<std::vector<v1::GroupInfo>> Groups();
  // Makes the subgroup `name` of the world ranks `ranks` (torch's
  // new_group): at a fresh world seq, on every rank of the world (members
  // or not). Results are per world rank.
  std::vector<RankResult<v1::GroupInfo>> CreateGroup(
      const std::string& name, const std::vector<int>& ranks);
  // INVALID_ARGUMENT unless every rank is in [0, world size).
  absl::Status CheckRanks(const std::vector<int>& ranks) const;

  v1::Worker::Stub& Worker(int rank);
  std::unique_ptr<grpc::ClientContext> Context(
      std::chrono::milliseconds extra = std::chrono::milliseconds(0)) const;

  // Runs `call` for every rank in parallel; results in the order of `ranks`.
  template <typename T>
  std::vector<RankResult<T>> FanOut(
      const std::vector<int>& ranks,
      const std::function<absl::StatusOr<T>(int rank)>& call) {
    std::vector<RankResult<T>> results(ranks.size());
    std::vector<std::thread> threads;
    threads.reserve(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
      results[i].rank = ranks[i];
      threads.emplace_back([&, i] { results[i].result = call(ranks[i]); });
    }
    for (auto& thread : threads) thread.join();
    return results;
  }

  absl::StatusOr<v1::WorkerInfo> Info(int rank);
  absl::StatusOr<v1::TensorInfo> Alloc(int rank,
                                       const v1::AllocTensorRequest& request);
  absl::StatusOr<int64_t> Free(int rank, const std::string& name);
  absl::StatusOr<v1::ListTensorsResponse> List(int rank);
  absl::StatusOr<v1::TensorSummary> Summarize(int rank, const std::string& name,
                                              int64_t head);
  // Streams `bytes` into the tensor starting at `offset_bytes`.
  absl::StatusOr<v1::TensorInfo> Write(int rank, const std::string& name,
                                       int64_t offset_bytes,
                                       const std::string& bytes);
  // Reads the element range [offset, offset + count) (count 0: to the end).
  absl::StatusOr<std::string> Read(int rank, const std::string& name,
                                   int64_t offset, int64_t count);

  // Reserves the next sequence number of the client's group.
  absl::StatusOr<int64_t> ReserveSeq(int64_t count = 1);

  // Runs one collective on every rank of the client's group at a fresh seq
  // of the group; op.root is a world rank. The op's timeout defaults to the
  // client's.
  std::vector<RankResult<v1::OpResponse>> Collective(v1::OpRequest op);
  // Point to point at one seq: `ops` maps a world rank to its op (send or
  // recv, peer a world rank); every other rank of the group gets a NOP so
  // that all of them see every seq.
  std::vector<RankResult<v1::OpResponse>> PointToPoint(
      const std::map<int, v1::OpRequest>& ops);
  absl::StatusOr<v1::WorkStatus> Wait(int rank, int64_t work_id,
                                      std::chrono::milliseconds timeout);
  absl::StatusOr<v1::WorkStatus> Test(int rank, int64_t work_id);
  // The flight recorder of `group` on one rank.
  absl::StatusOr<v1::OpLog> OpLog(int rank, const std::string& group,
                                  int limit);
  // One bench at one seq on every rank of the group; `for_rank` gives each
  // (world) rank's request (the same for collectives; send, recv or nop for
  // point to point), root and peer as world ranks.
  std::vector<RankResult<v1::BenchResponse>> Bench(
      const std::function<v1::BenchRequest(int rank)>& for_rank);

 private:
  ClusterClient(ClientOptions options,
                std::unique_ptr<CoordinatorClient> coordinator,
                ChannelFactory channels, v1::World world);
  std::vector<RankResult<v1::OpResponse>> SubmitAll(
      const std::vector<std::pair<int, v1::OpRequest>>& per_rank);
  // Root and peer of `op` from world ranks to ranks of the client's group.
  absl::Status ToGroupRanks(v1::OpRequest& op) const;

  ClientOptions options_;
  std::unique_ptr<CoordinatorClient> coordinator_;
  ChannelFactory channels_;
  v1::World world_;
  std::vector<int> group_ranks_;
  std::mutex stubs_mutex_;
  std::map<int, std::unique_ptr<v1::Worker::Stub>> stubs_;
};

// "OK" for success, else "CODE: message".
std::string StatusText(const absl::Status& status);

}  // namespace ccl
