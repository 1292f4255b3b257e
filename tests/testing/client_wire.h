// For tests that must say things the client library never says: a
// hand-made request at a seq the test chose, two ranks given different ops
// at one seq, a request to a rank that is not in the group. It reaches the
// stubs of a ClusterClient (the same channels) and is no part of the
// library's API.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "ccl/v1/worker.grpc.pb.h"
#include "client/cluster_client.h"

namespace ccl::testing {

class ClientWire {
 public:
  explicit ClientWire(client::ClusterClient& client) : client_(client) {}

  // The stub of a world rank (INVALID_ARGUMENT for one outside the world).
  absl::StatusOr<v1::Worker::Stub*> Worker(int rank);
  // A context with the client's timeout plus `extra`.
  std::unique_ptr<grpc::ClientContext> Context(
      std::chrono::milliseconds extra = std::chrono::milliseconds(0)) const;
  // `count` fresh seqs of the client's group, straight from the coordinator,
  // after the client gave back what it had reserved ahead (or the test's
  // ops would wait behind those).
  absl::StatusOr<int64_t> ReserveSeq(int64_t count);
  int64_t generation() const;
  // `op_for_rank(rank)` submitted to each of `ranks` at once, as is.
  client::RankResults<v1::OpResponse> Submit(
      const std::vector<int>& ranks,
      const std::function<v1::OpRequest(int rank)>& op_for_rank,
      std::chrono::milliseconds rpc_timeout);
  // `bench_for_rank(rank)` sent to each of `ranks` at once, as is.
  client::RankResults<v1::BenchResponse> Bench(
      const std::vector<int>& ranks,
      const std::function<v1::BenchRequest(int rank)>& bench_for_rank,
      std::chrono::milliseconds rpc_timeout);
  // Tells each of `ranks` that the client's group's seqs [begin, end) of
  // this generation carry no op.
  client::RankResults<v1::ReleaseSequenceResponse> Release(
      const std::vector<int>& ranks, int64_t begin, int64_t end);

 private:
  client::ClusterClient& client_;
};

}  // namespace ccl::testing
