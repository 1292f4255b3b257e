// Every collective, every op kind, dtype and reduce op, in and out of place,
// against the host references (world.h), and the tutorials' examples.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/element.h"
#include "gtest/gtest.h"
#include "tests/conformance/world.h"

namespace ccl::conformance {
namespace {

class Conformance : public ::testing::TestWithParam<int> {};

TEST_P(Conformance, EveryCollectiveEverySizeInAndOutOfPlace) {
  CCL_REQUIRE_RANKS(GetParam());
  World w(GetParam());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (OpKind kind : kCollectives) {
    for (int64_t n : {1, 7, 1023, 65537}) {
      for (bool in_place : {false, true}) {
        Case c;
        c.kind = kind;
        c.n = n;
        c.in_place = in_place;
        c.root = static_cast<int>(n % w.size());
        RunCase(w, c);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(Conformance, EveryReduceOpAndDType) {
  CCL_REQUIRE_RANKS(GetParam());
  World w(GetParam());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (OpKind kind :
       {OpKind::kAllReduce, OpKind::kReduce, OpKind::kReduceScatter}) {
    for (DType dtype : kReducible) {
      for (ReduceOp op : kReduceOps) {
        // Refused before queueing (Validation covers it).
        if (op == ReduceOp::kPremulSum && !TakesPremulScale(dtype)) continue;
        for (bool in_place : {false, true}) {
          Case c;
          c.kind = kind;
          c.dtype = dtype;
          c.reduce_op = op;
          c.n = kind == OpKind::kAllReduce ? 1023 : 7;
          c.in_place = in_place;
          c.root = w.size() - 1;
          c.premul_scale = 0.5;
          RunCase(w, c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

TEST_P(Conformance, DataMovementForEveryDType) {
  CCL_REQUIRE_RANKS(GetParam());
  World w(GetParam());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (DType dtype :
       {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
        DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64,
        DType::kFp8E4M3, DType::kFp8E5M2}) {
    for (OpKind kind : {OpKind::kBroadcast, OpKind::kAllGather, OpKind::kGather,
                        OpKind::kScatter, OpKind::kAllToAll}) {
      Case c;
      c.kind = kind;
      c.dtype = dtype;
      c.n = 5;
      c.root = 1;
      RunCase(w, c);
      if (HasFatalFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, Conformance, ::testing::Values(2, 3, 4),
                         [](const auto& info) {
                           return "world" + std::to_string(info.param);
                         });

TEST(SeedExamples, FourRanks) {
  CCL_REQUIRE_RANKS(4);
  World w(4);
  std::vector<std::shared_ptr<Work>> works;
  auto run_all = [&](auto make_spec) {
    works.clear();
    for (int r = 0; r < 4; ++r) works.push_back(SubmitOk(w[r], make_spec(r)));
    for (auto& work : works) {
      ASSERT_NE(work, nullptr);
      ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
    }
  };

  // [rank + 1] all_reduce sum == [10].
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(
        Alloc(w[r], "x", DType::kFloat32, 1, {FillKind::kRankPlusOne}).ok());
  }
  run_all([](int) { return Op(OpKind::kAllReduce, 0, "x"); });
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(ReadAll(w[r], "x"), std::vector<double>{10});

  // Broadcast of [1, 2, 3] int64 from rank 0.
  for (int r = 0; r < 4; ++r) {
    AllocWith(
        w[r], "b", DType::kInt64,
        r == 0 ? std::vector<double>{1, 2, 3} : std::vector<double>{0, 0, 0});
  }
  run_all([](int) { return Op(OpKind::kBroadcast, 1, "b"); });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ReadAll(w[r], "b"), (std::vector<double>{1, 2, 3}));
  }

  // Gather of [rank, rank + 1, rank + 2] to rank 0; non-roots name no output.
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(
        Alloc(w[r], "g", DType::kInt32, 3, {FillKind::kArangePlusRank}).ok());
  }
  ASSERT_TRUE(Alloc(w[0], "gathered", DType::kInt32, 12, {}).ok());
  run_all([](int) { return Op(OpKind::kGather, 2, "g", "gathered"); });
  EXPECT_EQ(ReadAll(w[0], "gathered"),
            (std::vector<double>{0, 1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5}));

  // All-gather of [rank].
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(Alloc(w[r], "me", DType::kInt64, 1, {FillKind::kRank}).ok());
    ASSERT_TRUE(Alloc(w[r], "all", DType::kInt64, 4, {}).ok());
  }
  run_all([](int) { return Op(OpKind::kAllGather, 3, "me", "all"); });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ReadAll(w[r], "all"), (std::vector<double>{0, 1, 2, 3}));
  }

  // Reduce-scatter of [rank + i for i in range(4)]: rank r gets
  // sum_k (k + r) = 6 + 4r.
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(
        Alloc(w[r], "rs_in", DType::kFloat32, 4, {FillKind::kArangePlusRank})
            .ok());
    ASSERT_TRUE(Alloc(w[r], "rs_out", DType::kFloat32, 1, {}).ok());
  }
  run_all([](int) { return Op(OpKind::kReduceScatter, 4, "rs_in", "rs_out"); });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ReadAll(w[r], "rs_out"), std::vector<double>{6.0 + 4 * r});
  }
  // The timing fields are filled in.
  const OpTiming timing = works[0]->timing();
  EXPECT_GT(timing.enqueued_unix_us, 0);
  EXPECT_GE(timing.total_us, timing.device_us);
  EXPECT_GT(timing.total_us, 0);
}

TEST(SeedExamples, ScatterOnTwoRanks) {
  World w(2);
  AllocWith(w[0], "s", DType::kInt64, {0, 1, 2, 3});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(Alloc(w[r], "part", DType::kInt64, 2, {}).ok());
  }
  // Rank 1 has no input at all.
  auto w0 = SubmitOk(w[0], Op(OpKind::kScatter, 0, "s", "part"));
  auto w1 = SubmitOk(w[1], Op(OpKind::kScatter, 0, "", "part"));
  ASSERT_TRUE(w0->Wait(kWait).ok()) << w0->status();
  ASSERT_TRUE(w1->Wait(kWait).ok()) << w1->status();
  EXPECT_EQ(ReadAll(w[0], "part"), (std::vector<double>{0, 1}));
  EXPECT_EQ(ReadAll(w[1], "part"), (std::vector<double>{2, 3}));
}

// gloo::float16's copy assignment skips the copy when the old bits, read as
// an integer, encode to the new value. A reduction accumulating in place
// over such bits must still be right: here the old bits 0x0002 (a tiny
// subnormal, or the int 2) meet a sum that rounds to 2.0.
TEST(Float16, InPlaceSumOverBitsThatLookLikeTheResult) {
  World w(2);
  const uint16_t rank0[3] = {0x0002, 0x0004, 0x0001};
  const uint16_t rank1[3] = {0x4000, 0x4400, 0x3C00};  // 2.0, 4.0, 1.0
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(Alloc(w[r], "x", DType::kFloat16, 3, {}).ok());
    ASSERT_TRUE(
        w[r].Write("x", 0, std::as_bytes(std::span(r == 0 ? rank0 : rank1)))
            .ok());
  }
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < 2; ++r) {
    works.push_back(SubmitOk(w[r], Op(OpKind::kAllReduce, 0, "x")));
  }
  for (auto& work : works)
    ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ReadAll(w[r], "x"), (std::vector<double>{2.0, 4.0, 1.0})) << r;
  }
}
}  // namespace
}  // namespace ccl::conformance
