#include "tests/testing/client_wire.h"

#include "client/internal/client_impl.h"

namespace ccl::testing {

absl::StatusOr<v1::Worker::Stub*> ClientWire::Worker(int rank) {
  return client_.impl_->Stub(rank);
}

std::unique_ptr<grpc::ClientContext> ClientWire::Context(
    std::chrono::milliseconds extra) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(client_.impl_->Deadline(extra));
  return context;
}

absl::StatusOr<int64_t> ClientWire::ReserveSeq(int64_t count) {
  client_.impl_->ReleaseAllSeqs();
  return client_.impl_->coordinator->ReserveSequence(
      client_.impl_->world.generation, client_.impl_->group, count);
}

int64_t ClientWire::generation() const {
  return client_.impl_->world.generation;
}

client::RankResults<v1::OpResponse> ClientWire::Submit(
    const std::vector<int>& ranks,
    const std::function<v1::OpRequest(int rank)>& op_for_rank,
    std::chrono::milliseconds rpc_timeout) {
  std::vector<absl::StatusOr<v1::OpRequest>> requests;
  for (int rank : ranks) requests.push_back(op_for_rank(rank));
  const auto deadline = std::chrono::system_clock::now() + rpc_timeout;
  return client::Zip(
      ranks, client_.impl_->CallEach<v1::OpRequest, v1::OpResponse>(
                 ranks, std::move(requests),
                 &v1::Worker::StubInterface::async_interface::Submit,
                 [deadline](const v1::OpRequest&) { return deadline; }));
}

client::RankResults<v1::BenchResponse> ClientWire::Bench(
    const std::vector<int>& ranks,
    const std::function<v1::BenchRequest(int rank)>& bench_for_rank,
    std::chrono::milliseconds rpc_timeout) {
  std::vector<absl::StatusOr<v1::BenchRequest>> requests;
  for (int rank : ranks) requests.push_back(bench_for_rank(rank));
  const auto deadline = std::chrono::system_clock::now() + rpc_timeout;
  return client::Zip(
      ranks, client_.impl_->CallEach<v1::BenchRequest, v1::BenchResponse>(
                 ranks, std::move(requests),
                 &v1::Worker::StubInterface::async_interface::Bench,
                 [deadline](const v1::BenchRequest&) { return deadline; }));
}

client::RankResults<v1::ReleaseSequenceResponse> ClientWire::Release(
    const std::vector<int>& ranks, int64_t begin, int64_t end) {
  v1::ReleaseSequenceRequest release;
  release.set_group(client_.impl_->group);
  release.set_generation(generation());
  release.set_begin(begin);
  release.set_end(end);
  const auto deadline =
      std::chrono::system_clock::now() + client_.options().timeout;
  return client::Zip(
      ranks,
      client_.impl_->CallEach<v1::ReleaseSequenceRequest,
                              v1::ReleaseSequenceResponse>(
          ranks,
          std::vector<absl::StatusOr<v1::ReleaseSequenceRequest>>(ranks.size(),
                                                                  release),
          &v1::Worker::StubInterface::async_interface::ReleaseSequence,
          [deadline](const v1::ReleaseSequenceRequest&) { return deadline; }));
}

}  // namespace ccl::testing
