#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "common/element.h"
#include "common/timer_queue.h"
#include "common/types.h"
#include "gtest/gtest.h"

namespace ccl {
namespace {

TEST(TypesTest, ParsesTorchNamesAndAliases) {
  EXPECT_EQ(*ParseDType("float32"), DType::kFloat32);
  EXPECT_EQ(*ParseDType("BF16"), DType::kBFloat16);
  EXPECT_EQ(*ParseDType("fp8_e4m3"), DType::kFp8E4M3);
  EXPECT_FALSE(ParseDType("float7").ok());
  EXPECT_EQ(*ParseReduceOp("max"), ReduceOp::kMax);
  EXPECT_EQ(*ParseReduceOp("product"), ReduceOp::kProd);
  EXPECT_EQ(ParseReduceOp("xor").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*ParseDevice("cuda:3"), (Device{DeviceKind::kCuda, 3}));
  EXPECT_EQ(*ParseDevice("cpu"), (Device{DeviceKind::kCpu, 0}));
  EXPECT_FALSE(ParseDevice("cuda:-1").ok());
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeName(DType::kInt64), "int64");
}

TEST(ElementTest, HalfMatchesKnownEncodings) {
  EXPECT_EQ(DoubleToHalf(1.0), 0x3C00);
  EXPECT_EQ(DoubleToHalf(-2.0), 0xC000);
  EXPECT_EQ(DoubleToHalf(65504.0), 0x7BFF);
  EXPECT_EQ(DoubleToHalf(1e6), 0x7C00);                    // overflow -> inf
  EXPECT_EQ(DoubleToHalf(5.960464477539063e-08), 0x0001);  // smallest subnormal
  EXPECT_DOUBLE_EQ(HalfToDouble(0x3555), 0.333251953125);
  EXPECT_TRUE(std::isnan(HalfToDouble(DoubleToHalf(NAN))));
}

TEST(ElementTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(DoubleToBFloat16(1.0), 0x3F80);
  EXPECT_EQ(DoubleToBFloat16(3.0), 0x4040);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(DoubleToBFloat16(1.0 + std::ldexp(1.0, -8)), 0x3F80);
  EXPECT_DOUBLE_EQ(BFloat16ToDouble(0x4049), 3.140625);
}

TEST(ElementTest, Fp8FormatsRoundTripAndSaturate) {
  EXPECT_EQ(DoubleToFp8E4M3(448.0), 0x7E);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToDouble(DoubleToFp8E4M3(1000.0))));
  EXPECT_EQ(DoubleToFp8E4M3(1.0), 0x38);
  EXPECT_EQ(DoubleToFp8E5M2(1.0), 0x3C);
  EXPECT_EQ(DoubleToFp8E5M2(57344.0), 0x7B);
  for (int bits = 0; bits < 256; ++bits) {
    const double value = Fp8E4M3ToDouble(static_cast<uint8_t>(bits));
    if (!std::isnan(value)) {
      EXPECT_EQ(Fp8E4M3ToDouble(DoubleToFp8E4M3(value)), value) << bits;
    }
  }
}

TEST(ElementTest, IntegersSaturate) {
  int8_t buffer[2];
  StoreElement(DType::kInt8, buffer, 0, 300.0);
  StoreElement(DType::kInt8, buffer, 1, -300.0);
  EXPECT_EQ(LoadElement(DType::kInt8, buffer, 0), 127);
  EXPECT_EQ(LoadElement(DType::kInt8, buffer, 1), -128);
}

TEST(TimerQueueTest, RunsInDeadlineOrderAndCancels) {
  TimerQueue timers;
  std::atomic<int> order{0};
  std::atomic<int> first{-1}, second{-1};
  std::atomic<bool> cancelled_ran{false};
  timers.ScheduleAfter(std::chrono::milliseconds(40),
                       [&] { second = order++; });
  timers.ScheduleAfter(std::chrono::milliseconds(10), [&] { first = order++; });
  auto id = timers.ScheduleAfter(std::chrono::milliseconds(20),
                                 [&] { cancelled_ran = true; });
  EXPECT_TRUE(timers.Cancel(id));
  EXPECT_FALSE(timers.Cancel(id));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  EXPECT_FALSE(cancelled_ran);
}

}  // namespace
}  // namespace ccl
