// The worker daemon's life and its guarantees on bad input, with real
// processes: quota, streaming of tensors larger than any message, the
// unmatched recv, unknown work ids, and a clean exit on SIGTERM.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/element.h"
#include "gtest/gtest.h"
#include "tests/testing/client_wire.h"
#include "tests/testing/local_cluster.h"

namespace ccl {
namespace {

using client::FillKind;
using client::Op;
using std::chrono::milliseconds;
using std::chrono::seconds;

client::TensorSpec Float32(const std::string& name, int64_t numel) {
  return client::TensorSpec{name, DType::kFloat32, {numel}, Device{}};
}

std::unique_ptr<testing::LocalCluster> StartCluster(
    std::vector<std::string> worker_args) {
  testing::LocalClusterOptions options;
  options.workers = 2;
  options.worker_args = std::move(worker_args);
  auto cluster = testing::LocalCluster::Start(options);
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return cluster.ok() ? *std::move(cluster) : nullptr;
}

TEST(WorkerLifecycleTest, QuotaIsResourceExhaustedAndNothingIsLost) {
  auto cluster = StartCluster({"--quota-bytes", "1048576"});
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Client();
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE(
      (*client)->Alloc(0, Float32("keep", 1024), {FillKind::kOnes}).ok());
  auto over = (*client)->Alloc(0, Float32("big", 1 << 20));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("quota"), std::string::npos)
      << over.status();
  // Still healthy, the other tensor intact, and smaller allocations work.
  auto summary = (*client)->Summarize(0, "keep", 4);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->sum, 1024.0);
  EXPECT_TRUE((*client)->Alloc(0, Float32("small", 1024)).ok());
  auto list = (*client)->List(0);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->tensors.size(), 2u);
  EXPECT_EQ(list->bytes_in_use, 8192);
  EXPECT_EQ(list->quota_bytes, 1048576);
}

TEST(WorkerLifecycleTest, TensorsLargerThanAnyMessageStreamInChunks) {
  auto cluster = StartCluster({});
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Client();
  ASSERT_TRUE(client.ok());
  // 64 MiB: four times the largest message the worker accepts.
  const int64_t n = 16 << 20;
  ASSERT_TRUE((*client)->Alloc(1, Float32("big", n)).ok());
  std::string bytes(n * 4, '\0');
  for (int64_t i = 0; i < n; ++i)
    StoreElement(DType::kFloat32, bytes.data(), i, i % 1000);
  auto written = (*client)->Write(1, "big", 0, bytes);
  ASSERT_TRUE(written.ok()) << written.status();
  auto read = (*client)->Read(1, "big", 0, 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == bytes);
  // A slice reads only its range.
  auto slice = (*client)->Read(1, "big", 999, 3);
  ASSERT_TRUE(slice.ok());
  ASSERT_EQ(slice->size(), 12u);
  EXPECT_EQ(LoadElement(DType::kFloat32, slice->data(), 0), 999);
  EXPECT_EQ(LoadElement(DType::kFloat32, slice->data(), 1), 0);
  // Out of range is refused, not truncated.
  EXPECT_FALSE((*client)->Read(1, "big", n, 1).ok());
  EXPECT_FALSE((*client)->Write(1, "big", n * 4 - 2, "abcd").ok());

  // On the wire: the first chunk says how many bytes the whole read
  // carries (the reader sizes its buffer once), the others do not.
  testing::ClientWire wire(**client);
  auto stub = wire.Worker(1);
  ASSERT_TRUE(stub.ok());
  v1::ReadTensorRequest request;
  request.set_name("big");
  request.set_offset(10);
  request.set_count((3 << 20) / 4 + 5);  // three chunks and a bit
  auto context = wire.Context();
  auto reader = (*stub)->ReadTensor(context.get(), request);
  v1::ReadTensorChunk chunk;
  std::vector<int64_t> totals;
  std::string streamed;
  while (reader->Read(&chunk)) {
    totals.push_back(chunk.total_bytes());
    streamed += chunk.data();
  }
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_EQ(totals.size(), 4u);
  EXPECT_EQ(totals[0], request.count() * 4);
  EXPECT_EQ(totals[1] + totals[2] + totals[3], 0);
  EXPECT_TRUE(streamed == bytes.substr(40, request.count() * 4));

  // Several ranks at once, each at its own offset, from the caller's bytes.
  for (const auto& r : (*client)->Alloc({0, 1}, Float32("pair", 4))) {
    ASSERT_TRUE(r.result.ok()) << r.result.status();
  }
  const std::string first(8, '\x11'), second(12, '\x22');
  auto pair = (*client)->Write({{0, "pair", 0, first}, {1, "pair", 4, second}});
  ASSERT_EQ(pair.size(), 2u);
  for (const auto& r : pair) ASSERT_TRUE(r.result.ok()) << r.result.status();
  auto back0 = (*client)->Read(0, "pair", 0, 0);
  auto back1 = (*client)->Read(1, "pair", 0, 0);
  ASSERT_TRUE(back0.ok() && back1.ok());
  EXPECT_TRUE(*back0 == first + std::string(8, '\0'));
  EXPECT_TRUE(*back1 == std::string(4, '\0') + second);
}

