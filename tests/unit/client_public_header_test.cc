// The client library's public headers speak plain types: compiled first and
// alone, they must bring in no gRPC and no protobuf header (the build fails
// here if one does), and the names they give ccctl and experiments agree.
#include "client/cluster_client.h"
#include "client/types.h"

#if defined(GRPC_IMPL_CODEGEN_PORT_PLATFORM_H) || \
    defined(GRPC_SUPPORT_PORT_PLATFORM_H) || defined(GOOGLE_PROTOBUF_VERSION)
#error "client/cluster_client.h or client/types.h pulls in gRPC or protobuf"
#endif

#include <gtest/gtest.h>

namespace ccl::client {
namespace {

TEST(ClientTypesTest, EveryFillKindHasANameThatReadsBack) {
  for (FillKind kind :
       {FillKind::kZeros, FillKind::kOnes, FillKind::kConstant, FillKind::kRank,
        FillKind::kRankPlusOne, FillKind::kArange, FillKind::kArangePlusRank,
        FillKind::kRandom, FillKind::kAffine, FillKind::kUninitialized}) {
    const std::string name = FillKindName(kind);
    EXPECT_NE(name, "?");
    EXPECT_EQ(FillKindByName(name), kind) << name;
  }
  EXPECT_EQ(FillKindByName("rank+1"), FillKind::kRankPlusOne);
  EXPECT_EQ(FillKindByName("empty"), FillKind::kUninitialized);
  EXPECT_FALSE(FillKindByName("nope").has_value());
}

TEST(ClientTypesTest, StateNamesAreTheOnesCcctlPrints) {
  EXPECT_EQ(WorkStateName(WorkState::kCompleted), "completed");
  EXPECT_EQ(WorkStateName(WorkState::kUnknown), "unknown");
  EXPECT_EQ(MemberStateName(MemberState::kLost), "lost");
  EXPECT_EQ(WorldStateName(WorldState::kDegraded), "degraded");
}

TEST(ClientTypesTest, APlanStepIsACollectiveOrPointToPoint) {
  Op send;
  send.kind = OpKind::kSend;
  send.peer = 1;
  const PlanStep p2p = PlanStep::PointToPoint({{0, send}});
  ASSERT_TRUE(p2p.point_to_point.has_value());
  EXPECT_EQ(p2p.point_to_point->at(0).peer, 1);
  EXPECT_FALSE(PlanStep::Collective(Op{}).point_to_point.has_value());
}

}  // namespace
}  // namespace ccl::client
