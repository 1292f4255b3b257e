// The coordinator's pieces that make it scale: the roster's indexes, the
// heartbeat policy, values returned by KvWait, and the collection of dead
// generations. Large worlds here check behaviour (ranks, messages, timing
// told to workers), never speed: bench/rendezvous_bench measures that.
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/coordinator_core.h"
#include "coordinator/heartbeat_policy.h"
#include "coordinator/roster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/coordinator_core_fixture.h"

namespace ccl::coordinator {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(HeartbeatPolicyTest, SmallWorldsKeepTheConfiguredTiming) {
  const HeartbeatTiming t =
      AdaptHeartbeat(milliseconds(1000), milliseconds(10000), 4096, 4096);
  EXPECT_EQ(t.interval, milliseconds(1000));
  EXPECT_EQ(t.timeout, milliseconds(10000));
}

TEST(HeartbeatPolicyTest, LargeWorldsStretchTheIntervalAndKeepTheSlack) {
  // The timeout grows by as much as the interval: 9 s of slack stay.
  const HeartbeatTiming t =
      AdaptHeartbeat(milliseconds(1000), milliseconds(10000), 4096, 16384);
  EXPECT_EQ(t.interval, milliseconds(4000));
  EXPECT_EQ(t.timeout, milliseconds(13000));
  // Never fewer than two whole missed beats.
  const HeartbeatTiming far =
      AdaptHeartbeat(milliseconds(1000), milliseconds(10000), 4096, 65536);
  EXPECT_EQ(far.interval, milliseconds(16000));
  EXPECT_EQ(far.timeout, milliseconds(48000));
  // Rounded up, so the rate stays within the budget.
  const HeartbeatTiming odd =
      AdaptHeartbeat(milliseconds(1000), milliseconds(3000), 4096, 5000);
  EXPECT_EQ(odd.interval, milliseconds(1221));
  EXPECT_EQ(odd.timeout, milliseconds(3663));
  EXPECT_LE(5000.0 / 1.221, 4096.0);
}

TEST(HeartbeatPolicyTest, ANonPositiveRateTurnsTheAdaptationOff) {
  for (int64_t rate : {int64_t{0}, int64_t{-1}}) {
    const HeartbeatTiming t =
        AdaptHeartbeat(milliseconds(200), milliseconds(2000), rate, 1 << 20);
    EXPECT_EQ(t.interval, milliseconds(200));
    EXPECT_EQ(t.timeout, milliseconds(2000));
  }
}

TEST(HeartbeatPolicyTest, FirstBeatsAreSpreadOverOneInterval) {
  const milliseconds interval(4000);
  EXPECT_EQ(HeartbeatPhase(interval, 0, 1), interval);
  EXPECT_EQ(HeartbeatPhase(interval, 16383, 16384), interval);
  EXPECT_EQ(HeartbeatPhase(interval, 8191, 16384), milliseconds(2000));
  EXPECT_EQ(HeartbeatPhase(interval, 0, 16384), milliseconds(1));
  // Out of range: no stagger rather than a wrong one.
  EXPECT_EQ(HeartbeatPhase(interval, 5, 4), interval);
}

TEST(RosterTest, CountsAndIndexesFollowEveryChange) {
  Roster roster(4);
  EXPECT_EQ(roster.LowestFree(), 0);
  EXPECT_FALSE(roster.complete());
  roster.Take(1, "b", 1);
  roster.Take(0, "a", 2);
  EXPECT_EQ(roster.LowestFree(), 2);
  EXPECT_THAT(roster.Missing(8), ElementsAre(2, 3));
  EXPECT_EQ(roster.live(), 2);
  EXPECT_EQ(roster.RankOf("b"), 1);
  roster.Take(2, "c", 3);
  roster.Take(3, "", 4);
  EXPECT_TRUE(roster.complete());
  EXPECT_FALSE(roster.all_ready());
  for (int rank = 0; rank < 4; ++rank) {
    roster.SetState(rank, MemberState::kReady);
  }
  EXPECT_TRUE(roster.all_ready());

  roster.SetState(1, MemberState::kLost);
  EXPECT_FALSE(roster.complete());
  EXPECT_EQ(roster.LowestFree(), 1);
  EXPECT_EQ(roster.ready(), 3);
  EXPECT_EQ(roster.RankOf("b"), 1);  // A lost member keeps its slot.
  roster.SetState(1, MemberState::kJoining);
  EXPECT_TRUE(roster.complete());

  roster.Clear(1);
  EXPECT_EQ(roster.RankOf("b"), std::nullopt);
  EXPECT_EQ(roster.Find(1), nullptr);
  EXPECT_EQ(roster.live(), 3);
}

TEST(RosterTest, KeepReadyRenumbersInOrderAndReindexes) {
  Roster roster(4);
  for (int rank = 0; rank < 4; ++rank) {
    roster.Take(rank, "w" + std::to_string(rank), rank + 1);
    roster.SetState(rank, MemberState::kReady);
  }
  roster.SetState(1, MemberState::kLost);
  roster.SetState(2, MemberState::kLeft);
  EXPECT_THAT(roster.KeepReady(), ElementsAre(1, 2));
  EXPECT_EQ(roster.size(), 2);
  EXPECT_TRUE(roster.all_ready());
  EXPECT_EQ(roster.RankOf("w3"), 1);
  EXPECT_EQ(roster.RankOf("w1"), std::nullopt);
  EXPECT_EQ(roster.LowestFree(), std::nullopt);
}

using core_testing::Beat;
using core_testing::Result;
using core_testing::Secret;

class CoordinatorScaleTest : public ::testing::Test {
 protected:
  CoordinatorCore& Make(int world_size, int64_t max_rate = 4096) {
    CoordinatorOptions options;
    options.world_size = world_size;
    options.heartbeat_interval = milliseconds(1000);
    options.heartbeat_timeout = milliseconds(10000);
    options.max_heartbeat_rate = max_rate;
    options.sweep_period = milliseconds(0);
    options.clock = [this] { return base_ + milliseconds(offset_ms_.load()); };
    auto core = CoordinatorCore::Create(std::move(options));
    EXPECT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    return *core_;
  }

