// Failures are diagnosed, not suffered: real processes on 127.0.0.1 are
// killed, stopped and restarted under the ops, and every test asserts the
// error a user sees, that it comes in bounded time, and that the world
// carries on with every survivor's tensors. The same tests run on NCCL
// (failure_nccl_test, label gpu) with CUDA workers.
#include <mutex>
#include <numeric>

#include "absl/strings/str_join.h"
#include "common/world_keys.h"
#include "coordinator/client/coordinator_client.h"
#include "tests/integration/failure_fixture.h"

namespace ccl::failure_testing {
namespace {

// The torch.distributed nightmare: a rank dies in the middle of a large
// collective. Every survivor's op fails in bounded time with the dead rank
// named, nobody hangs, a restarted worker takes the rank, the world
// re-forms at a new generation and computes correctly, and survivors keep
// their tensors. Twenty times, killing a different rank each time.
TEST_F(FailureTest, KillDuringLargeAllReduceRecoversEveryTime) {
  const int repeats = Repeats(20);
  // CPU: 64 MiB per rank (hundreds of ms through Gloo on loopback);
  // GPU: 1 GiB.
  const int64_t n = kCuda ? (int64_t{1} << 28) : (int64_t{1} << 24);
  for (int r = 0; r < kWorkers; ++r) AllocKeep(r);
  std::mt19937 rng(1234);
  int failed_ops = 0;
  for (int rep = 0; rep < repeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repeat ", rep));
    auto client = Client(seconds(10));
    ASSERT_NE(client, nullptr);
    const int64_t generation = client->world().generation;
    const int victim = rep % kWorkers;
    for (int r = 0; r < kWorkers; ++r) {
      (void)client->Free(r, "big");
      ASSERT_TRUE(
          AllocOnDevice(*client, r, "big", n, FillKind::kRankPlusOne).ok());
    }
    const std::vector<int64_t> work_ids =
        SubmitAsyncAllReduceWithout(*client, victim, "big", generation);
    if (HasFailure()) return;
    std::this_thread::sleep_for(milliseconds(rng() % 40));
    const auto killed_at = Clock::now();
    ASSERT_NO_FATAL_FAILURE(KillWorker(victim));

    for (int r = 0; r < kWorkers; ++r) {
      if (r == victim) continue;
      auto waited = client->Wait(r, work_ids[r], kOpBound);
      const auto took = Clock::now() - killed_at;
      EXPECT_LT(took, kOpBound) << "rank " << r;
      ASSERT_THAT(waited.status().message(),
                  ::testing::Not(HasSubstr("still running")))
          << "rank " << r << " hung: " << waited.status();
      if (waited.ok()) continue;  // finished before the kill reached it
      ++failed_ops;
      EXPECT_THAT(waited.status().code(),
                  AnyOf(absl::StatusCode::kUnavailable,
                        absl::StatusCode::kDeadlineExceeded,
                        absl::StatusCode::kAborted))
          << waited.status();
      EXPECT_THAT(waited.status().message(), HasSubstr("all_reduce"));
      EXPECT_TRUE(cluster_->worker(r).running()) << "rank " << r << " died";
    }

    ASSERT_TRUE(cluster_->RestartWorker(victim).ok());
    auto ready = cluster_->WaitUntilReady(kRecovery, generation + 1);
    ASSERT_TRUE(ready.ok()) << ready.status();
    // One re-form per kill: the survivors' request for a new generation
    // (their communicators broke) waits until the dead rank is lost, and
    // the replacement's arrival starts the only one.
    EXPECT_EQ(*ready, generation + 1);
    for (int r = 0; r < kWorkers; ++r) {
      if (r != victim) ExpectKeep(r);
    }
    AllocKeep(victim);
    ExpectCorrectAllReduce("check");
    if (HasFatalFailure()) return;
  }
  // A kill that lands after the op finished everywhere proves nothing; most
  // must land inside it.
  EXPECT_GE(failed_ops, repeats) << "the kills mostly missed the op";
}

// A stopped (not dead) worker: the others' op times out naming it, the
// coordinator declares it lost, and when it resumes it re-registers and the
// world re-forms around it with its tensors.
TEST_F(FailureTest, SigstopNamesTheStoppedRankAndTheWorldReforms) {
  for (int r = 0; r < kWorkers; ++r) AllocKeep(r);
  const int stopped = kWorkers - 1;
  auto client = Client(seconds(3));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  for (int r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(AllocOnDevice(*client, r, "x", 1 << 16, FillKind::kOnes).ok());
  }
  // Its heartbeats' progress reaches the coordinator's store (the others'
  // diagnosis reads it) within a beat or two of the world forming.
  auto coordinator = CoordinatorClient::Connect(cluster_->coordinator_address(),
                                                milliseconds(3000));
  bool reported = false;
  for (auto until = Clock::now() + seconds(10);
       !reported && Clock::now() < until;
       std::this_thread::sleep_for(milliseconds(20))) {
    reported =
        coordinator->KvGet(generation, ProgressKey("world", stopped)).ok();
  }
  ASSERT_TRUE(reported) << "rank " << stopped << " never reported progress";
  ASSERT_TRUE(cluster_->worker(stopped).Signal(SIGSTOP).ok());
  const auto start = Clock::now();
  auto results = client->Collective(AllReduce("x"));
  for (const auto& r : results) {
    if (r.rank == stopped) {
      // Its op waits on a stopped process until the client gives up on it
      // (the op stream's own deadline; the worker answers later, to no one).
      EXPECT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
          << r.result.status();
      continue;
    }
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r.rank << ": " << r.result.status();
    EXPECT_THAT(r.result.status().message(), HasSubstr("all_reduce"));
    EXPECT_THAT(r.result.status().message(), HasSubstr("seq"));
    EXPECT_THAT(r.result.status().message(),
                HasSubstr(absl::StrCat("rank ", stopped,
                                       " of group world never "
                                       "reached seq")))
        << r.result.status();
    // Where it was, from its heartbeats through the coordinator's store.
    EXPECT_THAT(r.result.status().message(),
                HasSubstr(absl::StrCat("last heartbeats: rank ", stopped,
                                       " had finished")))
        << r.result.status();
  }
  // The call returns when its slowest rank does: the stopped one, whose
  // RPC runs into the client's deadline.
  EXPECT_LT(Clock::now() - start, kOpBound + seconds(5));
  // Lost after the heartbeat timeout.
  bool lost = false;
  for (auto deadline = Clock::now() + seconds(15); Clock::now() < deadline;) {
    auto status = Client(seconds(3));
    if (status && status->world().state == client::WorldState::kDegraded) {
      lost = true;
      break;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(lost) << "the stopped rank was never declared lost";
  ASSERT_TRUE(cluster_->worker(stopped).Signal(SIGCONT).ok());
  auto ready = cluster_->WaitUntilReady(kRecovery, generation + 1);
  if (!ready.ok()) DumpStacks();
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(*ready, generation + 1) << "one stop, one re-form";
  for (int r = 0; r < kWorkers; ++r) ExpectKeep(r);
  ExpectCorrectAllReduce("check");
}

// A worker stopped in the middle of a large all_reduce, long enough that
// its peers time out and close their connections, then resumed: its
// transport writes to sockets nobody reads any more. That is an error for
// the op, never a SIGPIPE that ends the process (it died that way in about
// 2 of 5 rounds before the daemons ignored SIGPIPE); it re-joins the world
// with its tensors and the next op is correct.
TEST_F(FailureTest, ResumedMidOpAfterPeersGaveUpTheWorkerLivesOn) {
  const int repeats = std::max(1, Repeats(20) / 4);
  const int64_t n = kCuda ? (int64_t{1} << 28) : (int64_t{1} << 24);
  for (int r = 0; r < kWorkers; ++r) AllocKeep(r);
  for (int rep = 0; rep < repeats; ++rep) {
    SCOPED_TRACE(absl::StrCat("repeat ", rep));
    const int victim = rep % kWorkers;
    auto client = Client(seconds(10));
    ASSERT_NE(client, nullptr);
    const int64_t generation = client->world().generation;
    // A fresh name each round: the victim's op of the last round may still
    // hold its tensor until that op's own timeout ends it.
    const std::string big = absl::StrCat("big", rep);
    for (int r = 0; r < kWorkers; ++r) {
      if (rep > 0) (void)client->Free(r, absl::StrCat("big", rep - 1));
      auto allocated =
          AllocOnDevice(*client, r, big, n, FillKind::kRankPlusOne);
      ASSERT_TRUE(allocated.ok()) << "rank " << r << ": " << allocated.status();
    }
    const std::vector<int64_t> work_ids =
        SubmitAsyncAllReduceWithout(*client, victim, big, generation);
    if (HasFailure()) return;
    std::this_thread::sleep_for(milliseconds(50));
    ASSERT_TRUE(cluster_->worker(victim).Signal(SIGSTOP).ok());
    // The survivors give up on the op (and close their connections).
    for (int r = 0; r < kWorkers; ++r) {
      if (r == victim) continue;
      auto waited = client->Wait(r, work_ids[r], kOpBound);
      EXPECT_THAT(waited.status().message(),
                  ::testing::Not(HasSubstr("still running")))
          << "rank " << r << " hung: " << waited.status();
    }
    ASSERT_TRUE(cluster_->worker(victim).Signal(SIGCONT).ok());
    auto ready = cluster_->WaitUntilReady(kRecovery, generation + 1);
    ASSERT_TRUE(ready.ok()) << ready.status();
    for (int r = 0; r < kWorkers; ++r) {
      ASSERT_TRUE(cluster_->worker(r).running())
          << "rank " << r << " died: " << cluster_->worker(r).ReadLog();
      ExpectKeep(r);
    }
    ExpectCorrectAllReduce("check");
    if (HasFatalFailure()) return;
  }
}

// The seed tutorial's trap: rank 1 receives from a rank 0 that never sends.
// It fails in bounded time pointing at the missing send; the broken
// communicator is rebuilt (a new generation) and the next collective works.
TEST_F(FailureTest, LoneRecvFailsClearlyAndTheNextCollectiveWorks) {
  auto client = Client(seconds(10));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  for (int r = 0; r < kWorkers; ++r) AllocKeep(r);
  ASSERT_TRUE(AllocOnDevice(*client, 1, "t", 3, FillKind::kZeros).ok());
  client::Op recv;
  recv.kind = OpKind::kRecv;
  recv.input = "t";
  recv.peer = 0;
  recv.timeout = milliseconds(1500);
  const auto start = Clock::now();
  auto results = client->PointToPoint({{1, recv}});
  EXPECT_LT(Clock::now() - start, seconds(10));
  ASSERT_EQ(results.size(), static_cast<size_t>(kWorkers));
  for (const auto& r : results) {
    if (r.rank != 1) continue;
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << r.result.status();
    EXPECT_THAT(r.result.status().message(), HasSubstr("send"));
  }
  // Both backends drop the connection a timed-out recv was waiting on, so
  // the world re-forms at a new generation (tensors kept), and the next
  // collective there is correct.
  auto ready = cluster_->WaitUntilReady(kRecovery, generation + 1);
  ASSERT_TRUE(ready.ok()) << ready.status();
  ExpectCorrectAllReduce("check");
  for (int r = 0; r < kWorkers; ++r) ExpectKeep(r);
}

// Issue 42: the op after a failure just works. A lone recv breaks rank 1's
// communicator; the very next all_reduce, from the same client and from a
// fresh one (a user's next command), succeeds with the right sum and no
// retry: the broken rank seals its generation at the coordinator before its
// error reaches the caller, so the client's sequence reservation is refused
// as "re-forming" and the client waits for the next generation within the
// op's own timeout, telling the caller in one line why it waited.
TEST_F(FailureTest, TheOpAfterALoneRecvJustWorks) {
  const int repeats = Repeats(2);
  const int world = kWorkers;
  const double expected = world * (world + 1) / 2.0;
  // From the recv's failure to the next op's answer, for the note
  // (printed, not asserted: speed is for benchmarks).
  std::vector<double> recovery_s;
  for (int attempt = 0; attempt < repeats; ++attempt) {
    SCOPED_TRACE(absl::StrCat("attempt ", attempt));
    for (bool fresh_client : {false, true}) {
      SCOPED_TRACE(fresh_client ? "a fresh client's op"
                                : "the same client's op");
      std::vector<std::string> reform_lines;
      std::mutex lines_mutex;
      client::ClientOptions options;
      options.timeout = seconds(30);
      options.on_reform = [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(lines_mutex);
        reform_lines.push_back(line);
      };
      auto connected = cluster_->Client(options);
      ASSERT_TRUE(connected.ok()) << connected.status();
      std::unique_ptr<ClusterClient> client = *std::move(connected);
      const int64_t generation = client->world().generation;
      for (int r = 0; r < world; ++r) {
        (void)client->Free(r, "x");
        ASSERT_TRUE(
            AllocOnDevice(*client, r, "x", 1000, FillKind::kRankPlusOne).ok());
      }
      (void)client->Free(1, "t");
      ASSERT_TRUE(AllocOnDevice(*client, 1, "t", 3, FillKind::kZeros).ok());
      client::Op recv;
      recv.kind = OpKind::kRecv;
      recv.input = "t";
      recv.peer = 0;
      recv.timeout = milliseconds(1500);
      auto recv_results = client->PointToPoint({{1, recv}});
      for (const auto& r : recv_results) {
        if (r.rank != 1) continue;
        ASSERT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
            << r.result.status();
      }
      const auto failed_at = Clock::now();
      std::unique_ptr<ClusterClient> next;
      if (fresh_client) {
        auto fresh = cluster_->Client(options);
        ASSERT_TRUE(fresh.ok()) << fresh.status();
        next = *std::move(fresh);
      }
      ClusterClient& runner = fresh_client ? *next : *client;
      // No wait, no retry: the op itself must succeed.
      for (const auto& r : runner.Collective(AllReduce("x"))) {
        ASSERT_TRUE(r.result.ok())
            << "rank " << r.rank << ": " << r.result.status();
      }
      recovery_s.push_back(
          std::chrono::duration<double>(Clock::now() - failed_at).count());
      std::vector<int> ranks(world);
      std::iota(ranks.begin(), ranks.end(), 0);
      ASSERT_NO_FATAL_FAILURE(ExpectEveryElement(runner, "x", ranks, expected));
      EXPECT_GT(runner.world().generation, generation);
      std::lock_guard<std::mutex> lock(lines_mutex);
      // The same client still holds the broken generation, so it must have
      // waited; a fresh one may connect after the world already moved on.
      if (fresh_client) {
        ASSERT_LE(reform_lines.size(), 1u) << absl::StrJoin(reform_lines, "\n");
      } else {
        ASSERT_EQ(reform_lines.size(), 1u) << absl::StrJoin(reform_lines, "\n");
      }
      for (const std::string& line : reform_lines) {
        EXPECT_THAT(line, HasSubstr("world re-forming after rank 1"));
        EXPECT_THAT(line, HasSubstr("waited"));
      }
    }
  }
  std::sort(recovery_s.begin(), recovery_s.end());
  if (!recovery_s.empty()) {
    std::printf(
        "failure to the next op's answer over %zu runs: p50 %.2f s, max "
        "%.2f s\n",
        recovery_s.size(), recovery_s[recovery_s.size() / 2],
        recovery_s.back());
  }
}

// The same for a subgroup's op, sent at once from a client that uses the
// group: the group is made again in the new generation and its op runs
// there.
TEST_F(FailureTest, TheSubgroupOpAfterALoneRecvJustWorks) {
  auto world_client = Client(seconds(30));
  ASSERT_NE(world_client, nullptr);
  const int64_t generation = world_client->world().generation;
  for (const auto& r : world_client->CreateGroup("pair", {0, 1})) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  auto pair = Client(seconds(30));
  ASSERT_NE(pair, nullptr);
  ASSERT_TRUE(pair->UseGroup("pair").ok());
  for (int r : {0, 1}) {
    ASSERT_TRUE(AllocOnDevice(*pair, r, "g", 16, FillKind::kRankPlusOne).ok());
  }
  ASSERT_TRUE(AllocOnDevice(*world_client, 1, "t", 3, FillKind::kZeros).ok());
  client::Op recv;
  recv.kind = OpKind::kRecv;
  recv.input = "t";
  recv.peer = 0;
  recv.timeout = milliseconds(1500);
  for (const auto& r : world_client->PointToPoint({{1, recv}})) {
    if (r.rank != 1) continue;
    ASSERT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << r.result.status();
  }
  for (const auto& r : pair->Collective(AllReduce("g"))) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  EXPECT_GT(pair->world().generation, generation);
  ExpectEveryElement(*pair, "g", {0, 1}, 3.0);  // 1 + 2
}

// Issue 42, an op timeout: an all_reduce that one rank never joins (its
// client died between ranks) times out on the others and breaks their
// communicators; the next all_reduce, from the same client, succeeds with
// the right sum and no retry, and the victim's gap is gone with the
// generation (nothing waits for --seq-gap-timeout-ms).
TEST_F(FailureTest, TheOpAfterAnOpTimeoutJustWorks) {
  auto client = Client(seconds(30));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  for (int r = 0; r < kWorkers; ++r) AllocKeep(r);
  AllocEverywhere(*client, "x", 1000, FillKind::kRankPlusOne);
  const int victim = kWorkers - 1;
  std::vector<int> joined;
  for (int r = 0; r < kWorkers; ++r) {
    if (r != victim) joined.push_back(r);
  }
  auto seq = testing::ClientWire(*client).ReserveSeq(1);
  ASSERT_TRUE(seq.ok()) << seq.status();
  for (const auto& r : Submit(*client, joined, [&](int) {
         v1::OpRequest op = WireAllReduce("x", /*async=*/false);
         op.set_seq(*seq);
         op.set_generation(generation);
         op.set_timeout_ms(1500);
         return op;
       })) {
    ASSERT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r.rank << ": " << r.result.status();
  }
  const auto failed_at = Clock::now();
  for (const auto& r : client->Collective(AllReduce("x"))) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  // Well inside the gap timeout (30 s): the re-form, not the gap, ended it.
  EXPECT_LT(Clock::now() - failed_at, seconds(15));
  EXPECT_GT(client->world().generation, generation);
  std::vector<int> ranks(kWorkers);
  std::iota(ranks.begin(), ranks.end(), 0);
  ExpectEveryElement(*client, "x", ranks, kWorkers * (kWorkers + 1) / 2.0);
  for (int r : ranks) ExpectKeep(r);
}

// Issue 42: kill -9 one worker and start its replacement at once, as a
// container restart does, asking for no rank in particular (as compose's
// workers do). The coordinator has not yet declared the dead one lost, so
// the world is full: the replacement waits for the rank instead of being
// refused, takes it when the silence makes the dead one lost, and the next
// all_reduce (from a client made before the kill) succeeds with the
// survivors' tensors intact.
TEST_F(FailureTest, AReplacementStartedAtOnceTakesTheDeadWorkersRank) {
  for (int r = 0; r < kWorkers; ++r) AllocKeep(r);
  auto client = Client(seconds(20));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  const int victim = kWorkers - 1;
  ASSERT_NO_FATAL_FAILURE(KillWorker(victim));
  ASSERT_TRUE(cluster_->RestartWorker(victim, {"--rank", "-1"}).ok());
  auto ready = cluster_->WaitUntilReady(kRecovery, generation + 1);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(*ready, generation + 1) << "one kill, one re-form";
  EXPECT_TRUE(cluster_->worker(victim).running())
      << "the replacement was refused and exited";
  // The tensors come from a user's next command (a fresh client); the
  // all_reduce from the client that knew the old world, which moves to the
  // new one by itself.
  auto fresh = Client();
  ASSERT_NE(fresh, nullptr);
  for (int r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(
        AllocOnDevice(*fresh, r, "next", 1000, FillKind::kRankPlusOne).ok());
  }
  for (const auto& r : client->Collective(AllReduce("next"))) {
    EXPECT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  EXPECT_EQ(client->world().generation, generation + 1);
  std::vector<int> ranks(kWorkers);
  std::iota(ranks.begin(), ranks.end(), 0);
  ExpectEveryElement(*fresh, "next", ranks, kWorkers * (kWorkers + 1) / 2.0);
  for (int r : ranks) {
    if (r != victim) ExpectKeep(r);
  }
}

// Right after a re-form the coordinator already hands out the new
// generation while workers may still be forming it: an op stamped with it
// waits for the worker to get there (bounded by the op's timeout) instead of
// failing with "op is for generation 2 but this worker is in generation 1".
TEST_F(FailureTest, AnOpRightAfterAReformWaitsForTheNewGeneration) {
  auto client = Client(seconds(10));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  ASSERT_TRUE(AllocOnDevice(*client, 1, "t", 3, FillKind::kZeros).ok());
  client::Op recv;
  recv.kind = OpKind::kRecv;
  recv.input = "t";
  recv.peer = 0;
  recv.timeout = milliseconds(1500);
  (void)client->PointToPoint({{1, recv}});
  // As soon as the coordinator names a later generation, a new client (as a
  // user's next command would) runs an op in it; no waiting for the workers.
  std::unique_ptr<ClusterClient> next;
  for (auto deadline = Clock::now() + kRecovery; Clock::now() < deadline;) {
    next = Client(seconds(10));
    if (next && next->world().generation > generation &&
        next->world().state == client::WorldState::kComplete) {
      break;
    }
    next.reset();
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_NE(next, nullptr) << "the world never moved past generation "
                           << generation;
  client::Op barrier;
  barrier.kind = OpKind::kBarrier;
  barrier.timeout = milliseconds(kOpTimeoutMs * 4);
  for (const auto& r : next->Collective(barrier)) {
    EXPECT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  ExpectCorrectAllReduce("check");
}

// Subgroups outlive a re-form, even one where a member was replaced by a
// restarted worker that never saw the group made: the survivors tell it.
TEST_F(FailureTest, SubgroupsSurviveAReformWithAReplacedMember) {
  auto client = Client(seconds(20));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  for (const auto& r : client->CreateGroup("pair", {0, 1})) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  ASSERT_NO_FATAL_FAILURE(ReplaceWorker(1, generation));
  auto pair = Client(seconds(20));
  ASSERT_NE(pair, nullptr);
  ASSERT_TRUE(pair->UseGroup("pair").ok());
  for (int r : {0, 1}) {
    (void)pair->Free(r, "g");
    ASSERT_TRUE(AllocOnDevice(*pair, r, "g", 16, FillKind::kRankPlusOne).ok());
  }
  for (const auto& r : pair->Collective(AllReduce("g"))) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  for (int r : {0, 1}) {
    auto summary = pair->Summarize(r, "g", 1);
    ASSERT_TRUE(summary.ok()) << summary.status();
    EXPECT_EQ(summary->min, 3.0) << "rank " << r;  // 1 + 2
  }
}

// A destroyed subgroup stays gone through a re-form (workers make again
// only the groups they still hold), while one kept is made again.
TEST_F(FailureTest, ADestroyedSubgroupIsNotMadeAgainByAReform) {
  auto client = Client(seconds(20));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  for (const char* name : {"kept", "dropped"}) {
    for (const auto& r : client->CreateGroup(name, {0, 1})) {
      ASSERT_TRUE(r.result.ok())
          << name << " rank " << r.rank << ": " << r.result.status();
    }
  }
  for (const auto& r : client->DestroyGroup("dropped")) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  ASSERT_NO_FATAL_FAILURE(ReplaceWorker(1, generation));
  auto after = Client(seconds(20));
  ASSERT_NE(after, nullptr);
  for (int r = 0; r < kWorkers; ++r) {
    auto info = after->Info(r);
    ASSERT_TRUE(info.ok()) << info.status();
    std::vector<std::string> names;
    for (const auto& g : info->groups) names.push_back(g.name);
    EXPECT_THAT(names, ::testing::Contains("kept")) << "rank " << r;
    EXPECT_THAT(names, ::testing::Not(::testing::Contains("dropped")))
        << "rank " << r;
  }
}

// The coordinator dies and comes back empty: workers re-register into their
// ranks and generation, communicators are untouched (same generation, seqs
// continue), and `status` is whole again.
TEST_F(FailureTest, CoordinatorRestartKeepsTheWorldRunning) {
  ExpectCorrectAllReduce("before");
  auto client = Client(seconds(5));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  ASSERT_TRUE(cluster_->coordinator().Signal(SIGKILL).ok());
  ASSERT_TRUE(cluster_->coordinator().WaitForExit(seconds(10)).ok());
  // While it is gone: workers serve their tensors; ops that need a seq from
  // the coordinator fail fast and say why.
  auto summary = client->Summarize(0, "before", 1);
  ASSERT_TRUE(summary.ok()) << summary.status();
  auto during = client->Collective(AllReduce("before"));
  ASSERT_FALSE(during.empty());
  EXPECT_EQ(during[0].result.status().code(), absl::StatusCode::kUnavailable)
      << during[0].result.status();
  std::this_thread::sleep_for(milliseconds(500));

  ASSERT_TRUE(cluster_->RestartCoordinator().ok());
  auto ready = cluster_->WaitUntilReady(kRecovery);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(*ready, generation) << "the world was re-formed, not resumed";
  auto after = Client();
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(after->world().state, client::WorldState::kComplete);
  EXPECT_EQ(after->world().members.size(), static_cast<size_t>(kWorkers));
  ExpectCorrectAllReduce("after");
  EXPECT_EQ(Client()->world().generation, generation);
}

// Two clients keep running collectives while a worker is killed: every call
// returns (ok or a clear error) within bounded time, and once the world has
// re-formed both clients' next collectives are correct.
TEST_F(FailureTest, ConcurrentClientsDuringAFailureNeverHang) {
  auto client = Client(seconds(10));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  std::atomic<bool> stop{false};
  std::atomic<int> hung{0};
  std::atomic<int> unexpected{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < 2; ++c) {
    threads.emplace_back([&, c] {
      auto mine = cluster_->Client(seconds(15));
      if (!mine.ok()) return;
      const std::string name = absl::StrCat("c", c);
      for (int r = 0; r < kWorkers; ++r) {
        (void)AllocOnDevice(**mine, r, name, 1 << 14, FillKind::kOnes);
      }
      while (!stop) {
        const auto start = Clock::now();
        for (const auto& r : (*mine)->Collective(AllReduce(name))) {
          const absl::StatusCode code = r.result.status().code();
          if (code != absl::StatusCode::kOk &&
              code != absl::StatusCode::kUnavailable &&
              code != absl::StatusCode::kDeadlineExceeded &&
              code != absl::StatusCode::kAborted &&
              code != absl::StatusCode::kFailedPrecondition &&
              code != absl::StatusCode::kCancelled &&
              // The replacement of rank 1 holds none of the killed worker's
              // tensors, and the clients move to its generation by
              // themselves (issue 42).
              !(code == absl::StatusCode::kNotFound && r.rank == 1)) {
            ++unexpected;
            ADD_FAILURE() << "rank " << r.rank << ": " << r.result.status();
          }
        }
        if (Clock::now() - start > seconds(16)) ++hung;
      }
    });
  }
  std::this_thread::sleep_for(seconds(1));
  ASSERT_NO_FATAL_FAILURE(KillWorker(1));
  std::this_thread::sleep_for(seconds(1));
  ASSERT_TRUE(cluster_->RestartWorker(1).ok());
  auto ready = cluster_->WaitUntilReady(kRecovery, generation + 1);
  if (!ready.ok()) DumpStacks();
  std::this_thread::sleep_for(seconds(1));
  stop = true;
  for (auto& thread : threads) thread.join();
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(hung, 0);
  EXPECT_EQ(unexpected, 0);
  ExpectCorrectAllReduce("c0", 1 << 14);
  ExpectCorrectAllReduce("c1", 1 << 14);
}

class ElasticShrinkTest : public FailureTest {
 protected:
  std::vector<std::string> ExtraCoordinatorArgs() const override {
    return {"--elastic", "shrink"};
  }
};

// With --elastic shrink nobody waits for a replacement: the coordinator
// drops the lost rank, the survivors are renumbered in order at a new
// generation (keeping their tensors), and the next collective runs on the
// smaller world.
TEST_F(ElasticShrinkTest, AKilledRankIsDroppedAndTheWorldGoesOn) {
  for (int r = 0; r < kWorkers; ++r) AllocKeep(r);
  auto before = Client(seconds(10));
  ASSERT_NE(before, nullptr);
  const int64_t generation = before->world().generation;
  const int victim = 1;
  ASSERT_NO_FATAL_FAILURE(KillWorker(victim));
  auto ready = cluster_->WaitUntilReady(kRecovery, generation + 1);
  ASSERT_TRUE(ready.ok()) << ready.status();
  auto after = Client();
  ASSERT_NE(after, nullptr);
  ASSERT_EQ(after->world_size(), kWorkers - 1);
  for (int rank = 0; rank < kWorkers - 1; ++rank) {
    const int old_rank = rank < victim ? rank : rank + 1;
    auto info = after->Info(rank);
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->rank, rank);
    EXPECT_EQ(info->world_size, kWorkers - 1);
    // Filled as arange + its old rank before the shrink.
    auto summary = after->Summarize(rank, "keep", 1);
    ASSERT_TRUE(summary.ok()) << summary.status();
    ASSERT_FALSE(summary->head.empty());
    EXPECT_EQ(summary->head[0], old_rank) << "new rank " << rank;
  }
  ExpectCorrectAllReduce("check");
  // NCCL shrinks the survivors' communicator (ncclCommShrink) instead of a
  // new rendezvous; Gloo has no shrink and says it builds a new one.
  std::ifstream log(cluster_->worker(0).log_path());
  std::stringstream text;
  text << log.rdbuf();
  const std::string formed =
      absl::StrCat("world communicator of generation ", *ready, " (0 of ",
                   kWorkers - 1, ") ");
  EXPECT_THAT(text.str(),
              ::testing::HasSubstr(absl::StrCat(
                  formed, kCuda ? "shrunk from the last one" : "built")));
}

// A work id names a work only on the worker process that issued it: ids
// count from 1 in each, so a restarted worker hands out its predecessor's
// ids again. Chaos seed 663522075: a client waited on rank 1 for an id the
// killed worker had issued, got the successor's work of that id, was told
// its own op succeeded there (it never ran), and the successor forgot the
// work, so the client that did submit it got NOT_FOUND.
TEST_F(FailureTest, AWorkIdOfAKilledWorkerIsNotFoundOnItsSuccessor) {
  auto client = Client(seconds(20));
  ASSERT_NE(client, nullptr);
  const int64_t generation = client->world().generation;
  auto submit = [](ClusterClient& c, client::WorkRef* rank1) {
    std::vector<client::WorkRef> refs;
    for (const auto& r : c.Collective(AllReduce("a", true))) {
      EXPECT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
      if (!r.result.ok()) continue;
      refs.push_back({r.rank, r.result->work_id, r.result->worker_id});
      if (r.rank == 1) *rank1 = refs.back();
    }
    return refs;
  };
  auto wait = [](ClusterClient& c, const std::vector<client::WorkRef>& refs) {
    for (const auto& r : c.Wait(refs, seconds(10))) {
      EXPECT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
  };
  for (int r = 0; r < kWorkers; ++r) {
    ASSERT_TRUE(
        AllocOnDevice(*client, r, "a", 16, FillKind::kRankPlusOne).ok());
  }
  client::WorkRef old;
  wait(*client, submit(*client, &old));
  ASSERT_GT(old.work_id, 0);

  ASSERT_NO_FATAL_FAILURE(ReplaceWorker(1, generation));
  auto next = Client(seconds(20));
  ASSERT_NE(next, nullptr);
  ASSERT_TRUE(AllocOnDevice(*next, 1, "a", 16, FillKind::kRankPlusOne).ok());
  // Async ops until the successor hands out the old id again.
  client::WorkRef fresh;
  std::vector<client::WorkRef> last;
  for (int i = 0; i <= old.work_id && fresh.work_id != old.work_id; ++i) {
    if (!last.empty()) wait(*next, last);
    last = submit(*next, &fresh);
  }
  ASSERT_EQ(fresh.work_id, old.work_id);
  EXPECT_NE(fresh.worker_id, old.worker_id);

  const auto stale = next->Wait({old}, seconds(5));
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_EQ(stale[0].result.status().code(), absl::StatusCode::kNotFound)
      << "the successor answered for a work it never had: "
      << stale[0].result.status();
  EXPECT_THAT(stale[0].result.status().message(), HasSubstr("replaced"));
  // The successor's own work of that id is still there to wait for.
  wait(*next, last);
}

}  // namespace
}  // namespace ccl::failure_testing
