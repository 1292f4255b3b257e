// The arrival diagnosis of a failed op (server/core/arrival_check.h) over a
// KV store in memory: ranks that left a mark reached the op; of the others,
// one whose heartbeat says it finished the op is named as having finished
// it, never as having missed it (issue 15: a timeout's diagnosis named two
// ranks that had returned OK as "never reached").
#include "server/core/arrival_check.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/in_memory_kv_store.h"

namespace ccl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSeq = 7;
constexpr Executor::Arrival kAfterTimeout = Executor::Arrival::kAfterTimeout;
constexpr Executor::Arrival kIfAPeerTimedOut =
    Executor::Arrival::kIfAPeerTimedOut;

// Rank `rank`'s mark for `seq` of `group`, as its own diagnosis leaves it.
void Mark(KvStore& kv, const std::string& group, int64_t seq, int rank) {
  ASSERT_TRUE(
      kv.Set(absl::StrCat("reached/", group, "/", seq, "/", rank), "1;").ok());
}

void Heartbeat(KvStore& kv, const std::string& group, int world_rank,
               int64_t finished_below) {
  ASSERT_TRUE(
      kv.Set(ProgressKey(group, world_rank), absl::StrCat(finished_below))
          .ok());
}

TEST(ArrivalCheck, ARankWhoseHeartbeatFinishedTheOpIsNotNamedAsMissing) {
  testing::InMemoryKvStore kv;
  Heartbeat(kv, kWorldGroup, 1, kSeq + 1);
  Heartbeat(kv, kWorldGroup, 2, kSeq + 3);
  const std::string why =
      ArrivalCheck(&kv, kWorldGroup, 0, {0, 1, 2})(kSeq, kAfterTimeout).why;
  EXPECT_THAT(why, HasSubstr("ranks 1, 2 of group world finished seq 7"));
  EXPECT_THAT(why, Not(HasSubstr("never reached")));
  EXPECT_THAT(why, Not(HasSubstr("every rank")));
}

TEST(ArrivalCheck, ARankBehindTheOpIsMissingWithWhereItLastWas) {
  testing::InMemoryKvStore kv;
  Heartbeat(kv, kWorldGroup, 1, kSeq + 1);  // finished it
  Heartbeat(kv, kWorldGroup, 2, kSeq);      // done only with the ones before
  Mark(kv, kWorldGroup, kSeq, 3);           // reached it and failed too
  const std::string why =
      ArrivalCheck(&kv, kWorldGroup, 0, {0, 1, 2, 3, 4})(kSeq, kAfterTimeout)
          .why;
  EXPECT_THAT(why, HasSubstr("rank 1 of group world finished seq 7"));
  // Rank 4 has no heartbeat progress (an older worker): still named.
  EXPECT_THAT(why, HasSubstr("ranks 2, 4 of group world never reached seq 7"));
  EXPECT_THAT(why, HasSubstr("rank 2 had finished every seq below 7"));
  EXPECT_THAT(why, Not(HasSubstr("rank 3 ")));
}

TEST(ArrivalCheck, WithoutHeartbeatProgressTheMissingRanksAreNamedAsBefore) {
  testing::InMemoryKvStore kv;
  const std::string why =
      ArrivalCheck(&kv, kWorldGroup, 1, {0, 1})(kSeq, kAfterTimeout).why;
  EXPECT_THAT(why, HasSubstr("rank 0 of group world never reached seq 7"));
  EXPECT_THAT(why, Not(HasSubstr("last heartbeats")));
}

TEST(ArrivalCheck, EveryRankMarkedMeansEveryRankFailedThere) {
  testing::InMemoryKvStore kv;
  Mark(kv, kWorldGroup, kSeq, 1);
  Heartbeat(kv, kWorldGroup, 1, kSeq + 1);  // a mark outranks a heartbeat
  const std::string why =
      ArrivalCheck(&kv, kWorldGroup, 0, {0, 1})(kSeq, kAfterTimeout).why;
  EXPECT_THAT(why,
              HasSubstr("every rank of group world reached seq 7 and failed"));
  EXPECT_THAT(why, Not(HasSubstr("finished seq")));
}

