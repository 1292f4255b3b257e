#include "client/cluster_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/grpc_status.h"

namespace ccl {
namespace {

// Margin between an op's own deadline and the RPC's, so that the worker's
// clear error arrives before the RPC gives up.
constexpr std::chrono::milliseconds kRpcMargin(5000);

template <typename Response, typename Call>
absl::StatusOr<Response> Unary(const Call& call) {
  Response response;
  absl::Status status = FromGrpcStatus(call(&response));
  if (!status.ok()) return status;
  return response;
}

}  // namespace

std::string StatusText(const absl::Status& status) {
  if (status.ok()) return "OK";
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ",
                      std::string(status.message()));
}

ClusterClient::ClusterClient(ClientOptions options,
                             std::unique_ptr<CoordinatorClient> coordinator,
                             ChannelFactory channels, v1::World world)
    : options_(std::move(options)),
      coordinator_(std::move(coordinator)),
      channels_(std::move(channels)),
      world_(std::move(world)),
      group_ranks_(AllRanks()) {}

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
                                     std::string(world.status().message())));
  }
  std::unique_ptr<ClusterClient> client(
      new ClusterClient(options, std::move(coordinator), *std::move(channels),
                        *std::move(world)));
  if (!options.group.empty() && options.group != "world") {
    if (absl::Status s = client->UseGroup(options.group); !s.ok()) return s;
  }
  return client;
}

absl::StatusOr<int> ClusterClient::GroupRank(int world_rank) const {
  auto it = std::find(group_ranks_.begin(), group_ranks_.end(), world_rank);
  if (it == group_ranks_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", world_rank, " is not a member of group '", options_.group,
        "' (world ranks ", absl::StrJoin(group_ranks_, ","), ")"));
  }
  return static_cast<int>(it - group_ranks_.begin());
}

absl::StatusOr<std::vector<v1::GroupInfo>> ClusterClient::Groups() {
  auto infos =
      FanOut<v1::WorkerInfo>(AllRanks(), [&](int rank) { return Info(rank); });
  std::vector<v1::GroupInfo> groups;
  absl::Status first_error;
  for (const auto& r : infos) {
    if (!r.result.ok()) {
      if (first_error.ok()) {
        first_error = absl::Status(
            r.result.status().code(),
            absl::StrCat("rank ", r.rank, ": ", r.result.status().message()));
      }
      continue;
    }
    for (const auto& group : r.result->groups()) {
      bool known = false;
      for (const auto& g : groups) known = known || g.name() == group.name();
      if (!known) groups.push_back(group);
    }
  }
  if (groups.empty() && !first_error.ok()) return first_error;
  return groups;
}

absl::Status ClusterClient::UseGroup(const std::string& group) {
  if (group.empty() || group == "world") {
    options_.group = "world";
    group_ranks_ = AllRanks();
    return absl::OkStatus();
  }
  auto groups = Groups();
  if (!groups.ok()) return groups.status();
  std::string known;
  for (const auto& g : *groups) {
    if (g.name() == group) {
      options_.group = group;
      group_ranks_.assign(g.ranks().begin(), g.ranks().end());
      return absl::OkStatus();
    }
    absl::StrAppend(&known, known.empty() ? "" : ", ", g.name());
  }
  return absl::NotFoundError(absl::StrCat(
      "no group named '", group, "' in the cluster (known: ", known,
      "); make it with `ccctl group create`"));
}

std::vector<RankResult<v1::GroupInfo>> ClusterClient::CreateGroup(
    const std::string& name, const std::vector<int>& ranks) {
  auto seq = coordinator_->ReserveSequence(world_.generation(), "world", 1);
  if (!seq.ok()) {
    std::vector<RankResult<v1::GroupInfo>> failed;
    for (int rank : AllRanks()) failed.push_back({rank, seq.status()});
    return failed;
  }
  v1::CreateGroupRequest request;
  request.set_name(name);
  for (int rank : ranks) request.add_ranks(rank);
  request.set_seq(*seq);
  request.set_generation(world_.generation());
  return FanOut<v1::GroupInfo>(AllRanks(), [&](int rank) {
    auto context = Context(kRpcMargin);
    return Unary<v1::GroupInfo>([&](v1::GroupInfo* response) {
      return Worker(rank).CreateGroup(context.get(), request, response);
    });
  });
}