  std::unique_ptr<Result<RegisterResult>> Register(
      const std::string& worker_id, milliseconds timeout = milliseconds(0)) {
    auto result = std::make_unique<Result<RegisterResult>>();
    RegisterRequest request;
    request.address = "10.0.0.1:" + worker_id;
    request.worker_id = worker_id;
    request.secret = Secret(worker_id);
    request.timeout = timeout;
    core_->Register(core_->NewWaitId(), std::move(request), result->callback());
    return result;
  }

  // Registers "w0".."w{n-1}" and returns each one's result.
  std::vector<absl::StatusOr<RegisterResult>> FormWorld(int n,
                                                        int first_id = 0) {
    std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
    for (int i = 0; i < n; ++i) {
      pending.push_back(Register("w" + std::to_string(first_id + i)));
    }
    std::vector<absl::StatusOr<RegisterResult>> results;
    for (auto& p : pending) results.push_back(p->Get());
    return results;
  }

  void Advance(milliseconds d) { offset_ms_ += d.count(); }

  const std::chrono::steady_clock::time_point base_ =
      std::chrono::steady_clock::now();
  std::atomic<int64_t> offset_ms_{0};
  absl::StatusOr<int64_t> Leave(int rank, int64_t generation,
                                const std::string& worker_id) {
    return core_->Deregister(rank, generation, worker_id, Secret(worker_id));
  }

  std::unique_ptr<CoordinatorCore> core_;
};

TEST_F(CoordinatorScaleTest, ALargeWorldFormsWithRanksInArrivalOrder) {
  constexpr int kWorld = 4096;
  Make(kWorld);
  auto results = FormWorld(kWorld);
  for (int i = 0; i < kWorld; ++i) {
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    ASSERT_EQ(results[i]->rank, i);
    ASSERT_EQ(results[i]->generation, 1);
  }
  // Every reply shares one snapshot of the world.
  EXPECT_EQ(results.front()->world, results.back()->world);
  CoordinatorStats stats = core_->Stats();
  EXPECT_EQ(stats.live_members, kWorld);
  EXPECT_EQ(stats.parked_registrations, 0);
}

TEST_F(CoordinatorScaleTest,
       AWorldReRegisteringIntoANewGenerationSharesOneSnapshot) {
  constexpr int kWorld = 2048;
  Make(kWorld);
  ASSERT_TRUE(FormWorld(kWorld)[0].ok());
  ASSERT_TRUE(core_->Heartbeat(Beat(0, 1, "w0", 0, 0, "broken")).ok());
  // Everyone comes back into generation 2 at once (a reconnect each).
  auto again = FormWorld(kWorld);
  for (int i = 0; i < kWorld; ++i) {
    ASSERT_TRUE(again[i].ok()) << again[i].status();
    ASSERT_EQ(again[i]->generation, 2);
    ASSERT_EQ(again[i]->rank, i);
    ASSERT_EQ(again[i]->world, again[0]->world);
  }
  EXPECT_EQ(again[0]->world->generation, 2);
  EXPECT_EQ(again[0]->world->state, WorldState::kComplete);
  // A member whose address changed gets a snapshot that shows it.
  RegisterRequest moved;
  moved.address = "10.9.9.9:1";
  moved.worker_id = "w7";
  moved.secret = Secret("w7");
  Result<RegisterResult> result;
  core_->Register(core_->NewWaitId(), moved, result.callback());
  auto r = result.Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->world, again[0]->world);
  EXPECT_EQ(r->world->members[7].address, "10.9.9.9:1");
}

