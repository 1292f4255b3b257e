// The client library against real processes: plans (consecutive ops in one
// request per rank), and sequence numbers reserved ahead and given back so
// that no other client's op waits on them. The workers' gap timeout is set
// far beyond every op's own timeout, so an op that waited on a seq nobody
// gave back fails with its own DEADLINE_EXCEEDED instead of passing late.
#include <signal.h>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/local_cluster.h"
#include "tests/testing/subprocess.h"

namespace ccl {
namespace {

using client::ClusterClient;
using client::Op;
using client::Plan;
using client::PlanStep;
using client::TensorSpec;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int kWorkers = 2;
// Long enough for any op on a busy machine; far shorter than the gap timeout.
constexpr milliseconds kOpTimeout = seconds(30);

class ClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::LocalClusterOptions options;
    options.workers = kWorkers;
    options.worker_args = {"--seq-gap-timeout-ms", "600000"};
    auto cluster = testing::LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_NE(cluster_, nullptr); }
  void TearDown() override {
    if (HasFailure()) cluster_->DumpLogsOnFailure();
  }

  static std::unique_ptr<ClusterClient> Client() {
    auto client = cluster_->Client();
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  // Float32 `name` of `n` elements holding rank + 1 on every rank.
  static void Alloc(ClusterClient& on, const std::string& name, int64_t n) {
    (void)on.Free(on.AllRanks(), name);
    for (const auto& r :
         on.Alloc(on.AllRanks(), TensorSpec{name, DType::kFloat32, {n}},
                  client::Fill{client::FillKind::kRankPlusOne})) {
      ASSERT_TRUE(r.result.ok()) << r.result.status();
    }
  }

  static std::vector<double> Head(ClusterClient& on, int rank,
                                  const std::string& name) {
    auto summary = on.Summarize(rank, name, 4);
    EXPECT_TRUE(summary.ok()) << summary.status();
    return summary.ok() ? summary->head : std::vector<double>();
  }

  static Op AllReduce(const std::string& tensor) {
    Op op;
    op.kind = OpKind::kAllReduce;
    op.input = tensor;
    op.timeout = kOpTimeout;
    return op;
  }

  static void ExpectAllOk(const client::RankResults<client::OpResult>& all) {
    ASSERT_EQ(all.size(), static_cast<size_t>(kWorkers));
    for (const auto& r : all) {
      EXPECT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
  }

  static testing::LocalCluster* cluster_;
};

testing::LocalCluster* ClientTest::cluster_ = nullptr;

TEST_F(ClientTest, APlanRunsItsStepsInOrderAtConsecutiveSeqs) {
  auto client = Client();
  ASSERT_NE(client, nullptr);
  Alloc(*client, "plan.x", 4);
  Op broadcast = AllReduce("plan.x");
  broadcast.kind = OpKind::kBroadcast;
  broadcast.root = 1;
  Op send = AllReduce("plan.x"), recv = AllReduce("plan.x");
  send.kind = OpKind::kSend;
  send.peer = 1;
  recv.kind = OpKind::kRecv;
  recv.peer = 0;
  Plan plan;
  // x = 1 on rank 0, 2 on rank 1; all_reduce: 3 on both; broadcast from 1
  // and 0's send to 1 keep 3; all_reduce: 6 on both.
  plan.steps = {PlanStep::Collective(AllReduce("plan.x")),
                PlanStep::Collective(broadcast),
                PlanStep::PointToPoint({{0, send}, {1, recv}}),
                PlanStep::Collective(AllReduce("plan.x"))};
  const auto results = client->SubmitPlan(plan);
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorkers));
  for (const auto& r : results) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
    EXPECT_FALSE(r.result->emulated) << "the workers have SubmitPlan";
    ASSERT_EQ(r.result->steps.size(), plan.steps.size());
    for (size_t k = 0; k < r.result->steps.size(); ++k) {
      const client::WorkStatus& step = r.result->steps[k];
      EXPECT_TRUE(step.error.ok()) << "step " << k << ": " << step.error;
      EXPECT_EQ(step.state, client::WorkState::kCompleted) << "step " << k;
      EXPECT_EQ(step.seq, r.result->first_seq + static_cast<int64_t>(k));
    }
  }
  for (int rank = 0; rank < kWorkers; ++rank) {
    EXPECT_EQ(Head(*client, rank, "plan.x"), (std::vector<double>{6, 6, 6, 6}))
        << "rank " << rank;
  }
}

