// The client library: finds the workers through the coordinator, sends a
// request to the ranks of a group at once and gathers one StatusOr per rank,
// and sequences ops so that any number of clients can drive one cluster
// without the ranks disagreeing on the order.
//
// The API speaks the plain types of client/types.h; gRPC stays behind it.
// Requests to several ranks go out together (no thread per rank or per call)
// over channels kept for the client's life, and the calling thread waits for
// the replies: ops on one long-lived stream per worker, driven by the waiting
// threads themselves (internal/op_streams.h), other requests on the gRPC
// callback API. Ops take sequence numbers from
// ranges reserved ahead of use, so a steady stream of ops pays no
// coordinator round trip per op; unused numbers go back to the workers soon
// after the client stops using them (or when it is destroyed), so other
// clients' ops never wait on them. A ClusterClient is safe to use from
// several threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/types.h"
#include "common/security_options.h"

namespace ccl::testing {
class ClientWire;
}

namespace ccl::client {
namespace internal {
struct ClientImpl;
}

struct ClientOptions {
  std::string coordinator = "127.0.0.1:29400";
  // Every request's deadline, and an op's own timeout unless the op sets one.
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // The group ops run on (see UseGroup).
  std::string group = "world";
  // TLS and the token, for the coordinator and every worker.
  SecurityOptions security;
  // The most sequence numbers reserved ahead of use. Ranges start at one
  // and double while ops keep coming, so one op reserves exactly one.
  int64_t max_reserved_seqs = 256;
  // Reserved numbers not used for this long go back to the workers.
  std::chrono::milliseconds reserve_linger{20};
  // Ops travel on one long-lived stream per worker (SubmitStream) rather than
  // a unary call each: the same answers, a round trip cheaper per op. Off:
  // one unary Submit per op and rank, as before the streams.
  bool op_streams = true;
  // A thread waiting for ops' answers polls the streams without sleeping for
  // up to this long first (common/busy_poll.h: on a VM a sleeping thread's
  // wake-up is a hypervisor round trip), at the price of a core meanwhile.
  // 0: it sleeps at once. ccctl reads CCL_CLIENT_BUSY_POLL_US.
  std::chrono::microseconds busy_poll{0};
  // Told one line when an op waited for the world to re-form (a rank's
  // communicator broke before it): the cause and how long it waited. The
  // op then ran in the new generation. ccctl prints it on stderr.
  std::function<void(const std::string& line)> on_reform;
};

class ClusterClient {
 public:
  static absl::StatusOr<std::unique_ptr<ClusterClient>> Connect(
      const ClientOptions& options);
  // Gives back reserved sequence numbers and waits for the calls that do.
  ~ClusterClient();
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;

  const ClientOptions& options() const;
  // The world as it was at Connect (or at the last RefreshWorld).
  const World& world() const;
  // Asks the coordinator for the world now and follows it (a new
  // generation, a replaced worker's address), keeping the channels to the
  // workers that stayed: a reader that polls (ccctl console) pays no
  // reconnect, and a worker that is gone fails its request at once instead
  // of costing a fresh channel's connect wait. Not while ops of this client
  // are in flight (it forgets their reserved sequence numbers).
  absl::StatusOr<World> RefreshWorld();
  int world_size() const;
  std::vector<int> AllRanks() const;
  // INVALID_ARGUMENT unless every rank is in [0, world size).
  absl::Status CheckRanks(const std::vector<int>& ranks) const;

  // --- Groups ---------------------------------------------------------------
  const std::string& group() const;
  // World ranks of the client's group, in group-rank order.
  const std::vector<int>& GroupRanks() const;
  int group_size() const;
  // The group rank of a world rank; INVALID_ARGUMENT if not a member.
  absl::StatusOr<int> GroupRank(int world_rank) const;
  // Switches the client to `group`, learning its members from the workers;
  // NOT_FOUND if no worker knows it. Connect does this for options.group.
  absl::Status UseGroup(const std::string& group);
  // Every group the workers know (the union of their answers), world first.
  absl::StatusOr<std::vector<GroupInfo>> Groups();
  // Makes the subgroup `name` of the world ranks `ranks` (torch's
  // new_group): at a fresh world seq, on every rank of the world (members
  // or not). Results per world rank.
  RankResults<GroupInfo> CreateGroup(const std::string& name,
                                     const std::vector<int>& ranks);
  // Drops subgroup `name` on every rank of the world (torch's
  // destroy_process_group), once no op of it is outstanding; each result
  // is the name, or why that rank did not drop it (NOT_FOUND: it had no
  // such group).
  RankResults<std::string> DestroyGroup(const std::string& name);

