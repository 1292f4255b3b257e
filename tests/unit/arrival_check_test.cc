// The arrival diagnosis of a failed op (server/core/arrival_check.h) over a
// KV store in memory: ranks that left a mark reached the op; of the others,
// one whose heartbeat says it finished the op is named as having finished
// it, never as having missed it (issue 15: a timeout's diagnosis named two
// ranks that had returned OK as "never reached").
#include "server/core/arrival_check.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/in_memory_kv_store.h"

namespace ccl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kSeq = 7;

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
      ArrivalCheck(&kv, kWorldGroup, 0, {0, 1, 2})(kSeq, /*arrival=*/true);
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
      ArrivalCheck(&kv, kWorldGroup, 0, {0, 1, 2, 3, 4})(kSeq, true);
  EXPECT_THAT(why, HasSubstr("rank 1 of group world finished seq 7"));
  // Rank 4 has no heartbeat progress (an older worker): still named.
  EXPECT_THAT(why, HasSubstr("ranks 2, 4 of group world never reached seq 7"));
  EXPECT_THAT(why, HasSubstr("rank 2 had finished every seq below 7"));
  EXPECT_THAT(why, Not(HasSubstr("rank 3 ")));
}

TEST(ArrivalCheck, WithoutHeartbeatProgressTheMissingRanksAreNamedAsBefore) {
  testing::InMemoryKvStore kv;
  const std::string why = ArrivalCheck(&kv, kWorldGroup, 1, {0, 1})(kSeq, true);
  EXPECT_THAT(why, HasSubstr("rank 0 of group world never reached seq 7"));
  EXPECT_THAT(why, Not(HasSubstr("last heartbeats")));
}

TEST(ArrivalCheck, EveryRankMarkedMeansEveryRankFailedThere) {
  testing::InMemoryKvStore kv;
  Mark(kv, kWorldGroup, kSeq, 1);
  Heartbeat(kv, kWorldGroup, 1, kSeq + 1);  // a mark outranks a heartbeat
  const std::string why = ArrivalCheck(&kv, kWorldGroup, 0, {0, 1})(kSeq, true);
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
  const std::string why = ArrivalCheck(&kv, "pair", 0, {1, 3})(kSeq, true);
  EXPECT_THAT(why, HasSubstr("rank 1 (world rank 3) of group pair finished"));
  EXPECT_THAT(why, Not(HasSubstr("never reached")));
}

}  // namespace
}  // namespace ccl