TEST_F(CoordinatorScaleTest, ATimedOutLargeWorldNamesTheFirstMissingRanks) {
  Make(1000);
  std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
  for (int i = 0; i < 980; ++i) {
    pending.push_back(Register("w" + std::to_string(i), milliseconds(30)));
  }
  auto r = pending.back()->Get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("of 1000 ranks registered"));
  EXPECT_THAT(r.status().message(), HasSubstr("missing ranks"));
  EXPECT_THAT(r.status().message(), HasSubstr(", ..."));
  for (auto& p : pending) EXPECT_FALSE(p->Get().ok());
  // Every timed-out registration was withdrawn.
  EXPECT_EQ(core_->Stats().live_members, 0);
  EXPECT_TRUE(core_->GetWorld().members.empty());
}

TEST_F(CoordinatorScaleTest, WorkersAreToldTheStretchedTimingAndItIsEnforced) {
  Make(16384, /*max_rate=*/4096);
  auto results = FormWorld(16384);
  ASSERT_TRUE(results[0].ok()) << results[0].status();
  EXPECT_EQ(results[0]->world->heartbeat_interval_ms, 4000);
  EXPECT_EQ(results[0]->world->heartbeat_timeout_ms, 13000);

  // Everyone but rank 5 beats; 12 s of silence is past the configured 10 s
  // but within the stretched 13 s.
  auto beat_all_but = [&](int silent) {
    for (int rank = 0; rank < 16384; ++rank) {
      if (rank == silent) continue;
      ASSERT_TRUE(
          core_->Heartbeat(Beat(rank, 1, "w" + std::to_string(rank), 0, 0))
              .ok());
    }
  };
  Advance(milliseconds(4000));
  beat_all_but(5);
  Advance(milliseconds(4000));
  beat_all_but(5);
  Advance(milliseconds(4000));
  beat_all_but(5);
  core_->SweepLiveness();
  EXPECT_EQ(core_->GetWorld().state, WorldState::kComplete);
  Advance(milliseconds(1500));
  core_->SweepLiveness();
  WorldInfo world = core_->GetWorld();
  EXPECT_EQ(world.state, WorldState::kDegraded);
  EXPECT_EQ(world.members[5].state, MemberState::kLost);
  EXPECT_EQ(world.members[4].state, MemberState::kReady);
}

TEST_F(CoordinatorScaleTest, KvWaitReturnsTheValuesInTheOrderAsked) {
  Make(1);
  ASSERT_TRUE(core_->KvSet(0, "b", "2").ok());
  Result<KvWaitResult> wait;
  core_->KvWait(core_->NewWaitId(), 0, {"c", "b", "a"}, milliseconds(0),
                /*with_values=*/true, wait.callback());
  ASSERT_TRUE(core_->KvSet(0, "a", "1").ok());
  EXPECT_FALSE(wait.ready());
  ASSERT_TRUE(core_->KvSet(0, "c", "3").ok());
  auto r = wait.Get();
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->values.size(), 3u);
  EXPECT_EQ(*r->values[0], "3");
  EXPECT_EQ(*r->values[1], "2");
  EXPECT_EQ(*r->values[2], "1");

  Result<KvWaitResult> plain;
  core_->KvWait(core_->NewWaitId(), 0, {"a"}, milliseconds(0), false,
                plain.callback());
  EXPECT_TRUE(plain.Get()->values.empty());
}