// The workers check every op of a plan before running any: one that cannot
// run refuses the whole plan, which still takes its seqs.
TEST_F(ClientTest, ARefusedPlanRunsNothingAndLeavesNoGap) {
  auto client = Client();
  ASSERT_NE(client, nullptr);
  Alloc(*client, "plan.y", 2);
  Plan plan;
  plan.steps = {PlanStep::Collective(AllReduce("plan.y")),
                PlanStep::Collective(AllReduce("plan.no.such.tensor")),
                PlanStep::Collective(AllReduce("plan.y"))};
  for (const auto& r : client->SubmitPlan(plan)) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kNotFound)
        << "rank " << r.rank << ": " << r.result.status();
    EXPECT_NE(r.result.status().message().find("op 1 of the plan"),
              std::string::npos)
        << r.result.status();
  }
  // No gap to wait on, and nothing of the plan ran: 1 + 2 once.
  ExpectAllOk(client->Collective(AllReduce("plan.y")));
  EXPECT_EQ(Head(*client, 0, "plan.y"), (std::vector<double>{3, 3}));
}

// A plan one rank refuses for its own tensors (rank 1 lacks one: a
// restarted worker lost it) fails on the rank that accepted it too, naming
// rank 1, with nothing run; the world is not aborted, and the next op runs
// in the same generation.
TEST_F(ClientTest, APlanOneRankRefusesFailsOnEveryRankAndTheWorldGoesOn) {
  auto client = Client();
  ASSERT_NE(client, nullptr);
  Alloc(*client, "plan.w", 2);
  (void)client->Free(client->AllRanks(), "plan.only0");
  ASSERT_TRUE(client
                  ->Alloc(0, TensorSpec{"plan.only0", DType::kFloat32, {2}},
                          client::Fill{client::FillKind::kRankPlusOne})
                  .ok());
  const auto before = client->Collective(AllReduce("plan.w"));
  ExpectAllOk(before);
  ASSERT_TRUE(before[0].result.ok());
  Plan plan;
  plan.steps = {PlanStep::Collective(AllReduce("plan.w")),
                PlanStep::Collective(AllReduce("plan.only0"))};
  const auto results = client->SubmitPlan(plan);
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].result.status().code(), absl::StatusCode::kNotFound)
      << results[1].result.status();
  // Rank 0 accepted the plan: its answer is the plan's steps, the first
  // failed in the agreement, naming rank 1.
  ASSERT_TRUE(results[0].result.ok()) << results[0].result.status();
  ASSERT_EQ(results[0].result->steps.size(), 2u);
  const absl::Status& first = results[0].result->steps[0].error;
  EXPECT_EQ(first.code(), absl::StatusCode::kFailedPrecondition) << first;
  EXPECT_NE(first.message().find("refused at rank 1"), std::string::npos)
      << first;
  EXPECT_FALSE(results[0].result->steps[1].error.ok());
  // Rank 0's flight recorder holds each of the plan's ops, failed. Both
  // carry the plan's one reason here (nothing ran), so this does not tell
  // the ops' own results apart; tests/unit/plan_work_test.cc does.
  const auto logs = client->OpLogs({0}, "", 2);
  ASSERT_EQ(logs.size(), 1u);
  ASSERT_TRUE(logs[0].result.ok()) << logs[0].result.status();
  ASSERT_EQ(logs[0].result->records.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& record = logs[0].result->records[i];
    EXPECT_EQ(record.input, i == 0 ? "plan.w" : "plan.only0");
    EXPECT_EQ(record.state, client::WorkState::kFailed);
    EXPECT_EQ(record.error.message(),
              results[0].result->steps[i].error.message());
  }
  const auto after = client->Collective(AllReduce("plan.w"));
  ExpectAllOk(after);
  ASSERT_TRUE(after[0].result.ok());
  EXPECT_EQ(after[0].result->generation, before[0].result->generation);
  // 1 + 2, then twice that: the plan's all_reduce did not run.
  EXPECT_EQ(Head(*client, 0, "plan.w"), (std::vector<double>{6, 6}));
  (void)client->Free(0, "plan.only0");
}

