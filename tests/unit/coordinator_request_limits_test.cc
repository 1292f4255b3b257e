// The coordinator's request limits: what a request may carry before any of
// it reaches the core. Cases come from what the fuzzer found.
#include <gtest/gtest.h>

#include <cstdint>

#include "coordinator/request_limits.h"

namespace ccl::coordinator {
namespace {

TEST(CoordinatorRequestLimitsTest, GenerationsAreBoundedSoTheNextOneFits) {
  CoordinatorLimits limits;
  v1::RegisterRequest request;
  request.set_address("127.0.0.1:1");
  EXPECT_TRUE(ValidateRequest(request, limits).ok());
  // The core forms a new world one above the highest generation a member
  // knew of: INT64_MAX there overflowed (coordinator_request_fuzzer).
  request.set_known_generation(INT64_MAX);
  EXPECT_EQ(ValidateRequest(request, limits).code(),
            absl::StatusCode::kInvalidArgument);
  request.set_known_generation(limits.max_generation);
  EXPECT_TRUE(ValidateRequest(request, limits).ok());
  request.set_resume_generation(limits.max_generation + 1);
  EXPECT_EQ(ValidateRequest(request, limits).code(),
            absl::StatusCode::kInvalidArgument);

  v1::HeartbeatRequest heartbeat;
  heartbeat.set_generation(INT64_MAX);
  EXPECT_EQ(ValidateRequest(heartbeat, limits).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CoordinatorRequestLimitsTest, EveryLimitMustBePositive) {
  CoordinatorLimits limits;
  EXPECT_TRUE(ValidateLimits(limits).ok());
  limits.max_generation = 0;
  EXPECT_EQ(ValidateLimits(limits).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ccl::coordinator
