// Subgroups over a world's life on the backend this binary was built for
// (world.h): destroys that reached only some ranks when the world
// re-formed, and ops still queued on a group when it is destroyed.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/conformance/world.h"

namespace ccl::conformance {
namespace {

namespace groups_test {

bool Holds(WorkerCore& core, const std::string& name) {
  const auto groups = core.Groups();
  return std::any_of(groups.begin(), groups.end(),
                     [&](const auto& group) { return group.name == name; });
}

// Creates `name` over every rank at world seq `seq`.
void CreateEverywhere(World& w, const std::string& name, int64_t seq,
                      int64_t generation) {
  std::vector<int> ranks(static_cast<size_t>(w.size()));
  for (int r = 0; r < w.size(); ++r) ranks[static_cast<size_t>(r)] = r;
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < w.size(); ++r) {
    auto work = w[r].CreateGroup(name, ranks, seq, generation, kWait);
    ASSERT_TRUE(work.ok()) << "rank " << r << ": " << work.status();
    works.push_back(*work);
  }
  for (auto& work : works) {
    ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  }
}

}  // namespace groups_test

// A client's destroy that reached only some ranks when the world re-formed
// (the others were still to get it) stays done: the re-form makes the group
// again on no rank, rather than bringing it back on the rank whose destroy
// had answered OK, and the destroy's late arrival at the others still
// answers OK. A group nobody destroyed comes back everywhere.
TEST(Groups, ADestroyThatReachedSomeRanksHoldsAcrossAReform) {
  CCL_REQUIRE_RANKS(2);
  World w(2);
  ASSERT_NO_FATAL_FAILURE(groups_test::CreateEverywhere(w, "kept", 0, 1));
  ASSERT_NO_FATAL_FAILURE(groups_test::CreateEverywhere(w, "half", 1, 1));
  ASSERT_TRUE(w[0].DestroyGroup("half").ok());
  ASSERT_TRUE(groups_test::Holds(w[1], "half"));

  for (const absl::Status& status : w.Reform(2)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(groups_test::Holds(w[r], "kept")) << "rank " << r;
    EXPECT_FALSE(groups_test::Holds(w[r], "half")) << "rank " << r;
  }
  // The rest of the client's destroy arrives: done already, so OK; a
  // destroy again on the rank that did it is refused as before.
  EXPECT_TRUE(w[1].DestroyGroup("half").ok());
  EXPECT_EQ(w[1].DestroyGroup("half").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(w[0].DestroyGroup("half").code(), absl::StatusCode::kNotFound);

  // The name is free again, and the group made anew runs ops.
  ASSERT_NO_FATAL_FAILURE(groups_test::CreateEverywhere(w, "half", 0, 2));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        Alloc(w[r], "h", DType::kFloat32, 3, {FillKind::kRankPlusOne}).ok());
  }
  OpSpec sum = Op(OpKind::kAllReduce, 0, "h");
  sum.group = "half";
  for (const absl::Status& status : RunPerRank(w, {sum, sum})) {
    EXPECT_TRUE(status.ok()) << status;
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ReadAll(w[r], "h"), (std::vector<double>{3, 3, 3}));
  }
  // Nothing destroyed since: the next re-form keeps both.
  for (const absl::Status& status : w.Reform(3)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(groups_test::Holds(w[r], "kept")) << "rank " << r;
    EXPECT_TRUE(groups_test::Holds(w[r], "half")) << "rank " << r;
  }
}

// The names destroyed on a rank are remembered for the next re-form only up
// to the worker's --max-groups (DestroyedNames says why): with more destroys
// than that since the last re-form, the oldest half-destroyed group is made
// again everywhere, a live group the client can destroy again, instead of
// the rank keeping every name a long run ever destroyed.
TEST(Groups, OnlyTheNewestDestroysAreRememberedForAReform) {
  CCL_REQUIRE_RANKS(2);
  WorkerConfig config = DefaultConfig();
  config.max_groups = 4;  // the world, "half" and one more on rank 1
  World w(2, config);
  int64_t seq = 0;
  ASSERT_NO_FATAL_FAILURE(groups_test::CreateEverywhere(w, "half", seq++, 1));
  ASSERT_TRUE(w[0].DestroyGroup("half").ok());
  for (int i = 0; i < 4; ++i) {
    const std::string name = absl::StrCat("churn", i);
    ASSERT_NO_FATAL_FAILURE(groups_test::CreateEverywhere(w, name, seq++, 1));
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(w[r].DestroyGroup(name).ok());
  }

  for (const absl::Status& status : w.Reform(2)) {
    ASSERT_TRUE(status.ok()) << status;
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(groups_test::Holds(w[r], "half")) << "rank " << r;
    for (int i = 0; i < 4; ++i) {
      EXPECT_FALSE(groups_test::Holds(w[r], absl::StrCat("churn", i)))
          << "rank " << r;
    }
  }
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(w[r].DestroyGroup("half").ok());
}

// A group destroyed on one rank while its ops are still queued there: the
// ops run (the other rank runs them too) before the group goes, instead of
// being cancelled here and leaving the other rank's ops without a peer,
// which would break the group there and ask the world to re-form.
TEST(Groups, OpsQueuedWhenTheGroupIsDestroyedStillRun) {
  CCL_REQUIRE_RANKS(2);
  World w(2);
  ASSERT_NO_FATAL_FAILURE(groups_test::CreateEverywhere(w, "pair", 0, 1));
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        Alloc(w[r], "q", DType::kFloat32, 3, {FillKind::kRankPlusOne}).ok());
  }
  auto on_pair = [](int64_t seq) {
    OpSpec sum = Op(OpKind::kAllReduce, seq, "q");
    sum.group = "pair";
    return sum;
  };
  // Rank 0 queues both ops, then its client destroys the group; rank 1's
  // requests arrive after that.
  std::vector<std::shared_ptr<Work>> works;
  for (int64_t seq : {0, 1}) works.push_back(SubmitOk(w[0], on_pair(seq)));
  ASSERT_TRUE(w[0].DestroyGroup("pair").ok());
  EXPECT_FALSE(groups_test::Holds(w[0], "pair"));
  for (int64_t seq : {0, 1}) works.push_back(SubmitOk(w[1], on_pair(seq)));
  for (auto& work : works) {
    ASSERT_NE(work, nullptr);
    EXPECT_TRUE(work->Wait(kWait).ok()) << work->status();
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ReadAll(w[r], "q"), (std::vector<double>{6, 6, 6})) << r;
  }
  // Nothing broke on rank 1, so it has no reason to ask for a re-form.
  EXPECT_TRUE(w[1].CommunicatorHealth().ok()) << w[1].CommunicatorHealth();
  EXPECT_TRUE(w[1].DestroyGroup("pair").ok());
}

}  // namespace
}  // namespace ccl::conformance
