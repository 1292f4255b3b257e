#include "client/cluster_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/internal/client_impl.h"
#include "client/internal/convert.h"

namespace ccl::client {
namespace {

using std::chrono::milliseconds;
using Async = v1::Worker::StubInterface::async_interface;

template <typename T>
absl::StatusOr<T> Single(RankResults<T> results) {
  return std::move(results.front().result);
}

std::vector<int> RanksOf(const std::vector<WorkRef>& works) {
  std::vector<int> ranks;
  ranks.reserve(works.size());
  for (const WorkRef& work : works) ranks.push_back(work.rank);
  return ranks;
}

// One op at one fresh seq of the client's group.
RankResults<OpResult> RunStep(internal::ClientImpl& impl,
                              const PlanStep& step) {
  const std::vector<int>& ranks = impl.group_ranks;
  // A bad root or peer fails before a seq is taken, so the group sees no
  // gap.
  auto ops = impl.OpsForRanks(step);
  if (!ops.ok()) return FailEach<OpResult>(ranks, ops.status());
  auto seq = impl.TakeSeqs(1);
  if (!seq.ok()) return FailEach<OpResult>(ranks, seq.status());
  for (v1::OpRequest& op : *ops) impl.Stamp(op, *seq);
  RankResults<OpResult> results = impl.SubmitEach(*std::move(ops));
  for (const auto& r : results) {
    if (!r.result.ok()) {
      impl.DropSeqs("");
      break;
    }
  }
  return results;
}

}  // namespace

std::string StatusText(const absl::Status& status) {
  if (status.ok()) return "OK";
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ",
                      std::string(status.message()));
}

ClusterClient::ClusterClient(std::unique_ptr<internal::ClientImpl> impl)
    : impl_(std::move(impl)) {}

ClusterClient::~ClusterClient() = default;

absl::StatusOr<std::unique_ptr<ClusterClient>> ClusterClient::Connect(
    const ClientOptions& options) {
  auto channels = ChannelFactory::Create(options.security);
  if (!channels.ok()) return channels.status();
  auto coordinator = std::make_unique<CoordinatorClient>(
      channels->Make(options.coordinator), options.timeout);
  auto world = coordinator->GetWorld();
  if (!world.ok()) {
    return absl::Status(world.status().code(),
                        absl::StrCat("coordinator ", options.coordinator, ": ",
                                     world.status().message()));
  }
  std::unique_ptr<ClusterClient> client(
      new ClusterClient(std::make_unique<internal::ClientImpl>(
          options, std::move(coordinator), *std::move(channels),
          internal::ToNative(*world))));
  client->impl_->options.group = "world";
  if (!options.group.empty() && options.group != "world") {
    if (absl::Status s = client->UseGroup(options.group); !s.ok()) return s;
  }
  return client;
}

const ClientOptions& ClusterClient::options() const { return impl_->options; }
const World& ClusterClient::world() const { return impl_->world; }

absl::StatusOr<World> ClusterClient::RefreshWorld() {
  if (absl::Status s = impl_->RefreshWorld(); !s.ok()) return s;
  return impl_->world;
}
int ClusterClient::world_size() const { return impl_->world.world_size; }
std::vector<int> ClusterClient::AllRanks() const { return impl_->AllRanks(); }

absl::Status ClusterClient::CheckRanks(const std::vector<int>& ranks) const {
  const int size = impl_->world.world_size;
  for (int rank : ranks) {
    if (rank < 0 || rank >= size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is out of range; the world has ", size,
                       " ranks (0..", size - 1, ")"));
    }
  }
  return absl::OkStatus();
}

const std::string& ClusterClient::group() const { return impl_->group; }
const std::vector<int>& ClusterClient::GroupRanks() const {
  return impl_->group_ranks;
}
int ClusterClient::group_size() const {
  return static_cast<int>(impl_->group_ranks.size());
}
absl::StatusOr<int> ClusterClient::GroupRank(int world_rank) const {
  return impl_->GroupRank(world_rank);
}