TEST_F(ClientTest, ABadStepIsRefusedBeforeAnySeqIsTaken) {
  auto client = Client();
  ASSERT_NE(client, nullptr);
  Op outside = AllReduce("x");
  outside.kind = OpKind::kBroadcast;
  outside.root = kWorkers;  // not a rank
  Plan plan;
  plan.steps = {PlanStep::Collective(AllReduce("x")),
                PlanStep::Collective(outside)};
  for (const auto& r : client->SubmitPlan(plan)) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.result.status().message().find("plan step 1"),
              std::string::npos)
        << r.result.status();
  }
  EXPECT_EQ(client->SubmitPlan(Plan{}).front().result.status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Client A runs ops until it holds seqs reserved ahead, then stops; client
// B's op comes after A's range and runs once A gives the rest back (after
// its linger, with A still alive, and again when A is destroyed).
TEST_F(ClientTest, ReservedSeqsGoBackSoOtherClientsNeverWaitOnThem) {
  auto a = Client();
  auto b = Client();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Alloc(*a, "seq.a", 2);
  for (int i = 0; i < 6; ++i) ExpectAllOk(a->Collective(AllReduce("seq.a")));
  // A reserved 1 + 2 + 4 seqs for its 6 ops (the 8 of the next range is
  // not taken yet): it holds one nobody will use unless it gives it back.
  ExpectAllOk(b->Collective(AllReduce("seq.a")));
  ExpectAllOk(a->Collective(AllReduce("seq.a")));  // a fresh range
  a.reset();
  ExpectAllOk(b->Collective(AllReduce("seq.a")));
}

// A client killed with -9 while it holds reserved seqs it never sent (a
// script killed mid-loop): another client's op runs at once, not after the
// workers' gap timeout (600 s here, far past the op's own timeout), since
// the coordinator ends the dead client's lease and the workers skip its
// seqs. Both orders: the kill before the op, and the op waiting on the
// dead client's seqs when the kill comes.
TEST_F(ClientTest, AClientKilledHoldingSeqsDoesNotStallTheOthers) {
  auto b = Client();
  ASSERT_NE(b, nullptr);
  Alloc(*b, "lease.x", 2);
  auto holder_binary = testing::BinaryPath("hold_seqs");
  ASSERT_TRUE(holder_binary.ok()) << holder_binary.status();
  for (const bool op_waits_first : {false, true}) {
    SCOPED_TRACE(op_waits_first ? "the op waits when the kill comes"
                                : "the kill comes first");
    testing::Subprocess::Options holder_options;
    holder_options.port_file_flag.clear();
    auto holder = testing::Subprocess::Start(
        *holder_binary, {cluster_->coordinator_address(), "world", "64"},
        holder_options);
    ASSERT_TRUE(holder.ok()) << holder.status();
    const auto started = std::chrono::steady_clock::now();
    while ((*holder)->ReadLog().find("reserved ") == std::string::npos) {
      ASSERT_TRUE((*holder)->running()) << (*holder)->ReadLog();
      ASSERT_LT(std::chrono::steady_clock::now() - started, seconds(20))
          << "hold_seqs never reserved: " << (*holder)->ReadLog();
      std::this_thread::sleep_for(milliseconds(10));
    }
    EXPECT_NE((*holder)->ReadLog().find("leased=1"), std::string::npos)
        << (*holder)->ReadLog();
    std::chrono::steady_clock::time_point killed;
    client::RankResults<client::OpResult> results;
    if (op_waits_first) {
      std::thread op([&] { results = b->Collective(AllReduce("lease.x")); });
      // Queued behind the dead client's 64 seqs on both ranks, and asked
      // about (Executor::kGapWatchAfter) before the kill.
      std::this_thread::sleep_for(milliseconds(300));
      killed = std::chrono::steady_clock::now();
      ASSERT_TRUE((*holder)->Signal(SIGKILL).ok());
      op.join();
    } else {
      killed = std::chrono::steady_clock::now();
      ASSERT_TRUE((*holder)->Signal(SIGKILL).ok());
      ASSERT_TRUE((*holder)->WaitForExit(seconds(10)).ok());
      results = b->Collective(AllReduce("lease.x"));
    }
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - killed)
            .count();
    std::cerr << "kill -9 of a client holding 64 seqs to another client's "
                 "answer: "
              << waited << " s" << std::endl;
    ExpectAllOk(results);
    // Ranks hold 1 and 2: the first all_reduce makes 3, the second 6.
    const double want = op_waits_first ? 6.0 : 3.0;
    for (int rank = 0; rank < kWorkers; ++rank) {
      EXPECT_EQ(Head(*b, rank, "lease.x"), std::vector<double>(2, want));
    }
  }
}

