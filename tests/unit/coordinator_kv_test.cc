// The coordinator's rendezvous services, without gRPC: the KV store,
// sequence ranges, and the NCCL unique ids (posted once, and handed to a
// registration that asks for them).
#include "tests/unit/coordinator_core_fixture.h"

namespace ccl::coordinator::core_testing {
namespace {

TEST_F(CoordinatorCoreTest, KvSetGetWaitAndTimeout) {
  Make(1);
  Result<KvWaitResult> early;
  core_->KvWait(core_->NewWaitId(), 0, {"a", "b"}, milliseconds(0), false,
                early.callback());
  ASSERT_TRUE(core_->KvSet(0, "a", "1").ok());
  EXPECT_FALSE(early.ready());
  EXPECT_EQ(core_->KvGet(0, "b").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(core_->KvSet(0, "b", "2").ok());
  EXPECT_TRUE(early.Get().ok());
  EXPECT_EQ(core_->KvGet(0, "a")->second, "1");

  Result<KvWaitResult> present;
  core_->KvWait(core_->NewWaitId(), 0, {"a"}, milliseconds(0), false,
                present.callback());
  EXPECT_TRUE(present.ready());

  Result<KvWaitResult> late;
  core_->KvWait(core_->NewWaitId(), 0, {"a", "zz", "yy"}, milliseconds(30),
                false, late.callback());
  auto r = late.Get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("missing keys: yy, zz"));
}

// A key present when a wait began and deleted before the wait's last key
// arrived is waited for again (reading it crashed the coordinator: found by
// coordinator_request_fuzzer).
TEST_F(CoordinatorCoreTest, AWaitForAKeyDeletedMeanwhileWaitsForItAgain) {
  Make(1);
  ASSERT_TRUE(core_->KvSet(0, "b", "2").ok());
  Result<KvWaitResult> wait;
  core_->KvWait(core_->NewWaitId(), 0, {"a", "b"}, milliseconds(0), true,
                wait.callback());
  ASSERT_TRUE(core_->KvDelete(0, "b").ok());
  ASSERT_TRUE(core_->KvSet(0, "a", "1").ok());
  EXPECT_FALSE(wait.ready());
  ASSERT_TRUE(core_->KvSet(0, "b", "3").ok());
  auto got = wait.Get();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->values.size(), 2u);
  EXPECT_EQ(*got->values[0], "1");
  EXPECT_EQ(*got->values[1], "3");
}

TEST_F(CoordinatorCoreTest, KvRejectsBadInput) {
  Make(1);
  EXPECT_EQ(core_->KvSet(0, "", "v").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto big = core_->KvSet(0, "k", std::string(65, 'x'));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.status().message(), HasSubstr("64 bytes"));
  EXPECT_EQ(core_->KvSet(3, "k", "v").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->KvGet(0, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->KvAdd(0, "", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->KvDelete(0, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->KvCompareSet(0, "", "", "v").status().code(),
            absl::StatusCode::kInvalidArgument);
  Result<KvWaitResult> wait;
  core_->KvWait(core_->NewWaitId(), 0, {"a", ""}, milliseconds(0), false,
                wait.callback());
  EXPECT_EQ(wait.Get().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorCoreTest, KvAddCountsAndWakesWaiters) {
  Make(1);
  Result<KvWaitResult> wait;
  core_->KvWait(core_->NewWaitId(), 0, {"n"}, milliseconds(0), false,
                wait.callback());
  EXPECT_EQ(core_->KvAdd(0, "n", 5)->second, 5);
  EXPECT_TRUE(wait.Get().ok());
  EXPECT_EQ(core_->KvAdd(0, "n", -7)->second, -2);
  EXPECT_EQ(core_->KvGet(0, "n")->second, "-2");
  ASSERT_TRUE(core_->KvSet(0, "s", "hello").ok());
  EXPECT_EQ(core_->KvAdd(0, "s", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorCoreTest, KvCompareSetAndDelete) {
  Make(1);
  auto first = core_->KvCompareSet(0, "k", "", "v1");
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->swapped);
  auto again = core_->KvCompareSet(0, "k", "", "v2");
  EXPECT_FALSE(again->swapped);
  EXPECT_EQ(again->value, "v1");
  auto swap = core_->KvCompareSet(0, "k", "v1", "v2");
  EXPECT_TRUE(swap->swapped);
  EXPECT_EQ(swap->value, "v2");
  auto wrong = core_->KvCompareSet(0, "k", "v1", "v3");
  EXPECT_FALSE(wrong->swapped);
  EXPECT_EQ(wrong->value, "v2");
  auto absent = core_->KvCompareSet(0, "none", "x", "y");
  EXPECT_FALSE(absent->swapped);
  EXPECT_EQ(absent->value, "");

  EXPECT_TRUE(core_->KvDelete(0, "k")->second);
  EXPECT_FALSE(core_->KvDelete(0, "k")->second);
  EXPECT_EQ(core_->KvGet(0, "k").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorCoreTest, KvIsScopedByGeneration) {
  Make(2);
  ASSERT_TRUE(core_->KvSet(0, "pre", "0").ok());  // Generation 0.
  FormWorld(2);
  EXPECT_EQ(core_->KvGet(0, "pre").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*core_->KvSet(0, "k", "gen1"), 1);
  ASSERT_TRUE(Leave(1, 1, "w1").ok());
  ASSERT_TRUE(Register("w1-new")->Get().ok());  // Generation 2.
  EXPECT_EQ(core_->KvGet(0, "k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->KvGet(1, "k")->second, "gen1");
  ASSERT_TRUE(core_->KvSet(2, "k", "gen2").ok());
  EXPECT_EQ(core_->KvGet(0, "k")->second, "gen2");
  auto future = core_->KvGet(3, "k");
  EXPECT_EQ(future.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(future.status().message(), HasSubstr("unknown generation 3"));
}

TEST_F(CoordinatorCoreTest, SequenceRangesAreDisjointAndContiguous) {
  Make(1);
  FormWorld(1);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int64_t count = 1 + (i + t) % 3;
        auto r = core_->ReserveSequence(0, "", count);
        if (r.ok()) got[t].emplace_back(r->second, count);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::pair<int64_t, int64_t>> all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  ASSERT_EQ(all.size(), size_t{kThreads * kPerThread});
  std::sort(all.begin(), all.end());
  int64_t next = 0;
  for (auto [first, count] : all) {
    ASSERT_EQ(first, next);
    next += count;
  }
  // "" is the world group; other groups and generations count on their own.
  EXPECT_EQ(core_->ReserveSequence(0, "world", 1)->second, next);
  EXPECT_EQ(core_->ReserveSequence(0, "tp0", 4)->second, 0);
  EXPECT_EQ(core_->ReserveSequence(0, "tp0", 1)->second, 4);
}

// A coordinator that has formed no world yet (one that just restarted,
// before its workers re-registered) has no generation to count in: seqs it
// handed out would be numbered apart from those of the generation it then
// adopts, and two ops could get one seq.
TEST_F(CoordinatorCoreTest, NoSequencesBeforeAWorldHasFormed) {
  Make(2);
  auto early = core_->ReserveSequence(0, "world", 1);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(early.status().message()),
              HasSubstr("no world has formed yet"));
  FormWorld(2);
  auto r = core_->ReserveSequence(0, "world", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 1);
  EXPECT_EQ(r->second, 0);
}

TEST_F(CoordinatorCoreTest, SequenceRejectsBadCounts) {
  Make(1);
  FormWorld(1);
  // At most a worker's kMaxSeqsAhead (2^16) at once: a longer range could
  // not be queued, only skipped.
  for (int64_t count : {int64_t{0}, int64_t{-1}, int64_t{65537}}) {
    EXPECT_EQ(core_->ReserveSequence(0, "g", count).status().code(),
              absl::StatusCode::kInvalidArgument)
        << count;
  }
  EXPECT_TRUE(core_->ReserveSequence(0, "g", 65536).ok());
}

TEST_F(CoordinatorCoreTest, UniqueIdIsPostedOnceAndHandedToWaiters) {
  Make(1);
  Result<UniqueIdResult> before;
  core_->GetUniqueId(core_->NewWaitId(), 0, "world", milliseconds(0),
                     before.callback());
  EXPECT_FALSE(before.ready());
  ASSERT_TRUE(core_->PostUniqueId(0, "", "id-1").ok());  // "" is "world".
  ASSERT_TRUE(before.Get().ok());
  EXPECT_EQ(before.Get()->unique_id, "id-1");

  Result<UniqueIdResult> after;
  core_->GetUniqueId(core_->NewWaitId(), 0, "", milliseconds(0),
                     after.callback());
  EXPECT_EQ(after.Get()->unique_id, "id-1");

  EXPECT_TRUE(core_->PostUniqueId(0, "world", "id-1").ok());  // Retry.
  EXPECT_EQ(core_->PostUniqueId(0, "world", "id-2").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(core_->PostUniqueId(0, "g", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->PostUniqueId(0, "g", std::string(4097, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(core_->PostUniqueId(0, "g", std::string(4096, 'x')).ok());

  Result<UniqueIdResult> never;
  core_->GetUniqueId(core_->NewWaitId(), 0, "other", milliseconds(30),
                     never.callback());
  EXPECT_EQ(never.Get().status().code(), absl::StatusCode::kDeadlineExceeded);
}

// The value a registration brought for `key`, or "" if none.
std::string Carried(const RegisterResult& result, const std::string& key) {
  for (const auto& [k, v] : result.kv) {
    if (k == key) return *v;
  }
  return "";
}

TEST_F(CoordinatorCoreTest, ARegistrationAskingForTheIdIsAnsweredWithIt) {
  Make(3);
  auto a = RegisterForIds("a", 0);
  auto b = RegisterForIds("b", 0);
  auto c = Register("c");  // a Gloo worker, or one that predates the field
  // Rank 0 makes the id, so it is answered as the world forms; so is the
  // rank that did not ask.
  ASSERT_TRUE(a->Get().ok());
  EXPECT_EQ(a->Get()->rank, 0);
  EXPECT_TRUE(a->Get()->kv.empty());
  ASSERT_TRUE(c->Get().ok());
  EXPECT_TRUE(c->Get()->kv.empty());
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(b->ready());

  ASSERT_TRUE(core_->KvSet(1, "nccl/gen1/world/id", "the-id").ok());
  ASSERT_TRUE(b->Get().ok()) << b->Get().status();
  EXPECT_EQ(b->Get()->rank, 1);
  EXPECT_EQ(b->Get()->generation, 1);
  EXPECT_EQ(Carried(*b->Get(), "nccl/gen1/world/id"), "the-id");
  EXPECT_EQ(core_->Stats().kv.parked, 0);
}

TEST_F(CoordinatorCoreTest, WithSeveralIdsOnlyThePostersAreAnsweredFirst) {
  Make(4);
  // Two ranks per id: ranks 0 and 2 post, 1 and 3 read the list rank 0
  // posts.
  std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
  for (int i = 0; i < 4; ++i) {
    pending.push_back(RegisterForIds("w" + std::to_string(i), 2));
  }
  ASSERT_TRUE(pending[0]->Get().ok());
  ASSERT_TRUE(pending[2]->Get().ok());
  EXPECT_EQ(pending[2]->Get()->rank, 2);
  ASSERT_TRUE(core_->KvSet(1, "nccl/gen1/world/id/0", "id0").ok());
  ASSERT_TRUE(core_->KvSet(1, "nccl/gen1/world/id/1", "id1").ok());
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(pending[1]->ready());
  EXPECT_FALSE(pending[3]->ready());
  ASSERT_TRUE(core_->KvSet(1, "nccl/gen1/world/ids", "id0id1").ok());
  for (int i : {1, 3}) {
    ASSERT_TRUE(pending[i]->Get().ok());
    EXPECT_EQ(Carried(*pending[i]->Get(), "nccl/gen1/world/ids"), "id0id1");
  }
}

TEST_F(CoordinatorCoreTest, AHeldRegistrationEndsWithoutTheIdAfterItsHold) {
  Make(2);
  // The hold is the registration's timeout or the heartbeat interval,
  // whichever is shorter; past it the rank is a member all the same and
  // reads the id itself.
  auto a = RegisterForIds("a", 0, milliseconds(200));
  auto b = RegisterForIds("b", 0, milliseconds(200));
  ASSERT_TRUE(a->Get().ok());
  auto held = b->Get();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->rank, 1);
  EXPECT_TRUE(held->kv.empty());
  EXPECT_EQ(core_->GetWorld().state, WorldState::kComplete);
  EXPECT_EQ(core_->Stats().kv.parked, 0);
}

TEST_F(CoordinatorCoreTest,
       AHeldRegistrationIsAnsweredBeforeItsCallersDeadline) {
  Make(2);
  // The caller waits 400 ms more: the reply comes within half of that,
  // without the id, instead of at the end of the hold (1 s here).
  const auto start = std::chrono::steady_clock::now();
  auto a = RegisterForIds("a", 0);
  auto b = RegisterForIds("b", 0, milliseconds(0), start + milliseconds(400));
  ASSERT_TRUE(a->Get().ok());
  auto held = b->Get();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(held->kv.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(390));
  // A caller already out of time is answered at once.
  auto late = RegisterForIds("b", 0, milliseconds(0), start);
  ASSERT_TRUE(late->Get().ok());
  EXPECT_TRUE(late->Get()->kv.empty());
  EXPECT_EQ(core_->Stats().kv.parked, 0);
}

// Registrations that ask for the ids are held only in a generation whose
// communicators are built by a rendezvous, so that the ids will come.
TEST_F(CoordinatorCoreTest, NoHoldWhenTheWorldResumesOrShrinks) {
  Make(3, /*elastic_shrink=*/true);
  // A restarted coordinator adopts the generation every rank resumes: their
  // communicators carry on and post no ids.
  std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    RegisterRequest request;
    request.address = "10.0.0.1:600" + std::to_string(i);
    request.worker_id = "w" + std::to_string(i);
    request.secret = Secret(request.worker_id);
    request.requested_rank = i;
    request.resume_generation = 7;
    request.nccl_ranks_per_root = 0;
    auto result = std::make_unique<Result<RegisterResult>>();
    core_->Register(core_->NewWaitId(), std::move(request), result->callback());
    pending.push_back(std::move(result));
  }
  for (auto& p : pending) {
    auto r = p->Get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->generation, 7);
    EXPECT_TRUE(r->kv.empty());
  }
  // Neither is a survivor of a shrink held: it shrinks its communicator.
  clock_.Advance(milliseconds(6000));
  ASSERT_TRUE(Heartbeat(0, 7, "w0").ok());
  ASSERT_TRUE(Heartbeat(2, 7, "w2").ok());
  clock_.Advance(milliseconds(6000));  // w1 silent for 12 s
  core_->SweepLiveness();
  ASSERT_EQ(core_->GetWorld().generation, 8);
  RegisterRequest again;
  again.address = "10.0.0.1:6002";
  again.worker_id = "w2";
  again.secret = Secret("w2");
  again.requested_rank = 2;
  again.rejoin = true;
  again.nccl_ranks_per_root = 0;
  Result<RegisterResult> rejoined;
  core_->Register(core_->NewWaitId(), again, rejoined.callback());
  auto r = rejoined.Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->generation, 8);
  EXPECT_TRUE(r->kv.empty());
  // All of it well within one hold (the heartbeat interval, 1 s).
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(900));
  EXPECT_EQ(core_->Stats().kv.parked, 0);
}

TEST_F(CoordinatorCoreTest, AReconnectIntoAFormedWorldGetsThePostedId) {
  Make(2);
  auto a = RegisterForIds("a", 0);
  auto b = RegisterForIds("b", 0);
  ASSERT_TRUE(a->Get().ok());
  ASSERT_TRUE(core_->KvSet(1, "nccl/gen1/world/id", "the-id").ok());
  ASSERT_TRUE(b->Get().ok());
  auto again = RegisterForIds("b", 0);
  ASSERT_TRUE(again->Get().ok());
  EXPECT_EQ(Carried(*again->Get(), "nccl/gen1/world/id"), "the-id");
}

TEST_F(CoordinatorCoreTest, ANewGenerationReleasesAHeldRegistration) {
  Make(2);
  auto a = RegisterForIds("a", 0);
  auto b = RegisterForIds("b", 0);
  ASSERT_TRUE(a->Get().ok());
  EXPECT_FALSE(b->ready());
  // Rank 0 failed before posting and asks for a new generation: the held
  // rank is answered (without the id) rather than left waiting for a key
  // of a generation that is over.
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(core_->Heartbeat(Beat(0, 1, "a", 0, 0, "broken")).ok());
  EXPECT_EQ(core_->GetWorld().generation, 2);
  auto held = b->Get();
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_TRUE(held->kv.empty());
  // Released by the new generation, not by the end of its hold (the
  // heartbeat interval, 1 s here).
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(500));
}

TEST_F(CoordinatorCoreTest, EachGenerationStartsWithTheMembersAddresses) {
  Make(2);
  std::vector<int> ranks = FormWorld(2);
  ASSERT_EQ(ranks, (std::vector<int>{0, 1}));
  // What the ranks' failure diagnosis reads, set without a call of theirs.
  auto address = [&](int64_t generation, int rank) {
    auto r = core_->KvGet(generation, "addr/" + std::to_string(rank));
    return r.ok() ? r->second : r.status().ToString();
  };
  EXPECT_EQ(address(1, 0), "10.0.0.1:5000");
  EXPECT_EQ(address(1, 1), "10.0.0.1:5001");
  // A member that comes back at another address is found there.
  auto moved = Register("w1");
  ASSERT_TRUE(moved->Get().ok());
  EXPECT_EQ(address(1, 1), "10.0.0.1:5002");
  // The next generation starts with them too.
  ASSERT_TRUE(core_->Heartbeat(Beat(0, 1, "w0", 0, 0, "broken")).ok());
  EXPECT_EQ(address(2, 0), "10.0.0.1:5000");
  EXPECT_EQ(address(2, 1), "10.0.0.1:5002");
}

TEST_F(CoordinatorCoreTest, ANegativeRanksPerRootIsInvalid) {
  Make(2);
  auto bad = RegisterForIds("a", -1);
  EXPECT_EQ(bad->Get().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ccl::coordinator::core_testing