TEST(WorkerLifecycleTest, UnmatchedRecvFailsInBoundedTimeAndTheWorkerServes) {
  auto cluster = StartCluster({"--op-timeout-ms", "60000"});
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Client(seconds(10));
  ASSERT_TRUE(client.ok());
  for (int r = 0; r < 2; ++r)
    ASSERT_TRUE((*client)->Alloc(r, Float32("t", 3)).ok());
  // The tutorial's trap: rank 1 receives from a rank 0 that never sends.
  Op recv;
  recv.kind = OpKind::kRecv;
  recv.input = "t";
  recv.peer = 0;
  recv.timeout = milliseconds(1500);
  const auto start = std::chrono::steady_clock::now();
  auto results = (*client)->PointToPoint({{1, recv}});
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].result.ok()) << results[0].result.status();  // nop
  EXPECT_EQ(results[1].result.status().code(),
            absl::StatusCode::kDeadlineExceeded)
      << results[1].result.status();
  EXPECT_NE(results[1].result.status().message().find("recv"),
            std::string::npos);
  EXPECT_LT(elapsed, seconds(8));
  // The worker is up, its tensors intact, and it answers.
  auto info = (*client)->Info(1);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->tensor_count, 1);
  EXPECT_TRUE((*client)->Summarize(1, "t", 3).ok());
}

// Used to end rank 0's process from inside Gloo (a peer sent more bytes
// than it had posted); now every rank refuses with the difference named.
TEST(WorkerLifecycleTest, ShapeMismatchAcrossRanksIsInvalidArgumentNotACrash) {
  auto cluster = StartCluster({});
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Client(seconds(10));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Alloc(0, Float32("x", 4), {FillKind::kOnes}).ok());
  ASSERT_TRUE((*client)->Alloc(1, Float32("x", 8), {FillKind::kOnes}).ok());
  Op op;
  op.kind = OpKind::kAllReduce;
  op.input = "x";
  for (const auto& r : (*client)->Collective(op)) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kInvalidArgument)
        << r.rank << ": " << r.result.status();
    EXPECT_NE(r.result.status().message().find("8 float32"), std::string::npos)
        << r.result.status();
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(cluster->worker(r).running()) << "rank " << r << " died";
    auto summary = (*client)->Summarize(r, "x", 1);
    ASSERT_TRUE(summary.ok()) << summary.status();
    ASSERT_FALSE(summary->head.empty());
    EXPECT_EQ(summary->head[0], 1.0);  // untouched
  }
  op.kind = OpKind::kBarrier;
  for (const auto& r : (*client)->Collective(op)) {
    EXPECT_TRUE(r.result.ok()) << r.rank << ": " << r.result.status();
  }
}

// `ccctl debug ops` lines the ranks' flight recorders up while a recv waits
// for a send that never comes, and names the missing send.
TEST(WorkerLifecycleTest, DebugOpsNamesTheMissingSend) {
  auto cluster = StartCluster({});
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Client(seconds(10));
  ASSERT_TRUE(client.ok());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE((*client)->Alloc(r, Float32("t", 3)).ok());
  }
  Op barrier;
  barrier.kind = OpKind::kBarrier;
  for (const auto& r : (*client)->Collective(barrier)) {
    ASSERT_TRUE(r.result.ok()) << r.result.status();
  }
  Op recv;
  recv.kind = OpKind::kRecv;
  recv.input = "t";
  recv.peer = 0;
  recv.async = true;
  recv.timeout = milliseconds(20000);
  for (const auto& r : (*client)->PointToPoint({{1, recv}})) {
    ASSERT_TRUE(r.result.ok()) << r.result.status();
  }
  auto ccctl = testing::BinaryPath("ccctl");
  ASSERT_TRUE(ccctl.ok()) << ccctl.status();
  const std::string command =
      absl::StrCat(*ccctl, " --coordinator ", cluster->coordinator_address(),
                   " -o json debug ops 2>&1");
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) {
    output.append(buffer, n);
  }
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_NE(output.find("rank 1 waits in seq 1 recv of 3 float32 from 0"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("rank 0 posted no send at that seq"), std::string::npos)
      << output;
}