TEST_F(CoordinatorScaleTest, ManyWaitersOnOneKeyShareItsValue) {
  Make(1);
  std::vector<std::unique_ptr<Result<KvWaitResult>>> waits;
  for (int i = 0; i < 2000; ++i) {
    waits.push_back(std::make_unique<Result<KvWaitResult>>());
    core_->KvWait(core_->NewWaitId(), 0, {"ids"}, milliseconds(0), true,
                  waits.back()->callback());
  }
  EXPECT_EQ(core_->Stats().kv.parked, 2000);
  ASSERT_TRUE(core_->KvSet(0, "ids", std::string(32, 'x')).ok());
  auto first = waits.front()->Get();
  ASSERT_TRUE(first.ok()) << first.status();
  for (auto& w : waits) {
    auto r = w->Get();
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->values.size(), 1u);
    EXPECT_EQ(r->values[0], first->values[0]);  // The same stored string.
  }
  EXPECT_EQ(core_->Stats().kv.parked, 0);
}

TEST_F(CoordinatorScaleTest, DeadGenerationsAreCollected) {
  Make(2);
  ASSERT_TRUE(FormWorld(2)[0].ok());  // Generation 1.
  ASSERT_TRUE(core_->KvSet(0, "gloo/0", std::string(100, 'a')).ok());
  ASSERT_TRUE(core_->ReserveSequence(0, "world", 10).ok());
  ASSERT_TRUE(core_->PostUniqueId(0, "world", "id1").ok());
  // And the two members' addresses, set as the generation started.
  EXPECT_EQ(core_->Stats().kv.keys, 3 + 2);

  // Generation 2: generation 1 is kept (calls in flight when it ended may
  // still read it), generation 0 had nothing.
  ASSERT_TRUE(Leave(1, 1, "w1").ok());
  ASSERT_TRUE(Register("w9")->Get().ok());
  ASSERT_TRUE(core_->KvSet(0, "gloo/0", "b").ok());
  EXPECT_EQ(core_->KvGet(1, "gloo/0")->second, std::string(100, 'a'));
  EXPECT_EQ(core_->Stats().kv.generations, 2);

  // Generation 3: generation 1 is gone, and saying so is actionable.
  ASSERT_TRUE(Leave(1, 2, "w9").ok());
  ASSERT_TRUE(Register("w10")->Get().ok());
  auto gone = core_->KvGet(1, "gloo/0");
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(gone.status().message(),
              HasSubstr("generation 1 is over (current is 3)"));
  EXPECT_EQ(core_->KvSet(1, "k", "v").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_->ReserveSequence(1, "world", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_->KvGet(2, "gloo/0")->second, "b");
  // What is left: generation 2's key, and the members' addresses of
  // generations 2 and 3.
  int64_t address_bytes = 0;
  for (int64_t generation : {2, 3}) {
    for (int rank : {0, 1}) {
      const std::string key = "addr/" + std::to_string(rank);
      auto address = core_->KvGet(generation, key);
      ASSERT_TRUE(address.ok()) << address.status();
      address_bytes +=
          static_cast<int64_t>(key.size() + address->second.size());
    }
  }
  const KvStats stats = core_->Stats().kv;
  EXPECT_EQ(stats.generations, 2);
  EXPECT_EQ(stats.keys, 1 + 4);
  EXPECT_EQ(stats.bytes, static_cast<int64_t>(std::string("gloo/0b").size()) +
                             address_bytes);
}

TEST_F(CoordinatorScaleTest, WaitsOfAnEndedGenerationFailAtOnce) {
  Make(2);
  ASSERT_TRUE(FormWorld(2)[0].ok());
  Result<KvWaitResult> kv;
  core_->KvWait(core_->NewWaitId(), 1, {"never"}, milliseconds(0), true,
                kv.callback());
  Result<UniqueIdResult> id;
  core_->GetUniqueId(core_->NewWaitId(), 1, "world", milliseconds(0),
                     id.callback());
  EXPECT_FALSE(kv.ready());
  ASSERT_TRUE(core_->Heartbeat(Beat(0, 1, "w0", 0, 0, "broken")).ok());
  EXPECT_EQ(kv.Get().status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(id.Get().status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(core_->Stats().kv.parked, 0);
}

}  // namespace
}  // namespace ccl::coordinator