  // --- Workers and tensors: one rank, or many at once ----------------------
  absl::StatusOr<WorkerInfo> Info(int rank);
  RankResults<WorkerInfo> Info(const std::vector<int>& ranks);
  absl::StatusOr<TensorInfo> Alloc(int rank, const TensorSpec& spec,
                                   const Fill& fill = {});
  RankResults<TensorInfo> Alloc(const std::vector<int>& ranks,
                                const TensorSpec& spec, const Fill& fill = {});
  RankResults<TensorInfo> Alloc(const std::vector<TensorAlloc>& allocs);
  // The freed bytes.
  absl::StatusOr<int64_t> Free(int rank, const std::string& name);
  RankResults<int64_t> Free(const std::vector<int>& ranks,
                            const std::string& name);
  absl::StatusOr<TensorList> List(int rank);
  RankResults<TensorList> List(const std::vector<int>& ranks);
  // Statistics and the first `head` elements.
  absl::StatusOr<TensorSummary> Summarize(int rank, const std::string& name,
                                          int64_t head);
  RankResults<TensorSummary> Summarize(const std::vector<int>& ranks,
                                       const std::string& name, int64_t head);
  // Streams `bytes` into the tensor from `offset_bytes` on.
  absl::StatusOr<TensorInfo> Write(int rank, const std::string& name,
                                   int64_t offset_bytes,
                                   const std::string& bytes);
  RankResults<TensorInfo> Write(const std::vector<TensorWrite>& writes);
  // The raw bytes of elements [offset, offset + count) (count 0: to the end).
  absl::StatusOr<std::string> Read(int rank, const std::string& name,
                                   int64_t offset, int64_t count);

  // --- Ops on the client's group --------------------------------------------
  // One collective on every rank of the group at a fresh seq.
  RankResults<OpResult> Collective(const Op& op);
  // Point to point at one seq: `ops` maps a world rank to its send or recv;
  // every other rank of the group takes the seq with a no-op, so that all of
  // them see every seq. Results for every rank of the group.
  RankResults<OpResult> PointToPoint(const std::map<int, Op>& ops);
  // Consecutive ops in one request per rank, at consecutive seqs; each rank
  // runs them back to back. Sync only: an op's `async` is ignored.
  RankResults<PlanResult> SubmitPlan(const Plan& plan);
  // `warmup + iters` instances of an op at one seq, timed on the workers.
  // `for_rank` gives each world rank's spec (the same for a collective;
  // send, recv or nop for point to point).
  RankResults<BenchResult> Bench(
      const std::function<BenchSpec(int rank)>& for_rank);

  // Completes async ops: a failed op, or one still running at `timeout`, is
  // an error status, as the worker answers it.
  absl::StatusOr<WorkStatus> Wait(int rank, int64_t work_id,
                                  std::chrono::milliseconds timeout);
  RankResults<WorkStatus> Wait(const std::vector<WorkRef>& works,
                               std::chrono::milliseconds timeout);
  // Polls async ops without blocking; a failed op is a WorkStatus whose
  // state is kFailed and whose `error` says why.
  absl::StatusOr<WorkStatus> Test(int rank, int64_t work_id);
  RankResults<WorkStatus> Test(const std::vector<WorkRef>& works);

  // The flight recorder of `group` (empty: the client's) on each rank:
  // its last `limit` ops (0: all that are kept).
  RankResults<OpLog> OpLogs(const std::vector<int>& ranks,
                            const std::string& group, int limit);

  // Gives back now the sequence numbers reserved ahead and not used yet.
  void ReleaseReservedSequences();

 private:
  friend class ::ccl::testing::ClientWire;
  explicit ClusterClient(std::unique_ptr<internal::ClientImpl> impl);
  std::unique_ptr<internal::ClientImpl> impl_;
};

// "OK" for success, else "CODE: message".
std::string StatusText(const absl::Status& status);

}  // namespace ccl::client
