#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/match.h"
#include "common/hostname_rank.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/metrics_http.h"
#include "coordinator/coordinator_metrics.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/core/worker_metrics.h"

namespace ccl {
namespace {

TEST(MetricsRegistryTest, RendersCountersGaugesAndHistograms) {
  MetricsRegistry registry;
  ASSERT_TRUE(registry
                  .Declare("ops_total", MetricsRegistry::Type::kCounter,
                           "Ops.\nSecond line")
                  .ok());
  ASSERT_TRUE(
      registry.Declare("held", MetricsRegistry::Type::kGauge, "Held.").ok());
  ASSERT_TRUE(registry
                  .Declare("latency_seconds", MetricsRegistry::Type::kHistogram,
                           "Latency.", {0.1, 1})
                  .ok());
  registry.Add("ops_total", {{"op", "all_reduce"}, {"v", "a\"b\\c"}}, 2);
  registry.Add("ops_total", {{"op", "all_reduce"}, {"v", "a\"b\\c"}}, -5);
  registry.Set("held", {}, 3.5);
  registry.Observe("latency_seconds", {{"op", "x"}}, 0.05);
  registry.Observe("latency_seconds", {{"op", "x"}}, 0.5);
  registry.Observe("latency_seconds", {{"op", "x"}}, 7);
  registry.Add("undeclared", {}, 1);  // dropped
  const std::string text = registry.Render();
  EXPECT_TRUE(absl::StrContains(text, "# HELP ops_total Ops.\\nSecond line\n"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE ops_total counter\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "ops_total{op=\"all_reduce\",v=\"a\\\"b\\\\c\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "held 3.5\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "latency_seconds_bucket{op=\"x\",le=\"0.10000000000000001\"} 1\n"));
  EXPECT_TRUE(
      absl::StrContains(text, "latency_seconds_bucket{op=\"x\",le=\"1\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "latency_seconds_bucket{op=\"x\",le=\"+Inf\"} 3\n"));
  EXPECT_TRUE(absl::StrContains(text, "latency_seconds_count{op=\"x\"} 3\n"));
  EXPECT_FALSE(absl::StrContains(text, "undeclared"));
}

TEST(MetricsRegistryTest, RefusesBadDeclarations) {
  MetricsRegistry registry;
  EXPECT_FALSE(
      registry.Declare("9bad", MetricsRegistry::Type::kGauge, "").ok());
  EXPECT_FALSE(
      registry.Declare("h", MetricsRegistry::Type::kHistogram, "", {1, 1})
          .ok());
  ASSERT_TRUE(registry.Declare("g", MetricsRegistry::Type::kGauge, "").ok());
  EXPECT_EQ(registry.Declare("g", MetricsRegistry::Type::kGauge, "").code(),
            absl::StatusCode::kAlreadyExists);
}

std::string HttpGet(int port, const std::string& request) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  (void)!write(fd, request.data(), request.size());
  std::string reply;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) reply.append(buffer, n);
  close(fd);
  return reply;
}

TEST(MetricsHttpServerTest, ServesMetricsOnAnEphemeralPort) {
  MetricsRegistry registry;
  ASSERT_TRUE(
      registry.Declare("up_value", MetricsRegistry::Type::kGauge, "Up.").ok());
  registry.Set("up_value", {}, 1);
  // Port 0 here is only the test's way to get an ephemeral port.
  auto server = MetricsHttpServer::Start("127.0.0.1", 0, &registry);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  const std::string ok =
      HttpGet(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(ok, "HTTP/1.1 200 OK\r\n")) << ok;
  EXPECT_TRUE(absl::StrContains(ok, "text/plain; version=0.0.4")) << ok;
  EXPECT_TRUE(absl::StrContains(ok, "\r\n\r\n# HELP up_value Up.\n")) << ok;
  EXPECT_TRUE(absl::StartsWith(HttpGet(port, "GET / HTTP/1.1\r\n\r\n"),
                               "HTTP/1.1 404"));
  EXPECT_TRUE(absl::StartsWith(HttpGet(port, "POST /metrics HTTP/1.1\r\n\r\n"),
                               "HTTP/1.1 405"));
  (*server)->Stop();
}

// A plan's records come in one call; runs of like ops are accounted for
// together and must add up to what one call per op gave.
TEST(WorkerMetricsTest, ABatchOfMixedRecordsCountsEachOpOnce) {
  WorkerMetrics metrics("nccl");
  std::vector<OpRecord> batch;
  auto add = [&](OpKind kind, int64_t count, double total_us,
                 absl::Status status) {
    OpRecord record;
    record.spec.kind = kind;
    record.dtype = DType::kFloat32;
    record.count = count;
    record.timing.total_us = total_us;
    record.timing.device_us = total_us / 2;
    record.status = std::move(status);
    batch.push_back(record);
  };
  add(OpKind::kAllReduce, 2, 5, absl::OkStatus());
  add(OpKind::kAllReduce, 2, 50000, absl::OkStatus());
  add(OpKind::kBroadcast, 8, 5, absl::OkStatus());
  add(OpKind::kAllReduce, 2, 5, absl::UnavailableError("peer 1 went away"));
  add(OpKind::kAllReduce, 2, 5, absl::FailedPreconditionError("not run"));
  add(OpKind::kAllReduce, 4, 5, absl::OkStatus());
  metrics.OnOpsDone(batch);
  const std::string text = metrics.registry().Render();
  for (const char* line : {
           "ccl_ops_total{op=\"all_reduce\",backend=\"nccl\",status=\"OK\"} "
           "3\n",
           "ccl_ops_total{op=\"broadcast\",backend=\"nccl\",status=\"OK\"} "
           "1\n",
           "ccl_ops_total{op=\"all_reduce\",backend=\"nccl\",status="
           "\"UNAVAILABLE\"} 1\n",
           "ccl_ops_total{op=\"all_reduce\",backend=\"nccl\",status="
           "\"FAILED_PRECONDITION\"} 1\n",
           // (2 + 2 + 4) floats
           "ccl_op_bytes_total{op=\"all_reduce\",backend=\"nccl\"} 32\n",
           "ccl_op_latency_seconds_count{op=\"all_reduce\",backend=\"nccl\"} "
           "3\n",
           "ccl_op_device_seconds_count{op=\"all_reduce\",backend=\"nccl\"} "
           "3\n",
           // Two of the three took 5 us; the third 50 ms.
           "ccl_op_latency_seconds_bucket{op=\"all_reduce\",backend=\"nccl\","
           "le=\"0.0001\"} 2\n",
           "ccl_op_latency_seconds_bucket{op=\"all_reduce\",backend=\"nccl\","
           "le=\"1\"} 3\n",
       }) {
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\nin\n" << text;
  }
}

TEST(WorkerMetricsTest, CountsOpsBytesAndLatencyByOpAndBackend) {
  WorkerMetrics metrics("gloo");
  OpRecord record;
  record.spec.kind = OpKind::kAllReduce;
  record.dtype = DType::kFloat32;
  record.count = 256;
  record.timing.total_us = 1500;
  record.timing.device_us = 1000;
  metrics.OnOpsDone({&record, 1});
  metrics.OnOpsDone({&record, 1});
  record.status = absl::DeadlineExceededError("slow peer");
  metrics.OnOpsDone({&record, 1});
  metrics.SetMembership(2, 4, 7);
  metrics.SetState("ready");
  const std::string text = metrics.registry().Render();
  EXPECT_TRUE(absl::StrContains(
      text,
      "ccl_ops_total{op=\"all_reduce\",backend=\"gloo\",status=\"OK\"} 2\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text,
                                "ccl_ops_total{op=\"all_reduce\",backend="
                                "\"gloo\",status=\"DEADLINE_EXCEEDED\"} 1\n"));
  EXPECT_TRUE(absl::StrContains(
      text, "ccl_op_bytes_total{op=\"all_reduce\",backend=\"gloo\"} 2048\n"));
  EXPECT_TRUE(absl::StrContains(
      text,
      "ccl_op_latency_seconds_count{op=\"all_reduce\",backend=\"gloo\"} 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "ccl_worker_state{state=\"ready\"} 1\n"));
  EXPECT_TRUE(
      absl::StrContains(text, "ccl_worker_state{state=\"joining\"} 0\n"));
  EXPECT_TRUE(absl::StrContains(text, "ccl_worker_rank 2\n"));
  EXPECT_TRUE(absl::StrContains(text, "ccl_worker_generation 7\n"));
  EXPECT_TRUE(absl::StrContains(text, "ccl_heartbeat_age_seconds "));
}

TEST(CoordinatorMetricsTest, ReportsTheWorld) {
  coordinator::CoordinatorOptions options;
  options.world_size = 3;
  auto core = coordinator::CoordinatorCore::Create(options);
  ASSERT_TRUE(core.ok()) << core.status();
  MetricsRegistry registry;
  coordinator::RegisterCoordinatorMetrics(registry, **core);
  const std::string text = registry.Render();
  EXPECT_TRUE(absl::StrContains(text, "ccl_coordinator_world_size 3\n"))
      << text;
  EXPECT_TRUE(absl::StrContains(text, "ccl_coordinator_world_state{state="));
  (*core)->Shutdown();
}

TEST(HostnameRankTest, ParsesTheStatefulSetOrdinal) {
  EXPECT_EQ(*RankFromHostname("ccworker-0"), 0);
  EXPECT_EQ(*RankFromHostname("ccl-gpu-worker-13"), 13);
  EXPECT_EQ(*RankFromHostname("ccworker-2.ccworker.ns.svc.cluster.local"), 2);
  EXPECT_FALSE(RankFromHostname("ccworker").ok());
  EXPECT_FALSE(RankFromHostname("ccworker-").ok());
  EXPECT_FALSE(RankFromHostname("ccworker-1a").ok());
  EXPECT_FALSE(RankFromHostname("").ok());
}

TEST(LoggingTest, JsonLinesCarryRankGenerationGroupAndSeq) {
  SetLogRank(-1, -1);
  auto plain = nlohmann::json::parse(
      FormatJsonLogLine(1700000000123456, "info", "ccworker", "a \"b\"\n"));
  EXPECT_EQ(plain["ts"], "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(plain["level"], "info");
  EXPECT_EQ(plain["msg"], "a \"b\"\n");
  EXPECT_FALSE(plain.contains("rank"));
  SetLogRank(3, 2);
  {
    ScopedLogOp scope("world", 41);
    auto op = nlohmann::json::parse(
        FormatJsonLogLine(0, "warn", "ccworker", "all_reduce failed"));
    EXPECT_EQ(op["rank"], 3);
    EXPECT_EQ(op["generation"], 2);
    EXPECT_EQ(op["group"], "world");
    EXPECT_EQ(op["seq"], 41);
  }
  auto after = nlohmann::json::parse(FormatJsonLogLine(0, "info", "x", "m"));
  EXPECT_FALSE(after.contains("seq"));
  SetLogRank(-1, -1);
  EXPECT_TRUE(SetupLogging("debug", "json", "ops_test").ok());
  EXPECT_FALSE(SetupLogging("loud", "json", "ops_test").ok());
  EXPECT_FALSE(SetupLogging("info", "xml", "ops_test").ok());
}

}  // namespace
}  // namespace ccl
