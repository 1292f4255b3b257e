// What the service costs a client per op, piece by piece, on a running
// cluster: the round trip of a request every worker answers at once
// (GetInfo: RPC and fan-out only), an 8-byte all_reduce as ccctl bench --e2e
// times it (with the worker's own share), the same without the cross-rank
// agreement, and a plan of ops (the RPC paid once). Every figure is the
// client's wall clock through the client library; p50 and p99 over --iters.
//
//   ./build/bench/client_latency --coordinator HOST:PORT [--iters 2000]
//       [--bytes 8] [--plan 1000]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/cluster_client.h"

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

}  // namespace

int main(int argc, char** argv) {
  ccl::client::ClientOptions options;
  int iters = 2000, plan_ops = 1000;
  int64_t bytes = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--coordinator") {
      options.coordinator = argv[i + 1];
    } else if (flag == "--iters") {
      iters = std::atoi(argv[i + 1]);
    } else if (flag == "--bytes") {
      bytes = std::atoll(argv[i + 1]);
    } else if (flag == "--plan") {
      plan_ops = std::atoi(argv[i + 1]);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (iters < 1 || plan_ops < 1 || bytes < 4) {
    std::fprintf(stderr, "need --iters >= 1, --plan >= 1, --bytes >= 4\n");
    return 2;
  }
  auto client = ClusterClient::Connect(options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n",
                 ccl::client::StatusText(client.status()).c_str());
    return 1;
  }
  ClusterClient& c = **client;
  const std::vector<int> ranks = c.AllRanks();
  const std::string name = "client_latency.x";
  (void)c.Free(ranks, name);
  if (!AllOk(c.Alloc(ranks, {name, ccl::DType::kFloat32, {bytes / 4}}),
             "alloc")) {
    return 1;
  }
  ccl::client::Op op;
  op.kind = ccl::OpKind::kAllReduce;
  op.input = name;

  std::vector<double> info_us, op_us, worker_us, unchecked_us;
  for (int i = 0; i < iters / 10 + 1; ++i) {  // warm up channels and ranges
    if (!AllOk(c.Collective(op), "warmup")) return 1;
  }
  for (int i = 0; i < iters; ++i) {
    auto start = Clock::now();
    if (!AllOk(c.Info(ranks), "GetInfo")) return 1;
    info_us.push_back(Since(start));

    start = Clock::now();
    const auto results = c.Collective(op);
    op_us.push_back(Since(start));
    if (!AllOk(results, "all_reduce")) return 1;
    double slowest = 0;
    for (const auto& r : results) {
      slowest = std::max(slowest, r.result->timing.total_us);
    }
    worker_us.push_back(slowest);

    ccl::client::Op unchecked = op;
    unchecked.skip_agreement = true;
    start = Clock::now();
    if (!AllOk(c.Collective(unchecked), "all_reduce")) return 1;
    unchecked_us.push_back(Since(start));
  }
  ccl::client::Plan plan;
  plan.steps.assign(plan_ops, ccl::client::PlanStep::Collective(op));
  std::vector<double> plan_us;
  bool emulated = false;
  for (int round = 0; round < 5; ++round) {
    const auto start = Clock::now();
    const auto results = c.SubmitPlan(plan);
    plan_us.push_back(Since(start) / plan_ops);
    if (!AllOk(results, "plan")) return 1;
    for (const auto& r : results) emulated |= r.result->emulated;
  }
  (void)c.Free(ranks, name);

  std::printf(
      "# client_latency: %zu ranks, %lld B float32 all_reduce (sum), "
      "%d iters\n",
      ranks.size(), static_cast<long long>(bytes), iters);
  std::printf("%-44s %10s %10s\n", "# what", "p50 (us)", "p99 (us)");
  Row("GetInfo on every rank (RPC + fan-out)", info_us);
  Row("all_reduce, client-seen", op_us);
  Row("  of which on the slowest worker", worker_us);
  Row("all_reduce without the agreement check", unchecked_us);
  Row(emulated ? "plan, per op (EMULATED: no SubmitPlan)"
               : "plan of --plan ops, per op",
      plan_us);
  return 0;
}
