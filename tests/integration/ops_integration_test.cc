// The daemons' operational surface with real processes on 127.0.0.1:
// grpc.health.v1 (NOT_SERVING -> SERVING -> NOT_SERVING on SIGTERM, and a
// liveness name that stays SERVING while a worker waits for its peers) and
// the Prometheus endpoint after real ops, checked by promtool.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace ccl {
namespace {

using grpc::health::v1::HealthCheckResponse;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A free loopback port for a daemon option that has no port file (the
// metrics endpoint): bound to port 0, read back, released.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t length = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  close(fd);
  return ntohs(addr.sin_port);
}

// The status name, or the RPC error when the server does not answer.
std::string Health(const std::string& address, const std::string& service) {
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(2));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return absl::StrCat("rpc error ", status.error_code());
  return HealthCheckResponse::ServingStatus_Name(response.status());
}

bool WaitForHealth(const std::string& address, const std::string& service,
                   const std::string& want, milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Health(address, service) == want) return true;
    std::this_thread::sleep_for(milliseconds(50));
  }
  return false;
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  (void)!write(fd, request.data(), request.size());
  std::string reply;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) reply.append(buffer, n);
  close(fd);
  const size_t body = reply.find("\r\n\r\n");
  return body == std::string::npos ? "" : reply.substr(body + 4);
}

// Runs a command; its exit code, with stdout+stderr in `output`.
int RunCommand(const std::string& command, std::string* output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    output->append(buffer, n);
  }
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

double MetricValue(const std::string& text, const std::string& series) {
  for (size_t at = text.find(series); at != std::string::npos;
       at = text.find(series, at + 1)) {
    if (at != 0 && text[at - 1] != '\n') continue;
    const size_t value = at + series.size();
    if (value < text.size() && text[value] == ' ') {
      return std::stod(text.substr(value + 1));
    }
  }
  return -1;
}

class OpsIntegrationTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto* process : {coordinator_.get(), worker0_.get(), worker1_.get()}) {
      if (process) process->DumpLogOnFailure();
    }
  }
  std::unique_ptr<testing::Subprocess> coordinator_, worker0_, worker1_;
};

