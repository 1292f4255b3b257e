// ccctl's helpers that need no cluster: the names of its temporary tensors
// (one per invocation, whatever the PID: every ccctl in a container is PID
// 1), and values as typed on the command line (exact for every integer
// dtype, refused when the dtype cannot hold them).
#include "client/ccctl/ccctl.h"

#include <cstring>
#include <set>

#include "client/ccctl/values.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ccl::ctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
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

// Past 2^53 a double skips odd integers: 9007199254740993 was stored as
// ...992, and -9223372036854775807 as INT64_MIN.
TEST(ValuesTest, Int64RoundTripsExactly) {
  auto bytes = EncodeValues(DType::kInt64,
                            "9007199254740993, -9223372036854775807, "
                            "9223372036854775807, -9223372036854775808, 0");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_EQ(bytes->size(), 5 * sizeof(int64_t));
  int64_t first = 0;
  std::memcpy(&first, bytes->data(), sizeof(first));
  EXPECT_EQ(first, int64_t{9007199254740993});
  EXPECT_THAT(DecodeValues(DType::kInt64, *bytes),
              ElementsAre("9007199254740993", "-9223372036854775807",
                          "9223372036854775807", "-9223372036854775808", "0"));
}

TEST(ValuesTest, EveryIntegerDTypeRoundTripsItsExtremes) {
  struct Case {
    DType dtype;
    std::string text;
    std::vector<std::string> back;
  };
  for (const Case& c :
       std::vector<Case>{{DType::kInt8, "-128,127,0", {"-128", "127", "0"}},
                         {DType::kUInt8, "0,255", {"0", "255"}},
                         {DType::kInt32,
                          "-2147483648,2147483647",
                          {"-2147483648", "2147483647"}},
                         {DType::kInt32, "3.0,1e3", {"3", "1000"}}}) {
    auto bytes = EncodeValues(c.dtype, c.text);
    ASSERT_TRUE(bytes.ok()) << c.text << ": " << bytes.status();
    EXPECT_EQ(DecodeValues(c.dtype, *bytes), c.back) << c.text;
  }
}

TEST(ValuesTest, AValueTheDTypeCannotHoldIsRefusedNotClamped) {
  struct Case {
    DType dtype;
    std::string text;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {DType::kInt8, "128", "value 128 does not fit int8 (-128..127)"},
           {DType::kUInt8, "-1", "value -1 does not fit uint8 (0..255)"},
           {DType::kInt32, "2147483648", "does not fit int32"},
           {DType::kInt64, "9223372036854775808", "does not fit int64"},
           {DType::kInt64, "1.5", "int64 takes integers; '1.5' is not one"},
           {DType::kInt32, "x", "int32 takes integers"},
           {DType::kFloat16, "70000", "does not fit float16"},
           {DType::kFloat32, "1e39", "does not fit float32"},
           {DType::kFp8E4M3, "500", "does not fit fp8_e4m3"},
           {DType::kFloat64, "abc", "'abc' is not a number"}}) {
    auto bytes = EncodeValues(c.dtype, c.text);
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument)
        << c.text;
    EXPECT_THAT(bytes.status().message(), HasSubstr(c.says)) << c.text;
  }
}

// Floats round to their type's nearest value, as torch.tensor does, and
// the non-finite ones are taken when asked for.
TEST(ValuesTest, FloatsRoundToTheirTypeAndTakeInfAndNan) {
  auto bytes = EncodeValues(DType::kFloat32, "0.1, inf, -inf, nan, 3");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_THAT(DecodeValues(DType::kFloat32, *bytes),
              ElementsAre("0.1", "inf", "-inf", "nan", "3.0"));
  auto half = EncodeValues(DType::kFloat16, "65504, 1.0009765625");
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_THAT(DecodeValues(DType::kFloat16, *half),
              ElementsAre("65504.0", "1.00098"));
}

TEST(ValuesTest, NothingToWriteIsRefused) {
  EXPECT_EQ(EncodeValues(DType::kFloat32, " , ").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ccl::ctl