absl::StatusOr<std::vector<GroupInfo>> ClusterClient::Groups() {
  std::vector<GroupInfo> groups;
  absl::Status first_error;
  for (auto& r : Info(AllRanks())) {
    if (!r.result.ok()) {
      if (first_error.ok()) {
        first_error = absl::Status(
            r.result.status().code(),
            absl::StrCat("rank ", r.rank, ": ", r.result.status().message()));
      }
      continue;
    }
    for (GroupInfo& group : r.result->groups) {
      const bool known =
          std::any_of(groups.begin(), groups.end(),
                      [&](const GroupInfo& g) { return g.name == group.name; });
      if (!known) groups.push_back(std::move(group));
    }
  }
  if (groups.empty() && !first_error.ok()) return first_error;
  return groups;
}

absl::Status ClusterClient::UseGroup(const std::string& group) {
  if (group.empty() || group == "world") {
    impl_->SetGroup("world", AllRanks());
    impl_->options.group = "world";
    return absl::OkStatus();
  }
  auto groups = Groups();
  if (!groups.ok()) return groups.status();
  std::string known;
  for (const GroupInfo& g : *groups) {
    if (g.name == group) {
      impl_->SetGroup(group, g.ranks);
      impl_->options.group = group;
      return absl::OkStatus();
    }
    absl::StrAppend(&known, known.empty() ? "" : ", ", g.name);
  }
  return absl::NotFoundError(absl::StrCat(
      "no group named '", group, "' in the cluster (known: ", known,
      "); make it with `ccctl group create`"));
}

RankResults<GroupInfo> ClusterClient::CreateGroup(
    const std::string& name, const std::vector<int>& ranks) {
  const std::vector<int> everyone = AllRanks();
  // The split is an op of the world group, whatever the client's group.
  auto seq = impl_->TakeSeqs(1, "world");
  if (!seq.ok()) return FailEach<GroupInfo>(everyone, seq.status());
  v1::CreateGroupRequest request;
  request.set_name(name);
  for (int rank : ranks) request.add_ranks(rank);
  request.set_seq(*seq);
  // The generation the seq was reserved in: a worker still forming it
  // waits for it, one in another generation refuses.
  request.set_generation(impl_->world.generation);
  const auto deadline = impl_->Deadline(internal::ClientImpl::kRpcMargin);
  return internal::ToNativeEach<GroupInfo>(
      everyone,
      impl_->CallEach<v1::CreateGroupRequest, v1::GroupInfo>(
          everyone,
          std::vector<absl::StatusOr<v1::CreateGroupRequest>>(everyone.size(),
                                                              request),
          &Async::CreateGroup,
          [deadline](const v1::CreateGroupRequest&) { return deadline; }));
}

RankResults<std::string> ClusterClient::DestroyGroup(const std::string& name) {
  const std::vector<int> everyone = AllRanks();
  v1::DestroyGroupRequest request;
  request.set_name(name);
  auto results =
      impl_->CallEach<v1::DestroyGroupRequest, v1::DestroyGroupResponse>(
          everyone, request, &Async::DestroyGroup);
  RankResults<std::string> out;
  for (size_t i = 0; i < everyone.size(); ++i) {
    if (results[i].ok()) {
      out.push_back({everyone[i], name});
    } else {
      out.push_back({everyone[i], results[i].status()});
    }
  }
  return out;
}

absl::StatusOr<WorkerInfo> ClusterClient::Info(int rank) {
  return Single(Info(std::vector<int>{rank}));
}

RankResults<WorkerInfo> ClusterClient::Info(const std::vector<int>& ranks) {
  return internal::ToNativeEach<WorkerInfo>(
      ranks, impl_->CallEach<v1::GetInfoRequest, v1::WorkerInfo>(
                 ranks, v1::GetInfoRequest(), &Async::GetInfo));
}

absl::StatusOr<TensorInfo> ClusterClient::Alloc(int rank,
                                                const TensorSpec& spec,
                                                const Fill& fill) {
  return Single(Alloc({TensorAlloc{rank, spec, fill}}));
}

RankResults<TensorInfo> ClusterClient::Alloc(const std::vector<int>& ranks,
                                             const TensorSpec& spec,
                                             const Fill& fill) {
  std::vector<TensorAlloc> allocs;
  allocs.reserve(ranks.size());
  for (int rank : ranks) allocs.push_back({rank, spec, fill});
  return Alloc(allocs);
}