TEST(ArrivalCheck, SubgroupRanksAreReadByTheirWorldRank) {
  testing::InMemoryKvStore kv;
  // Group "pair" is world ranks 1 and 3; this is its rank 0 (world rank 1),
  // whose own key says it is behind: read by group rank, rank 1's progress
  // would look like that.
  Heartbeat(kv, "pair", 3, kSeq + 1);
  Heartbeat(kv, "pair", 1, kSeq);
  const std::string why =
      ArrivalCheck(&kv, "pair", 0, {1, 3})(kSeq, kAfterTimeout).why;
  EXPECT_THAT(why, HasSubstr("rank 1 (world rank 3) of group pair finished"));
  EXPECT_THAT(why, Not(HasSubstr("never reached")));
}

// A stopped rank 2: rank 0 times out first and aborts, which rank 1, whose
// own deadline is later (it started the op later on a busy machine), sees
// as a lost connection. Rank 1 still names the rank that never came, and
// says the op failed of a timeout (FailureTest's SIGSTOP case, which failed
// once under load saying only "Connection closed by peer").
TEST(ArrivalCheck, ALostConnectionAfterAPeersTimeoutNamesTheMissingRank) {
  testing::InMemoryKvStore kv;
  Heartbeat(kv, kWorldGroup, 2, kSeq);
  std::thread rank0([&] {
    const std::string why =
        ArrivalCheck(&kv, kWorldGroup, 0, {0, 1, 2})(kSeq, kAfterTimeout).why;
    EXPECT_THAT(why, HasSubstr("rank 2 of group world never reached seq 7"));
    EXPECT_THAT(why, Not(HasSubstr("rank 1 ")));
  });
  const Executor::Diagnosed rank1 =
      ArrivalCheck(&kv, kWorldGroup, 1, {0, 1, 2})(kSeq, kIfAPeerTimedOut);
  rank0.join();
  EXPECT_TRUE(rank1.peer_timed_out);
  EXPECT_THAT(rank1.why, HasSubstr("rank 0 of group world timed out on seq 7"));
  EXPECT_THAT(rank1.why,
              HasSubstr("rank 2 of group world never reached seq 7"));
  EXPECT_THAT(rank1.why, HasSubstr("rank 2 had finished every seq below 7"));
}

// A peer that died fails its neighbours at once while the other ranks
// still wait in the op for their deadline: with no peer saying it timed
// out, nobody is named as missing, since the ranks still waiting would be.
TEST(ArrivalCheck, ALostConnectionWithoutAPeersTimeoutNamesNobody) {
  testing::InMemoryKvStore kv;
  const auto start = std::chrono::steady_clock::now();
  const Executor::Diagnosed diagnosed =
      ArrivalCheck(&kv, kWorldGroup, 1, {0, 1, 2})(kSeq, kIfAPeerTimedOut);
  EXPECT_FALSE(diagnosed.peer_timed_out);
  EXPECT_THAT(diagnosed.why, Not(HasSubstr("never reached")));
  EXPECT_EQ(kv.size(), 0u) << "it left a mark for an op nobody timed out on";
  EXPECT_LE(std::chrono::steady_clock::now() - start, kArrivalCheckTime);
}

// The coordinator answers a KV wait in a generation that has ended at once,
// with ABORTED (a re-form began during the check), though its keys stay
// readable: a rank that marks during the rest of the window is still seen
// as having reached the op, and only the one that never marks is named.
class GenerationOverKvStore : public testing::InMemoryKvStore {
 public:
  absl::Status Wait(const std::vector<std::string>&,
                    std::chrono::milliseconds) override {
    return absl::AbortedError("kv wait: generation 1 is over (current is 2)");
  }
  // Rank 1 marks only after its mark was looked for three times.
  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    if (key == "reached/world/7/1" && ++looked_for_rank1_ == 3) {
      Mark(*this, kWorldGroup, kSeq, 1);
    }
    return InMemoryKvStore::Get(key, timeout);
  }

 private:
  int looked_for_rank1_ = 0;
};

TEST(ArrivalCheck, ACheckInAnEndedGenerationStillSeesLateMarks) {
  GenerationOverKvStore kv;
  const std::string why =
      ArrivalCheck(&kv, kWorldGroup, 0, {0, 1, 2})(kSeq, kAfterTimeout).why;
  EXPECT_THAT(why, HasSubstr("rank 2 of group world never reached seq 7"));
  EXPECT_THAT(why, Not(HasSubstr("1, 2")));
}

}  // namespace
}  // namespace ccl
