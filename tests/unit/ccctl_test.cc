// The names of ccctl's temporary tensors: one per invocation, whatever the
// PID (every ccctl in a container is PID 1).
#include "client/ccctl/ccctl.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ccl::ctl {
namespace {

using ::testing::MatchesRegex;

TEST(TemporaryPrefixTest, NamesTheCommandAndEndsInADot) {
  EXPECT_THAT(TemporaryPrefix("op"),
              MatchesRegex("ccctl\\.op\\.[0-9a-f]{16}\\."));
  EXPECT_THAT(TemporaryPrefix("run.bench"),
              MatchesRegex("ccctl\\.run\\.bench\\.[0-9a-f]{16}\\."));
}

// Two invocations in one process, as two containers whose ccctl are both
// PID 1, never share a prefix.
TEST(TemporaryPrefixTest, DiffersBetweenCallsOfOneProcess) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) seen.insert(TemporaryPrefix("op"));
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace ccl::ctl
