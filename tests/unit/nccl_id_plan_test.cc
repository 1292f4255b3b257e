// The NCCL unique-id plan (which ranks make ids, which keys carry them),
// checked without CUDA: it is plain arithmetic, and the rendezvous benchmark
// plays it for worlds far larger than any test machine's GPUs.
#include <string>
#include <vector>

#include "common/unique_id_plan.h"
#include "gtest/gtest.h"

namespace ccl::nccl {
namespace {

TEST(UniqueIdPlanTest, OneIdUpToRanksPerRootThenOnePerBlock) {
  EXPECT_EQ(UniqueIdCount(1, 128), 1);
  EXPECT_EQ(UniqueIdCount(128, 128), 1);
  EXPECT_EQ(UniqueIdCount(129, 128), 2);
  EXPECT_EQ(UniqueIdCount(16384, 128), 128);
  // Every rank gets every id: beyond 128 ids the blocks grow instead.
  EXPECT_EQ(UniqueIdCount(65536, 128), kMaxUniqueIds);
  EXPECT_EQ(UniqueIdCount(65536, 1), kMaxUniqueIds);
  EXPECT_EQ(UniqueIdCount(16384, 0), 1);  // 0: always one id.
  EXPECT_EQ(UniqueIdCount(2, 1), 2);      // How the GPU machine runs it.
}

TEST(UniqueIdPlanTest, BlocksPartitionTheRanksAsNcclDoes) {
  for (int size : {2, 7, 129, 1000, 16384}) {
    for (int ids : {1, 2, 3, 8, 128}) {
      if (ids > size) continue;
      std::vector<int> count(ids, 0);
      for (int rank = 0; rank < size; ++rank) {
        const int block = BlockOfRank(rank, size, ids);
        ASSERT_GE(block, 0);
        ASSERT_LT(block, ids);
        ASSERT_LE(FirstRankOfBlock(block, size, ids), rank);
        if (block + 1 < ids) {
          ASSERT_LT(rank, FirstRankOfBlock(block + 1, size, ids));
        }
        ++count[block];
      }
      // Contiguous blocks whose lengths differ by at most one, the longer
      // ones first.
      for (int b = 1; b < ids; ++b) {
        EXPECT_LE(count[b], count[b - 1]) << size << " " << ids;
        EXPECT_LE(count[0] - count[b], 1) << size << " " << ids;
      }
      EXPECT_EQ(FirstRankOfBlock(0, size, ids), 0);
    }
  }
}

TEST(UniqueIdPlanTest, TheFirstRankOfEachBlockPostsAndRankZeroGathers) {
  constexpr int kSize = 1000;
  constexpr int kPerRoot = 128;  // 8 ids: blocks of 125.
  int posters = 0;
  for (int rank = 0; rank < kSize; ++rank) {
    const UniqueIdPlan plan = PlanUniqueIds(rank, kSize, kPerRoot);
    EXPECT_EQ(plan.ids, 8);
    EXPECT_EQ(plan.block, rank / 125);
    EXPECT_EQ(plan.posts, rank % 125 == 0) << rank;
    EXPECT_EQ(plan.gathers, rank == 0);
    posters += plan.posts;
  }
  EXPECT_EQ(posters, 8);
  // A small world: rank 0 posts the one id and gathers nothing.
  const UniqueIdPlan small = PlanUniqueIds(0, 4, kPerRoot);
  EXPECT_EQ(small.ids, 1);
  EXPECT_TRUE(small.posts);
  EXPECT_FALSE(small.gathers);
  EXPECT_FALSE(PlanUniqueIds(3, 4, kPerRoot).posts);
}

TEST(UniqueIdPlanTest, KeyNames) {
  EXPECT_EQ(UniqueIdKey("gen3/world"), "nccl/gen3/world/id");
  EXPECT_EQ(UniqueIdKey("gen3/world", 7), "nccl/gen3/world/id/7");
  EXPECT_EQ(UniqueIdListKey("gen3/world"), "nccl/gen3/world/ids");
}

TEST(UniqueIdPlanTest, PackedListsDropTrailingZerosAndRoundTrip) {
  // As ncclGetUniqueId leaves them: a handle up front, zeros after it.
  std::string ipv4(kUniqueIdBytes, '\0');
  // magic, AF_INET, port, 10.0.0.1 (then sin_zero)
  ipv4.replace(0, 16, std::string("magic-0\x01\x02\0\x10\x05\x0a\0\0\x01", 16));
  std::string ipv6(kUniqueIdBytes, '\0');
  ipv6.replace(0, 36, std::string(36, '\x7f'));
  const std::string full(kUniqueIdBytes, '\xff');
  const std::string zero(kUniqueIdBytes, '\0');
  // Zeros inside an id are kept; only the trailing ones go.
  std::string inner(kUniqueIdBytes, '\0');
  inner[3] = 'a';
  inner[9] = 'b';
  const std::vector<std::string> ids = {ipv4, ipv6, full, zero, inner};
  const std::string packed = PackUniqueIds(ids);
  EXPECT_EQ(packed.size(), (1 + 16) + (1 + 36) + (1 + 128) + 1 + (1 + 10));
  absl::StatusOr<std::vector<std::string>> back = UnpackUniqueIds(packed, 5);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, ids);

  // 128 IPv6 ids, the most a world has: 4.7 KiB instead of 16 KiB.
  EXPECT_EQ(PackUniqueIds(std::vector<std::string>(128, ipv6)).size(),
            128u * 37);

  // A count or a size that does not match is refused, never guessed.
  EXPECT_FALSE(UnpackUniqueIds(packed, 4).ok());
  EXPECT_FALSE(UnpackUniqueIds(packed, 6).ok());
  EXPECT_FALSE(UnpackUniqueIds(packed.substr(0, packed.size() - 1), 5).ok());
  EXPECT_FALSE(UnpackUniqueIds(packed + "x", 5).ok());
  EXPECT_FALSE(UnpackUniqueIds(std::string(1, '\x81') + full + "x", 1).ok());
  EXPECT_FALSE(UnpackUniqueIds("", 0).ok());
}

TEST(UniqueIdPlanTest, RanksPerRootParsing) {
  EXPECT_EQ(*ParseRanksPerRoot(nullptr), kDefaultRanksPerRoot);
  EXPECT_EQ(*ParseRanksPerRoot(""), kDefaultRanksPerRoot);
  EXPECT_EQ(*ParseRanksPerRoot("0"), 0);
  EXPECT_EQ(*ParseRanksPerRoot("64"), 64);
  for (const char* bad : {"-1", "x", "1.5"}) {
    EXPECT_EQ(ParseRanksPerRoot(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace ccl::nccl