absl::Status ClusterClient::ToGroupRanks(v1::OpRequest& op) const {
  if (options_.group == "world") return absl::OkStatus();
  switch (op.kind()) {
    case v1::OP_KIND_BROADCAST:
    case v1::OP_KIND_REDUCE:
    case v1::OP_KIND_GATHER:
    case v1::OP_KIND_SCATTER: {
      auto root = GroupRank(op.root());
      if (!root.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("root: ", root.status().message()));
      }
      op.set_root(*root);
      break;
    }
    case v1::OP_KIND_SEND:
    case v1::OP_KIND_RECV: {
      auto peer = GroupRank(op.peer());
      if (!peer.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("peer: ", peer.status().message()));
      }
      op.set_peer(*peer);
      break;
    }
    default:
      break;
  }
  return absl::OkStatus();
}

std::vector<int> ClusterClient::AllRanks() const {
  std::vector<int> ranks;
  for (const auto& member : world_.members()) ranks.push_back(member.rank());
  return ranks;
}

absl::Status ClusterClient::CheckRanks(const std::vector<int>& ranks) const {
  for (int rank : ranks) {
    if (rank < 0 || rank >= world_.world_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " is out of range; the world has ",
          world_.world_size(), " ranks (0..", world_.world_size() - 1, ")"));
    }
  }
  return absl::OkStatus();
}

v1::Worker::Stub& ClusterClient::Worker(int rank) {
  {
    std::lock_guard<std::mutex> lock(stubs_mutex_);
    auto it = stubs_.find(rank);
    if (it != stubs_.end()) return *it->second;
  }
  std::string address;
  for (const auto& member : world_.members()) {
    if (member.rank() == rank) address = member.address();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  auto channel = channels_.Make(address, args);
  // A fresh channel's first RPC fails at once if its first connection
  // attempt does (seen under load on loopback); connecting up front, with a
  // short bound and outside the lock so ranks connect in parallel, keeps
  // that from failing an op while a worker that is gone still fails fast.
  channel->WaitForConnected(std::chrono::system_clock::now() +
                            std::min<std::chrono::milliseconds>(
                                options_.timeout, std::chrono::seconds(3)));
  std::lock_guard<std::mutex> lock(stubs_mutex_);
  auto& stub = stubs_[rank];
  if (!stub) stub = v1::Worker::NewStub(channel);
  return *stub;
}

std::unique_ptr<grpc::ClientContext> ClusterClient::Context(
    std::chrono::milliseconds extra) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + options_.timeout +
                        extra);
  return context;
}

absl::StatusOr<v1::WorkerInfo> ClusterClient::Info(int rank) {
  auto context = Context();
  return Unary<v1::WorkerInfo>([&](v1::WorkerInfo* response) {
    return Worker(rank).GetInfo(context.get(), v1::GetInfoRequest(), response);
  });
}

absl::StatusOr<v1::TensorInfo> ClusterClient::Alloc(
    int rank, const v1::AllocTensorRequest& request) {
  auto context = Context();
  return Unary<v1::TensorInfo>([&](v1::TensorInfo* response) {
    return Worker(rank).AllocTensor(context.get(), request, response);
  });
}

absl::StatusOr<int64_t> ClusterClient::Free(int rank, const std::string& name) {
  auto context = Context();
  v1::FreeTensorRequest request;
  request.set_name(name);
  auto response = Unary<v1::FreeTensorResponse>([&](auto* out) {
    return Worker(rank).FreeTensor(context.get(), request, out);
  });
  if (!response.ok()) return response.status();
  return response->freed_bytes();
}

absl::StatusOr<v1::ListTensorsResponse> ClusterClient::List(int rank) {
  auto context = Context();
  return Unary<v1::ListTensorsResponse>([&](auto* out) {
    return Worker(rank).ListTensors(context.get(), v1::ListTensorsRequest(),
                                    out);
  });
}