TEST(WorkerLifecycleTest, AsyncWorkIdsTestWaitAndUnknownIds) {
  auto cluster = StartCluster({});
  ASSERT_NE(cluster, nullptr);
  auto client = cluster->Client();
  ASSERT_TRUE(client.ok());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        (*client)->Alloc(r, Float32("a", 1000), {FillKind::kRankPlusOne}).ok());
  }
  Op op;
  op.kind = OpKind::kAllReduce;
  op.input = "a";
  op.async = true;
  auto results = (*client)->Collective(op);
  for (const auto& r : results) {
    ASSERT_TRUE(r.result.ok()) << r.result.status();
    EXPECT_GT(r.result->work_id, 0);
    auto tested = (*client)->Test(r.rank, r.result->work_id);
    ASSERT_TRUE(tested.ok());
    auto waited = (*client)->Wait(r.rank, r.result->work_id, seconds(10));
    ASSERT_TRUE(waited.ok()) << waited.status();
    EXPECT_EQ(waited->state, client::WorkState::kCompleted);
    EXPECT_EQ(waited->kind, OpKind::kAllReduce);
    EXPECT_GT(waited->timing.total_us, 0);
    // A waited work is forgotten.
    EXPECT_EQ(
        (*client)->Wait(r.rank, r.result->work_id, seconds(1)).status().code(),
        absl::StatusCode::kNotFound);
  }
  EXPECT_EQ((*client)->Test(0, 987654).status().code(),
            absl::StatusCode::kNotFound);
  auto summary = (*client)->Summarize(0, "a", 1);
  ASSERT_TRUE(summary.ok());
  ASSERT_FALSE(summary->head.empty());
  EXPECT_EQ(summary->head[0], 3.0);
}

TEST(WorkerLifecycleTest, SigtermDeregistersAndExitsZero) {
  auto cluster = StartCluster({});
  ASSERT_NE(cluster, nullptr);
  ASSERT_TRUE(cluster->worker(1).Signal(SIGTERM).ok());
  auto exit = cluster->worker(1).WaitForExit(seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited) << exit->ToString();
  EXPECT_EQ(exit->code, 0) << exit->ToString();
  auto client = cluster->Client();
  ASSERT_TRUE(client.ok());
  const client::World& world = (*client)->world();
  EXPECT_EQ(world.state, client::WorldState::kDegraded);
  bool listed = false;
  for (const auto& member : world.members) {
    if (member.rank != 1) continue;
    listed = true;
    EXPECT_EQ(member.state, client::MemberState::kLeft);
  }
  EXPECT_TRUE(listed) << world.members.size() << " members";
  // The other worker is still up.
  EXPECT_TRUE((*client)->Info(0).ok());
}

// The signals a process ignores, from /proc (a bit per signal, hex).
bool IgnoresSignal(pid_t pid, int signal) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigIgn:", 0) != 0) continue;
    uint64_t mask = 0;
    std::istringstream in(line.substr(7));
    in >> std::hex >> mask;
    return (mask >> (signal - 1)) & 1;
  }
  ADD_FAILURE() << "no SigIgn line for pid " << pid;
  return false;
}

// A peer that died makes Gloo write to a closed socket; that must be an
// error, not a SIGPIPE that kills the survivor. The harness starts every
// daemon with SIGPIPE at its default, so this is the daemons' own doing.
TEST(WorkerLifecycleTest, DaemonsIgnoreSigpipe) {
  auto cluster = StartCluster({});
  ASSERT_NE(cluster, nullptr);
  EXPECT_TRUE(IgnoresSignal(cluster->coordinator().pid(), SIGPIPE));
  EXPECT_TRUE(IgnoresSignal(cluster->worker(0).pid(), SIGPIPE));
  EXPECT_TRUE(IgnoresSignal(cluster->worker(1).pid(), SIGPIPE));
}

// Whatever kills a worker anyway leaves the reason in its log: the signal
// and a symbolized stack.
TEST(WorkerLifecycleTest, AFatalSignalLeavesTheSignalAndAStackInTheLog) {
  auto cluster = StartCluster({});
  ASSERT_NE(cluster, nullptr);
  ASSERT_TRUE(cluster->worker(1).Signal(SIGSEGV).ok());
  auto exit = cluster->worker(1).WaitForExit(seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_FALSE(exit->exited) << exit->ToString();
  EXPECT_EQ(exit->signal, SIGSEGV) << exit->ToString();
  const std::string log = cluster->worker(1).ReadLog();
  EXPECT_NE(log.find("SIGSEGV"), std::string::npos) << log;
  // abseil's handler prints one "@ <address> <size> <symbol>" line a frame:
  // several frames, some of them named.
  int frames = 0;
  int named = 0;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find("@ ");
    if (at == std::string::npos || line.find("0x", at) == std::string::npos) {
      continue;
    }
    ++frames;
    if (line.size() < 9 || line.compare(line.size() - 9, 9, "(unknown)") != 0) {
      ++named;
    }
  }
  EXPECT_GE(frames, 3) << log;
  EXPECT_GE(named, 1) << log;
  // The other worker is still up.
  auto client = cluster->Client();
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->Info(0).ok());
}

}  // namespace
}  // namespace ccl
