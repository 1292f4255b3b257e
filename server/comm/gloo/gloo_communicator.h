// The Gloo backend: a full mesh of TCP pairs built through a rendezvous
// store. Ops run synchronously inside Launch (Gloo's algorithms block) and
// return a completed handle. Gloo reports errors by throwing; every throw is
// caught here and becomes a Status (timeouts DEADLINE_EXCEEDED, transport
// errors UNAVAILABLE). After either, Gloo has signalled the failure to every
// pair of the context, so the communicator is poisoned and Health says why.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/comm/communicator.h"
#include "server/comm/kv_store.h"

namespace gloo {
class Context;
namespace transport {
class UnboundBuffer;
}
}  // namespace gloo

namespace ccl {

class GlooCommunicator final : public Communicator {
 public:
  // Connects `rank` of `size` through `store`, keys under `prefix` (e.g.
  // "gen3/world"). Blocks until every rank has joined or `timeout` passes;
  // `timeout` is also the default op timeout of the context.
  static absl::StatusOr<std::unique_ptr<GlooCommunicator>> Create(
      int rank, int size, const std::string& data_host,
      const std::string& prefix, KvStore& store,
      std::chrono::milliseconds timeout);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "gloo"; }
  absl::Status Supports(OpKind kind, DType dtype,
                        ReduceOp reduce_op) const override;
  absl::Status Health() const override;
  void Abort(const absl::Status& why) override;
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(const BoundOp& op) override;
  absl::Status AllGatherHost(
      const void* mine, void* all, size_t bytes,
      std::chrono::steady_clock::time_point deadline) override;
  absl::Status ExchangeHost(
      int peer, const void* mine, void* theirs, size_t bytes,
      std::chrono::steady_clock::time_point deadline) override;
  // Members connect a new full mesh among themselves through the store
  // (keys under this communicator's prefix); the others take no part.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(
      const std::vector<int>& members, const std::string& name,
      std::chrono::milliseconds timeout) override;

 private:
  GlooCommunicator(int rank, int size, std::string data_host,
                   std::string prefix, KvStore* store,
                   std::shared_ptr<gloo::Context> context);

  // Runs `op`; may throw Gloo's exceptions or std::bad_alloc.
  absl::Status Run(const BoundOp& op);
  // Checks that every rank runs the same collective (one small allgather).
  absl::Status AgreeCollective(const BoundOp& op);
  // The Status of an op Gloo failed with an enforce or another exception:
  // the abort's own when another thread aborted the communicator under
  // the op, else INTERNAL.
  absl::Status AbortedUnder(const std::string& where, const char* what) const;
  // Gloo exceptions of an exchange as a Status; poisons on a timeout or a
  // transport error.
  absl::Status GuardExchange(const std::function<void()>& exchange);
  // Point to point: the sender's and receiver's views of the op cross
  // before any data moves, so sizes that differ fail on both sides.
  absl::Status SendRecv(const BoundOp& op);
  // One collective each, on this rank's part of `op` (count > 0); each may
  // throw as Run does.
  void AllReduce(const BoundOp& op, std::chrono::milliseconds timeout);
  void Broadcast(const BoundOp& op, std::chrono::milliseconds timeout);
  void Reduce(const BoundOp& op, std::chrono::milliseconds timeout);
  void AllGather(const BoundOp& op, std::chrono::milliseconds timeout);
  void Gather(const BoundOp& op, std::chrono::milliseconds timeout);
  void Scatter(const BoundOp& op, std::chrono::milliseconds timeout);
  void AllToAll(const BoundOp& op, std::chrono::milliseconds timeout);
  // reduce_scatter as a ring (Gloo 0.5 has none of its own).
  void RingReduceScatter(const BoundOp& op, std::chrono::milliseconds timeout);
  // `bytes` at `data` as Gloo's transport sees them.
  std::unique_ptr<gloo::transport::UnboundBuffer> Unbound(const void* data,
                                                          size_t bytes);
  // Scratch memory for ops that need a staging buffer (reduce off root,
  // reduce_scatter, in-place all_to_all, premul_sum). Kept between ops so
  // benchmarks do not pay for the allocation; not counted in the tensor
  // quota.
  std::byte* Scratch(size_t bytes);

  const int rank_;
  const int size_;
  // What Split rendezvous with; the store outlives the generation.
  const std::string data_host_;
  const std::string prefix_;
  KvStore* const store_;
  std::shared_ptr<gloo::Context> context_;
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, FreeDeleter> scratch_;
  size_t scratch_bytes_ = 0;

  // Exchanges happen in the same order on every rank taking part, so a
  // running count names each one's tag or slots on both sides: one count
  // for the collective exchanges, one per peer for the pairwise ones.
  uint32_t collective_exchanges_ = 0;
  std::map<int, uint64_t> pair_exchanges_;

  // Receive buffers of point-to-point exchanges that timed out: Gloo keeps
  // the posted recv, so their memory must live as long as the context.
  std::vector<std::shared_ptr<void>> abandoned_;

  mutable std::mutex mutex_;
  absl::Status broken_;
  bool closed_ = false;
};

}  // namespace ccl