TEST_F(ClientTest, ReleaseReservedSequencesGivesThemBackAtOnce) {
  auto a = Client();
  auto b = Client();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  Alloc(*a, "seq.r", 2);
  for (int i = 0; i < 2; ++i) ExpectAllOk(a->Collective(AllReduce("seq.r")));
  a->ReleaseReservedSequences();
  ExpectAllOk(b->Collective(AllReduce("seq.r")));
  // And A carries on with a fresh range.
  ExpectAllOk(a->Collective(AllReduce("seq.r")));
}

// Many clients at once, each in a tight loop: every op completes, in a
// global order the ranks agree on (the tensors end equal everywhere).
TEST_F(ClientTest, ConcurrentClientsWithReservedRangesAllFinish) {
  {
    auto setup = Client();
    ASSERT_NE(setup, nullptr);
    Alloc(*setup, "seq.c", 1);
  }
  constexpr int kClients = 3, kOps = 40;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&] {
      auto mine = Client();
      ASSERT_NE(mine, nullptr);
      Op op = AllReduce("seq.c");
      op.reduce = ReduceOp::kMax;
      for (int i = 0; i < kOps; ++i) ExpectAllOk(mine->Collective(op));
    });
  }
  for (auto& thread : threads) thread.join();
  auto check = Client();
  ASSERT_NE(check, nullptr);
  EXPECT_EQ(Head(*check, 0, "seq.c"), Head(*check, 1, "seq.c"));
}

// Ops travel on one stream per worker: a client with streams and one that
// sends each op as a unary Submit get the same answers, errors included,
// and the same tensors.
TEST_F(ClientTest, OpsOnStreamsAnswerAsUnaryCallsDo) {
  auto streamed = Client();
  ASSERT_NE(streamed, nullptr);
  client::ClientOptions options = streamed->options();
  options.op_streams = false;
  auto unary = ClusterClient::Connect(options);
  ASSERT_TRUE(unary.ok()) << unary.status();
  Alloc(*streamed, "stream.a", 4);
  Alloc(*streamed, "stream.b", 4);
  for (ClusterClient* via : {streamed.get(), unary->get()}) {
    ExpectAllOk(via->Collective(
        AllReduce(via == streamed.get() ? "stream.a" : "stream.b")));
    // An op one worker refuses: each rank's own error, on both paths.
    Op missing = AllReduce("stream.no_such_tensor");
    for (const auto& r : via->Collective(missing)) {
      EXPECT_EQ(r.result.status().code(), absl::StatusCode::kNotFound)
          << r.result.status();
    }
    // Async ops answer at once with a work id, which Wait completes.
    Op async = AllReduce(via == streamed.get() ? "stream.a" : "stream.b");
    async.async = true;
    for (const auto& r : via->Collective(async)) {
      ASSERT_TRUE(r.result.ok()) << r.result.status();
      ASSERT_NE(r.result->work_id, 0);
      auto waited = via->Wait(r.rank, r.result->work_id, kOpTimeout);
      ASSERT_TRUE(waited.ok()) << waited.status();
      EXPECT_EQ(waited->state, client::WorkState::kCompleted);
    }
  }
  // [1, 2] summed twice: 3, then 6, on both paths.
  for (int rank : {0, 1}) {
    EXPECT_EQ(Head(*streamed, rank, "stream.a"), std::vector<double>(4, 6.0));
    EXPECT_EQ(Head(*streamed, rank, "stream.b"), std::vector<double>(4, 6.0));
  }
}

// One client used from several threads at once: each thread's ops go on
// the same streams, one waiting thread at a time takes the answers off the
// queue for all of them, and every op gets its own answer.
TEST_F(ClientTest, ThreadsSharingOneClientEachGetTheirAnswers) {
  auto shared = Client();
  ASSERT_NE(shared, nullptr);
  Alloc(*shared, "stream.t", 1);
  constexpr int kThreads = 4, kOps = 30;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Op op = AllReduce("stream.t");
      op.reduce = ReduceOp::kMax;
      for (int i = 0; i < kOps; ++i) {
        // Every few ops one that fails, so errors and answers interleave.
        if ((i + t) % 7 == 0) {
          for (const auto& r :
               shared->Collective(AllReduce("stream.missing"))) {
            EXPECT_EQ(r.result.status().code(), absl::StatusCode::kNotFound)
                << r.result.status();
          }
        }
        ExpectAllOk(shared->Collective(op));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(Head(*shared, 0, "stream.t"), Head(*shared, 1, "stream.t"));
}

}  // namespace
}  // namespace ccl