RankResults<TensorInfo> ClusterClient::Alloc(
    const std::vector<TensorAlloc>& allocs) {
  std::vector<int> ranks;
  std::vector<absl::StatusOr<v1::AllocTensorRequest>> requests;
  for (const TensorAlloc& alloc : allocs) {
    ranks.push_back(alloc.rank);
    v1::AllocTensorRequest request;
    *request.mutable_spec() =
        internal::ToWire(alloc.spec, impl_->DeviceOf(alloc.rank));
    *request.mutable_fill() = internal::ToWire(alloc.fill);
    // A worker still forming this generation fills with the rank it will
    // have there, not the one it had before (or none).
    request.set_generation(impl_->world.generation);
    request.set_rank(alloc.rank);
    requests.push_back(std::move(request));
  }
  const auto deadline = impl_->Deadline();
  return internal::ToNativeEach<TensorInfo>(
      ranks, impl_->CallEach<v1::AllocTensorRequest, v1::TensorInfo>(
                 ranks, std::move(requests), &Async::AllocTensor,
                 [deadline](const auto&) { return deadline; }));
}

absl::StatusOr<int64_t> ClusterClient::Free(int rank, const std::string& name) {
  return Single(Free(std::vector<int>{rank}, name));
}

RankResults<int64_t> ClusterClient::Free(const std::vector<int>& ranks,
                                         const std::string& name) {
  v1::FreeTensorRequest request;
  request.set_name(name);
  auto results = impl_->CallEach<v1::FreeTensorRequest, v1::FreeTensorResponse>(
      ranks, request, &Async::FreeTensor);
  RankResults<int64_t> out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (results[i].ok()) {
      out.push_back({ranks[i], results[i]->freed_bytes()});
    } else {
      out.push_back({ranks[i], results[i].status()});
    }
  }
  return out;
}

absl::StatusOr<TensorList> ClusterClient::List(int rank) {
  return Single(List(std::vector<int>{rank}));
}

RankResults<TensorList> ClusterClient::List(const std::vector<int>& ranks) {
  return internal::ToNativeEach<TensorList>(
      ranks, impl_->CallEach<v1::ListTensorsRequest, v1::ListTensorsResponse>(
                 ranks, v1::ListTensorsRequest(), &Async::ListTensors));
}

absl::StatusOr<TensorSummary> ClusterClient::Summarize(int rank,
                                                       const std::string& name,
                                                       int64_t head) {
  return Single(Summarize(std::vector<int>{rank}, name, head));
}

RankResults<TensorSummary> ClusterClient::Summarize(
    const std::vector<int>& ranks, const std::string& name, int64_t head) {
  v1::SummarizeTensorRequest request;
  request.set_name(name);
  request.set_head(head);
  return internal::ToNativeEach<TensorSummary>(
      ranks, impl_->CallEach<v1::SummarizeTensorRequest, v1::TensorSummary>(
                 ranks, request, &Async::SummarizeTensor));
}

absl::StatusOr<TensorInfo> ClusterClient::Write(int rank,
                                                const std::string& name,
                                                int64_t offset_bytes,
                                                const std::string& bytes) {
  return Single(
      WriteTensors(*impl_, {TensorWriteRef{rank, &name, offset_bytes, bytes}}));
}

RankResults<TensorInfo> ClusterClient::Write(
    const std::vector<TensorWrite>& writes) {
  std::vector<TensorWriteRef> refs;
  refs.reserve(writes.size());
  for (const TensorWrite& write : writes) {
    refs.push_back({write.rank, &write.name, write.offset_bytes, write.bytes});
  }
  return WriteTensors(*impl_, refs);
}

absl::StatusOr<std::string> ClusterClient::Read(int rank,
                                                const std::string& name,
                                                int64_t offset, int64_t count) {
  return Single(ReadTensors(*impl_, {rank}, name, offset, count));
}

RankResults<OpResult> ClusterClient::Collective(const Op& op) {
  return RunStep(*impl_, PlanStep::Collective(op));
}

RankResults<OpResult> ClusterClient::PointToPoint(
    const std::map<int, Op>& ops) {
  return RunStep(*impl_, PlanStep::PointToPoint(ops));
}

RankResults<PlanResult> ClusterClient::SubmitPlan(const Plan& plan) {
  return impl_->SubmitPlan(plan);
}