TEST_F(OpsIntegrationTest, HealthFollowsTheWorldAndTheDrain) {
  auto cccoord = testing::BinaryPath("cccoord");
  auto ccworker = testing::BinaryPath("ccworker");
  auto ccctl = testing::BinaryPath("ccctl");
  ASSERT_TRUE(cccoord.ok() && ccworker.ok() && ccctl.ok());
  const int coordinator_metrics = FreePort();
  auto coordinator = testing::Subprocess::Start(
      *cccoord,
      {"--world-size", "2", "--listen", "127.0.0.1:0", "--drain-ms", "1500",
       "--metrics-port", std::to_string(coordinator_metrics)});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  coordinator_ = *std::move(coordinator);
  ASSERT_TRUE(coordinator_->WaitForPort(seconds(20)).ok());
  const std::string coordinator_address = coordinator_->loopback_address();
  EXPECT_EQ(Health(coordinator_address, ""), "SERVING");
  EXPECT_EQ(Health(coordinator_address, "ccl.v1.Coordinator"), "SERVING");

  const int metrics_port = FreePort();
  const std::vector<std::string> worker_args = {
      "--coordinator", coordinator_address, "--listen",
      "127.0.0.1:0",   "--drain-ms",        "2000"};
  std::vector<std::string> args0 = worker_args;
  args0.insert(args0.end(),
               {"--rank", "0", "--metrics-port", std::to_string(metrics_port)});
  auto worker0 = testing::Subprocess::Start(*ccworker, args0);
  ASSERT_TRUE(worker0.ok()) << worker0.status();
  worker0_ = *std::move(worker0);
  ASSERT_TRUE(worker0_->WaitForPort(seconds(20)).ok());
  const std::string address0 = worker0_->loopback_address();

  // Registered, but the world (2 ranks) is not formed: not ready, yet alive.
  EXPECT_EQ(Health(address0, ""), "NOT_SERVING");
  EXPECT_EQ(Health(address0, "ccl.v1.Worker"), "NOT_SERVING");
  EXPECT_EQ(Health(address0, "liveness"), "SERVING");
  const std::string joining = HttpGet(metrics_port, "/metrics");
  EXPECT_EQ(MetricValue(joining, "ccl_worker_state{state=\"joining\"}"), 1)
      << joining;

  auto worker1 = testing::Subprocess::Start(*ccworker, [&] {
    auto args = worker_args;
    args.insert(args.end(), {"--rank", "1"});
    return args;
  }());
  ASSERT_TRUE(worker1.ok()) << worker1.status();
  worker1_ = *std::move(worker1);
  ASSERT_TRUE(worker1_->WaitForPort(seconds(20)).ok());
  ASSERT_TRUE(WaitForHealth(address0, "", "SERVING", seconds(60)));
  ASSERT_TRUE(
      WaitForHealth(worker1_->loopback_address(), "", "SERVING", seconds(30)));

  // Real ops through ccctl, then the scrape.
  const std::string ctl =
      absl::StrCat(*ccctl, " --coordinator ", coordinator_address, " ");
  std::string output;
  ASSERT_EQ(RunCommand(ctl + "allreduce --op sum", &output), 0) << output;
  EXPECT_NE(output.find("[3.0]"), std::string::npos) << output;
  output.clear();
  ASSERT_EQ(
      RunCommand(ctl + "tensor alloc keep --shape 1000 --dtype float32 --fill "
                       "ones",
                 &output),
      0)
      << output;
  output.clear();
  ASSERT_EQ(RunCommand(ctl + "allreduce --tensor keep --op sum", &output), 0)
      << output;

  const std::string text = HttpGet(metrics_port, "/metrics");
  EXPECT_EQ(MetricValue(text,
                        "ccl_ops_total{op=\"all_reduce\",backend="
                        "\"gloo\",status=\"OK\"}"),
            2)
      << text;
  // One float32 element, then 1000 of them.
  EXPECT_EQ(MetricValue(
                text, "ccl_op_bytes_total{op=\"all_reduce\",backend=\"gloo\"}"),
            4004);
  EXPECT_EQ(MetricValue(text,
                        "ccl_op_latency_seconds_count{op=\"all_reduce\","
                        "backend=\"gloo\"}"),
            2);
  EXPECT_EQ(MetricValue(text, "ccl_tensors_held"), 1);
  EXPECT_EQ(MetricValue(text, "ccl_tensor_bytes_held"), 4000);
  EXPECT_EQ(MetricValue(text, "ccl_worker_state{state=\"ready\"}"), 1);
  EXPECT_EQ(MetricValue(text, "ccl_worker_rank"), 0);
  EXPECT_EQ(MetricValue(text, "ccl_worker_world_size"), 2);
  EXPECT_EQ(MetricValue(text,
                        "ccl_communicator_state{group=\"world\","
                        "backend=\"gloo\",state=\"ready\"}"),
            1)
      << text;
  EXPECT_GE(MetricValue(text, "ccl_heartbeat_age_seconds"), 0);
  const std::string coordinator_text = HttpGet(coordinator_metrics, "/metrics");
  EXPECT_EQ(MetricValue(coordinator_text, "ccl_coordinator_world_size"), 2)
      << coordinator_text;
  EXPECT_GE(MetricValue(coordinator_text,
                        "ccl_coordinator_heartbeat_age_seconds{rank=\"1\"}"),
            0);

  // promtool is the reference parser of the exposition format.
  for (const std::string* scrape : {&text, &coordinator_text}) {
    const std::string path = ::testing::TempDir() + "/scrape.prom";
    std::ofstream(path) << *scrape;
    output.clear();
    EXPECT_EQ(RunCommand("promtool check metrics < " + path, &output), 0)
        << "promtool (Debian package prometheus) must be installed and "
           "accept the scrape:\n"
        << output;
  }

  // SIGTERM: NOT_SERVING at once, while the process still serves for the
  // drain period; then a clean exit.
  ASSERT_TRUE(worker0_->Signal(SIGTERM).ok());
  EXPECT_TRUE(WaitForHealth(address0, "", "NOT_SERVING", milliseconds(1500)));
  EXPECT_EQ(Health(address0, "liveness"), "SERVING");
  EXPECT_TRUE(worker0_->running());
  const std::string draining = HttpGet(metrics_port, "/metrics");
  EXPECT_EQ(MetricValue(draining, "ccl_worker_state{state=\"draining\"}"), 1);
  auto exited = worker0_->WaitForExit(seconds(20));
  ASSERT_TRUE(exited.ok()) << exited.status();
  EXPECT_TRUE(exited->exited && exited->code == 0) << exited->ToString();

  ASSERT_TRUE(coordinator_->Signal(SIGTERM).ok());
  EXPECT_TRUE(WaitForHealth(coordinator_address, "", "NOT_SERVING",
                            milliseconds(1200)));
  auto coordinator_exit = coordinator_->WaitForExit(seconds(20));
  ASSERT_TRUE(coordinator_exit.ok());
  EXPECT_TRUE(coordinator_exit->exited && coordinator_exit->code == 0);
}

TEST_F(OpsIntegrationTest, ReflectionListsTheApi) {
  auto cccoord = testing::BinaryPath("cccoord");
  ASSERT_TRUE(cccoord.ok());
  auto coordinator = testing::Subprocess::Start(
      *cccoord, {"--world-size", "1", "--listen", "127.0.0.1:0"});
  ASSERT_TRUE(coordinator.ok());
  coordinator_ = *std::move(coordinator);
  ASSERT_TRUE(coordinator_->WaitForPort(seconds(20)).ok());
  // The reflection service answers ListServices over a raw stream, as
  // grpcurl does: the request is field 7 (list_services) = "".
  auto channel = grpc::CreateChannel(coordinator_->loopback_address(),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + seconds(5));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context,
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  const char request[] = {0x3a, 0x00};  // field 7, length 0
  grpc::Slice slice(request, sizeof(request));
  grpc::ByteBuffer buffer(&slice, 1);
  call->Write(buffer, reinterpret_cast<void*>(2));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  grpc::ByteBuffer reply;
  call->Read(&reply, reinterpret_cast<void*>(3));
  ASSERT_TRUE(cq.Next(&tag, &ok) && ok);
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(reply.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  EXPECT_NE(bytes.find("ccl.v1.Coordinator"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  context.TryCancel();
  call->Finish(nullptr, reinterpret_cast<void*>(4));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace ccl