absl::StatusOr<v1::TensorSummary> ClusterClient::Summarize(
    int rank, const std::string& name, int64_t head) {
  auto context = Context();
  v1::SummarizeTensorRequest request;
  request.set_name(name);
  request.set_head(head);
  return Unary<v1::TensorSummary>([&](auto* out) {
    return Worker(rank).SummarizeTensor(context.get(), request, out);
  });
}

absl::StatusOr<v1::TensorInfo> ClusterClient::Write(int rank,
                                                    const std::string& name,
                                                    int64_t offset_bytes,
                                                    const std::string& bytes) {
  constexpr size_t kChunk = 1 << 20;
  auto context = Context();
  v1::TensorInfo info;
  auto writer = Worker(rank).WriteTensor(context.get(), &info);
  size_t done = 0;
  do {
    v1::WriteTensorChunk chunk;
    if (done == 0) chunk.set_name(name);
    chunk.set_offset_bytes(offset_bytes + static_cast<int64_t>(done));
    const size_t n = std::min(kChunk, bytes.size() - done);
    chunk.set_data(bytes.substr(done, n));
    done += n;
    if (!writer->Write(chunk))
      break;  // the server ended the stream: see Finish
  } while (done < bytes.size());
  writer->WritesDone();
  absl::Status status = FromGrpcStatus(writer->Finish());
  if (!status.ok()) return status;
  return info;
}

absl::StatusOr<std::string> ClusterClient::Read(int rank,
                                                const std::string& name,
                                                int64_t offset, int64_t count) {
  auto context = Context();
  v1::ReadTensorRequest request;
  request.set_name(name);
  request.set_offset(offset);
  request.set_count(count);
  auto reader = Worker(rank).ReadTensor(context.get(), request);
  std::string bytes;
  v1::ReadTensorChunk chunk;
  while (reader->Read(&chunk)) bytes += chunk.data();
  absl::Status status = FromGrpcStatus(reader->Finish());
  if (!status.ok()) return status;
  return bytes;
}

absl::StatusOr<int64_t> ClusterClient::ReserveSeq(int64_t count) {
  // Seqs are per (generation, group), as the workers' executors are.
  return coordinator_->ReserveSequence(world_.generation(), options_.group,
                                       count);
}

std::vector<RankResult<v1::OpResponse>> ClusterClient::SubmitAll(
    const std::vector<std::pair<int, v1::OpRequest>>& per_rank) {
  std::vector<int> ranks;
  std::map<int, const v1::OpRequest*> by_rank;
  for (const auto& [rank, op] : per_rank) {
    ranks.push_back(rank);
    by_rank[rank] = &op;
  }
  return FanOut<v1::OpResponse>(ranks, [&](int rank) {
    const v1::OpRequest& op = *by_rank[rank];
    auto context =
        Context(std::chrono::milliseconds(op.timeout_ms()) + kRpcMargin);
    return Unary<v1::OpResponse>([&](v1::OpResponse* response) {
      return Worker(rank).Submit(context.get(), op, response);
    });
  });
}

std::vector<RankResult<v1::OpResponse>> ClusterClient::Collective(
    v1::OpRequest op) {
  absl::Status translated = ToGroupRanks(op);
  // A bad root fails before a seq is taken, so the group sees no gap.
  absl::StatusOr<int64_t> seq =
      translated.ok() ? ReserveSeq() : absl::StatusOr<int64_t>(translated);
  if (!seq.ok()) {
    std::vector<RankResult<v1::OpResponse>> failed;
    for (int rank : GroupRanks()) failed.push_back({rank, seq.status()});
    return failed;
  }
  op.set_seq(*seq);
  op.set_group(options_.group);
  op.set_generation(world_.generation());
  if (op.timeout_ms() == 0) op.set_timeout_ms(options_.timeout.count());
  std::vector<std::pair<int, v1::OpRequest>> per_rank;
  for (int rank : GroupRanks()) per_rank.emplace_back(rank, op);
  return SubmitAll(per_rank);
}