RankResults<BenchResult> ClusterClient::Bench(
    const std::function<BenchSpec(int rank)>& for_rank) {
  const std::vector<int>& ranks = impl_->group_ranks;
  std::vector<v1::BenchRequest> requests;
  for (int rank : ranks) {
    const BenchSpec spec = for_rank(rank);
    // A bad root or peer fails before a seq is taken.
    auto op = impl_->ToWireOp(spec.op);
    if (!op.ok()) return FailEach<BenchResult>(ranks, op.status());
    v1::BenchRequest& request = requests.emplace_back();
    *request.mutable_op() = *std::move(op);
    request.set_warmup_iters(spec.warmup_iters);
    request.set_iters(spec.iters);
    request.set_check(spec.check);
    request.set_graph_launches(spec.graph_launches);
  }
  auto seq = impl_->TakeSeqs(1);
  if (!seq.ok()) return FailEach<BenchResult>(ranks, seq.status());
  std::vector<absl::StatusOr<v1::BenchRequest>> stamped;
  for (v1::BenchRequest& request : requests) {
    impl_->Stamp(*request.mutable_op(), *seq);
    stamped.push_back(std::move(request));
  }
  return internal::ToNativeEach<BenchResult>(
      ranks,
      impl_->CallEach<v1::BenchRequest, v1::BenchResponse>(
          ranks, std::move(stamped), &Async::Bench,
          [timeout = impl_->options.timeout](const v1::BenchRequest& request) {
            // A bench runs many ops: its deadline grows with them.
            const int64_t instances = 2 + request.warmup_iters() +
                                      static_cast<int64_t>(request.iters()) *
                                          std::max(1, request.graph_launches());
            return internal::ClientImpl::OpDeadline(
                milliseconds(request.op().timeout_ms()) * instances, timeout);
          }));
}

absl::StatusOr<WorkStatus> ClusterClient::Wait(int rank, int64_t work_id,
                                               milliseconds timeout) {
  return Single(Wait({WorkRef{rank, work_id}}, timeout));
}

RankResults<WorkStatus> ClusterClient::Wait(const std::vector<WorkRef>& works,
                                            milliseconds timeout) {
  std::vector<absl::StatusOr<v1::WaitRequest>> requests;
  for (const WorkRef& work : works) {
    v1::WaitRequest request;
    request.set_work_id(work.work_id);
    request.set_worker_id(work.worker_id);
    request.set_timeout_ms(timeout.count());
    requests.push_back(std::move(request));
  }
  const auto deadline = impl_->Deadline(timeout);
  const std::vector<int> ranks = RanksOf(works);
  return internal::ToNativeEach<WorkStatus>(
      ranks, impl_->CallEach<v1::WaitRequest, v1::WorkStatus>(
                 ranks, std::move(requests), &Async::Wait,
                 [deadline](const auto&) { return deadline; }));
}

absl::StatusOr<WorkStatus> ClusterClient::Test(int rank, int64_t work_id) {
  return Single(Test({WorkRef{rank, work_id}}));
}

RankResults<WorkStatus> ClusterClient::Test(const std::vector<WorkRef>& works) {
  std::vector<absl::StatusOr<v1::TestRequest>> requests;
  for (const WorkRef& work : works) {
    v1::TestRequest request;
    request.set_work_id(work.work_id);
    request.set_worker_id(work.worker_id);
    requests.push_back(std::move(request));
  }
  const auto deadline = impl_->Deadline();
  const std::vector<int> ranks = RanksOf(works);
  return internal::ToNativeEach<WorkStatus>(
      ranks, impl_->CallEach<v1::TestRequest, v1::WorkStatus>(
                 ranks, std::move(requests), &Async::Test,
                 [deadline](const auto&) { return deadline; }));
}

RankResults<OpLog> ClusterClient::OpLogs(const std::vector<int>& ranks,
                                         const std::string& group, int limit) {
  v1::GetOpLogRequest request;
  request.set_group(group.empty() ? impl_->group : group);
  request.set_limit(limit);
  return internal::ToNativeEach<OpLog>(
      ranks, impl_->CallEach<v1::GetOpLogRequest, v1::OpLog>(ranks, request,
                                                             &Async::GetOpLog));
}

void ClusterClient::ReleaseReservedSequences() { impl_->ReleaseAllSeqs(); }

}  // namespace ccl::client
