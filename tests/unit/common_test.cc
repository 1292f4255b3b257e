#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/element.h"
#include "common/huge_pages.h"
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
  EXPECT_EQ(EncodeNarrowFloat(DType::kFloat16, 1.0), 0x3C00);
  EXPECT_EQ(EncodeNarrowFloat(DType::kFloat16, -2.0), 0xC000);
  EXPECT_EQ(EncodeNarrowFloat(DType::kFloat16, 65504.0), 0x7BFF);
  EXPECT_EQ(EncodeNarrowFloat(DType::kFloat16, 1e6),
            0x7C00);  // overflow -> inf
  EXPECT_EQ(EncodeNarrowFloat(DType::kFloat16, 5.960464477539063e-08),
            0x0001);  // smallest subnormal
  EXPECT_DOUBLE_EQ(DecodeNarrowFloat(DType::kFloat16, 0x3555), 0.333251953125);
  EXPECT_TRUE(std::isnan(DecodeNarrowFloat(
      DType::kFloat16, EncodeNarrowFloat(DType::kFloat16, NAN))));
}

TEST(ElementTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(EncodeNarrowFloat(DType::kBFloat16, 1.0), 0x3F80);
  EXPECT_EQ(EncodeNarrowFloat(DType::kBFloat16, 3.0), 0x4040);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(EncodeNarrowFloat(DType::kBFloat16, 1.0 + std::ldexp(1.0, -8)),
            0x3F80);
  EXPECT_DOUBLE_EQ(DecodeNarrowFloat(DType::kBFloat16, 0x4049), 3.140625);
}

TEST(ElementTest, Fp8FormatsRoundTripAndSaturate) {
  EXPECT_EQ(EncodeNarrowFloat(DType::kFp8E4M3, 448.0), 0x7E);
  EXPECT_TRUE(std::isnan(DecodeNarrowFloat(
      DType::kFp8E4M3, EncodeNarrowFloat(DType::kFp8E4M3, 1000.0))));
  EXPECT_EQ(EncodeNarrowFloat(DType::kFp8E4M3, 1.0), 0x38);
  EXPECT_EQ(EncodeNarrowFloat(DType::kFp8E5M2, 1.0), 0x3C);
  EXPECT_EQ(EncodeNarrowFloat(DType::kFp8E5M2, 57344.0), 0x7B);
  for (int bits = 0; bits < 256; ++bits) {
    const double value =
        DecodeNarrowFloat(DType::kFp8E4M3, static_cast<uint8_t>(bits));
    if (!std::isnan(value)) {
      EXPECT_EQ(DecodeNarrowFloat(DType::kFp8E4M3,
                                  EncodeNarrowFloat(DType::kFp8E4M3, value)),
                value)
          << bits;
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

// The mappings of this process that overlap [begin, end), from
// /proc/self/smaps: each one's range and whether it is advised for huge
// pages (VmFlags "hg").
struct Mapping {
  uintptr_t start = 0;
  uintptr_t end = 0;
  bool huge_advised = false;
};
std::vector<Mapping> MappingsOverlapping(uintptr_t begin, uintptr_t end) {
  std::vector<Mapping> found;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  Mapping current;
  bool in_range = false;
  while (std::getline(smaps, line)) {
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos &&
        dash < space && line.find(':') > space) {
      current.start = std::stoull(line.substr(0, dash), nullptr, 16);
      current.end =
          std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      current.huge_advised = false;
      in_range = current.start < end && current.end > begin;
    } else if (in_range && line.rfind("VmFlags:", 0) == 0) {
      std::istringstream flags(line.substr(8));
      std::string flag;
      while (flags >> flag) current.huge_advised |= flag == "hg";
      found.push_back(current);
    }
  }
  return found;
}

// Only the 2 MiB-aligned interior of a buffer is advised: never a page
// beyond the buffer's own (a huge page there would make the neighbours'
// memory resident), and nothing for a buffer that holds no whole huge page.
TEST(HugePagesTest, AdvisesOnlyTheWholeHugePagesInsideTheBuffer) {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
    GTEST_SKIP() << "this kernel has no transparent huge pages";
  }
  constexpr size_t kHuge = size_t{2} << 20;
  constexpr size_t kMapped = 12 * kHuge;
  void* mapped = mmap(nullptr, kMapped, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  const auto base = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t first_huge = (base + kHuge - 1) & ~(kHuge - 1);
  // A buffer from a page before a huge page's boundary to a page past the
  // fifth boundary after it: the five whole huge pages between are advised,
  // not the partial ones at its ends.
  const uintptr_t buffer = first_huge + kHuge - 4096;
  const size_t bytes = 5 * kHuge + 8192;
  AdviseHugePages(reinterpret_cast<void*>(buffer), bytes);
  const uintptr_t advised_begin = first_huge + kHuge;
  const uintptr_t advised_end = first_huge + 6 * kHuge;
  size_t advised = 0;
  for (const Mapping& m : MappingsOverlapping(base, base + kMapped)) {
    if (!m.huge_advised) continue;
    EXPECT_GE(m.start, advised_begin) << "advised below the buffer's interior";
    EXPECT_LE(m.end, advised_end) << "advised above the buffer's interior";
    advised += m.end - m.start;
  }
  EXPECT_EQ(advised, advised_end - advised_begin);

  // Smaller than a huge page wherever it starts: nothing is advised.
  void* small = mmap(nullptr, 2 * kHuge, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(small, MAP_FAILED);
  const auto small_base = reinterpret_cast<uintptr_t>(small);
  AdviseHugePages(reinterpret_cast<void*>(small_base + 4096), kHuge);
  for (const Mapping& m :
       MappingsOverlapping(small_base, small_base + 2 * kHuge)) {
    EXPECT_FALSE(m.huge_advised) << "a buffer under 2 MiB was advised";
  }
  munmap(small, 2 * kHuge);
  munmap(mapped, kMapped);
}

}  // namespace
}  // namespace ccl