std::vector<RankResult<v1::OpResponse>> ClusterClient::PointToPoint(
    const std::map<int, v1::OpRequest>& ops) {
  absl::Status translated;
  for (const auto& [rank, op] : ops) {
    if (!translated.ok()) break;
    translated = GroupRank(rank).status();
    v1::OpRequest copy = op;
    if (translated.ok()) translated = ToGroupRanks(copy);
  }
  absl::StatusOr<int64_t> seq =
      translated.ok() ? ReserveSeq() : absl::StatusOr<int64_t>(translated);
  std::vector<std::pair<int, v1::OpRequest>> per_rank;
  for (int rank : GroupRanks()) {
    auto it = ops.find(rank);
    v1::OpRequest op;
    if (it != ops.end()) {
      op = it->second;
      (void)ToGroupRanks(op);
    } else {
      op.set_kind(v1::OP_KIND_NOP);
    }
    op.set_seq(seq.ok() ? *seq : 0);
    op.set_group(options_.group);
    op.set_generation(world_.generation());
    if (op.timeout_ms() == 0) op.set_timeout_ms(options_.timeout.count());
    per_rank.emplace_back(rank, op);
  }
  if (!seq.ok()) {
    std::vector<RankResult<v1::OpResponse>> failed;
    for (const auto& [rank, op] : per_rank)
      failed.push_back({rank, seq.status()});
    return failed;
  }
  return SubmitAll(per_rank);
}

absl::StatusOr<v1::WorkStatus> ClusterClient::Wait(
    int rank, int64_t work_id, std::chrono::milliseconds timeout) {
  auto context = Context(timeout);
  v1::WaitRequest request;
  request.set_work_id(work_id);
  request.set_timeout_ms(timeout.count());
  v1::WorkStatus status;
  absl::Status rpc =
      FromGrpcStatus(Worker(rank).Wait(context.get(), request, &status));
  if (!rpc.ok()) return rpc;
  return status;
}

absl::StatusOr<v1::OpLog> ClusterClient::OpLog(int rank,
                                               const std::string& group,
                                               int limit) {
  auto context = Context();
  v1::GetOpLogRequest request;
  request.set_group(group);
  request.set_limit(limit);
  return Unary<v1::OpLog>([&](v1::OpLog* response) {
    return Worker(rank).GetOpLog(context.get(), request, response);
  });
}

absl::StatusOr<v1::WorkStatus> ClusterClient::Test(int rank, int64_t work_id) {
  auto context = Context();
  v1::TestRequest request;
  request.set_work_id(work_id);
  return Unary<v1::WorkStatus>([&](v1::WorkStatus* response) {
    return Worker(rank).Test(context.get(), request, response);
  });
}

std::vector<RankResult<v1::BenchResponse>> ClusterClient::Bench(
    const std::function<v1::BenchRequest(int rank)>& for_rank) {
  std::map<int, v1::BenchRequest> requests;
  absl::Status translated;
  for (int rank : GroupRanks()) {
    v1::BenchRequest request = for_rank(rank);
    // A bad root or peer fails before a seq is taken.
    translated = ToGroupRanks(*request.mutable_op());
    if (!translated.ok()) break;
    requests[rank] = std::move(request);
  }
  absl::StatusOr<int64_t> seq =
      translated.ok() ? ReserveSeq() : absl::StatusOr<int64_t>(translated);
  if (!seq.ok()) {
    std::vector<RankResult<v1::BenchResponse>> failed;
    for (int rank : GroupRanks()) failed.push_back({rank, seq.status()});
    return failed;
  }
  return FanOut<v1::BenchResponse>(GroupRanks(), [&](int rank) {
    v1::BenchRequest request = requests[rank];
    v1::OpRequest& op = *request.mutable_op();
    op.set_seq(*seq);
    op.set_group(options_.group);
    op.set_generation(world_.generation());
    if (op.timeout_ms() == 0) op.set_timeout_ms(options_.timeout.count());
    // A bench runs many ops: its RPC deadline scales with the iterations.
    const auto deadline = std::chrono::milliseconds(op.timeout_ms()) *
                              (2 + request.iters() + request.warmup_iters()) +
                          kRpcMargin;
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + deadline);
    return Unary<v1::BenchResponse>([&](v1::BenchResponse* response) {
      return Worker(rank).Bench(context.get(), request, response);
    });
  });
}

}  // namespace ccl
