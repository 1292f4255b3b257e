#include "client/ccctl/bench_ops.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"

namespace ccl::ctl {
namespace {

double Factor1(int) { return 1.0; }
double FactorAllReduce(int n) { return 2.0 * (n - 1) / n; }
double FactorGather(int n) { return static_cast<double>(n - 1) / n; }
std::pair<int64_t, int64_t> Same(int64_t c, int) { return {c, c}; }
std::pair<int64_t, int64_t> Grow(int64_t c, int n) { return {c / n, c}; }
std::pair<int64_t, int64_t> Shrink(int64_t c, int n) { return {c, c / n}; }

constexpr BenchOp kBenchOps[] = {
    {"all_reduce", OpKind::kAllReduce, FactorAllReduce, Same},
    {"all_gather", OpKind::kAllGather, FactorGather, Grow},
    {"reduce_scatter", OpKind::kReduceScatter, FactorGather, Shrink},
    {"broadcast", OpKind::kBroadcast, Factor1, Same},
    {"reduce", OpKind::kReduce, Factor1, Same},
    {"alltoall", OpKind::kAllToAll, FactorGather, Same},
    {"gather", OpKind::kGather, FactorGather, Grow},
    {"scatter", OpKind::kScatter, FactorGather, Shrink},
    {"sendrecv", OpKind::kSend, Factor1, Same},
};

}  // namespace

const BenchOp* FindBenchOp(const std::string& name) {
  std::string wanted = name;
  for (char& c : wanted) {
    if (c == '-') c = '_';
  }
  if (wanted == "allreduce") wanted = "all_reduce";
  if (wanted == "allgather") wanted = "all_gather";
  if (wanted == "reducescatter") wanted = "reduce_scatter";
  if (wanted == "all_to_all") wanted = "alltoall";
  for (const BenchOp& op : kBenchOps) {
    if (wanted == op.name) return &op;
  }
  return nullptr;
}

std::string SharedGpuNote(const client::World& world,
                          const std::vector<int>& members) {
  std::map<std::string, std::set<std::string>> hosts_of_gpu;
  for (const client::Member& member : world.members) {
    if (member.device_bus_id.empty() ||
        std::find(members.begin(), members.end(), member.rank) ==
            members.end()) {
      continue;
    }
    hosts_of_gpu[member.device_bus_id].insert(
        member.host_id.empty() ? member.host : member.host_id);
  }
  for (const auto& [gpu, hosts] : hosts_of_gpu) {
    if (hosts.size() > 1) {
      return absl::StrCat(
          "simulated hosts: ", hosts.size(), " hosts share GPU ", gpu,
          " as hosts of their own (NCCL's socket transport, the GPU "
          "time-shared): a correctness run, not a speed figure");
    }
  }
  return "";
}

const BenchOp* BenchOpFor(OpKind kind) {
  for (const BenchOp& op : kBenchOps) {
    if (op.kind == kind) return &op;
  }
  return nullptr;
}

}  // namespace ccl::ctl
