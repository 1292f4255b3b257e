// The worker's tensor store, through WorkerCore (no world needed) and
// directly where the op-side API (Hold/Release) is involved.
#include "server/core/tensor_store.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/element.h"
#include "gtest/gtest.h"
#include "server/core/fill.h"
#include "server/core/worker_core.h"

namespace ccl {
namespace {

constexpr DType kAllDTypes[] = {
    DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
    DType::kInt8,    DType::kUInt8,   DType::kInt32,   DType::kInt64,
    DType::kFp8E4M3, DType::kFp8E5M2};

TensorMeta Spec(const std::string& name, DType dtype,
                std::vector<int64_t> shape) {
  TensorMeta meta;
  meta.name = name;
  meta.dtype = dtype;
  meta.shape = std::move(shape);
  return meta;
}

std::unique_ptr<WorkerCore> MakeCore(int64_t quota = 0) {
  WorkerConfig config;
  config.tensor_quota_bytes = quota;
  auto core = WorkerCore::Create(config);
  EXPECT_TRUE(core.ok()) << core.status();
  return *std::move(core);
}

std::vector<double> ReadAll(WorkerCore& core, const std::string& name,
                            DType dtype) {
  std::vector<std::byte> bytes;
  absl::Status status = core.Read(
      name, 0, 0, 0, [&](int64_t offset, std::span<const std::byte> c) {
        EXPECT_EQ(offset, static_cast<int64_t>(bytes.size()));
        bytes.insert(bytes.end(), c.begin(), c.end());
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  const size_t n = bytes.size() / DTypeSize(dtype);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = LoadElement(dtype, bytes.data(), i);
  return out;
}

TEST(TensorStoreTest, FillsEveryKindForEveryDType) {
  auto core = MakeCore();
  const std::vector<Fill> fills = {
      {FillKind::kZeros},
      {FillKind::kOnes},
      {FillKind::kConstant, 3.5},
      {FillKind::kRank},
      {FillKind::kRankPlusOne},
      {FillKind::kArange},
      {FillKind::kArangePlusRank},
      {FillKind::kRandom, 0, 0, 0, 42},
      {FillKind::kAffine, 2, 5, 0.5},
  };
  int id = 0;
  for (DType dtype : kAllDTypes) {
    for (const Fill& fill : fills) {
      const std::string name = "t" + std::to_string(id++);
      auto meta = core->Alloc(Spec(name, dtype, {3, 5}), fill);
      ASSERT_TRUE(meta.ok()) << meta.status();
      EXPECT_EQ(meta->numel, 15);
      EXPECT_EQ(meta->bytes, 15 * static_cast<int64_t>(DTypeSize(dtype)));
      const std::vector<double> values = ReadAll(*core, name, dtype);
      ASSERT_EQ(values.size(), 15u);
      for (int64_t i = 0; i < 15; ++i) {
        // Rank is 0 before a world is formed.
        const double want = RoundToDType(dtype, FillValue(fill, 0, i));
        EXPECT_EQ(values[i], want)
            << DTypeName(dtype) << " fill " << static_cast<int>(fill.kind)
            << " element " << i;
        if (fill.kind == FillKind::kRandom && IsFloatingPoint(dtype)) {
          EXPECT_GE(values[i], 0);
          EXPECT_LE(values[i], 1);
        }
      }
    }
  }
}

TEST(TensorStoreTest, FillValuesFollowRankAndSeed) {
  EXPECT_EQ(FillValue({FillKind::kRank}, 3, 10), 3);
  EXPECT_EQ(FillValue({FillKind::kRankPlusOne}, 3, 10), 4);
  EXPECT_EQ(FillValue({FillKind::kArangePlusRank}, 3, 10), 13);
  EXPECT_EQ(FillValue({FillKind::kAffine, 1, 10, 0.5}, 2, 4), 1 + 20 + 2);
  const Fill random{FillKind::kRandom, 0, 0, 0, 7};
  EXPECT_EQ(FillValue(random, 1, 5), FillValue(random, 1, 5));
  EXPECT_NE(FillValue(random, 1, 5), FillValue(random, 2, 5));
  EXPECT_NE(FillValue(random, 1, 5),
            FillValue({FillKind::kRandom, 0, 0, 0, 8}, 1, 5));
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double v = FillValue(random, 0, i);
    ASSERT_GE(v, 0);
    ASSERT_LT(v, 1);
    sum += v;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
  // The constant fast path replicates the encoded element exactly.
  std::vector<uint16_t> half(1001);
  FillBuffer(DType::kFloat16, half.data(), 1001, {FillKind::kConstant, 1.5}, 0);
  for (uint16_t h : half) ASSERT_EQ(h, EncodeNarrowFloat(DType::kFloat16, 1.5));
}

TEST(TensorStoreTest, RejectsDuplicatesUnknownAndBadSpecs) {
  auto core = MakeCore();
  ASSERT_TRUE(core->Alloc(Spec("a", DType::kFloat32, {4}), {}).ok());
  EXPECT_EQ(core->Alloc(Spec("a", DType::kFloat32, {4}), {}).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(core->Free("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core->Summarize("nope", 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(core->Write("nope", 0, {}).status().code(),
            absl::StatusCode::kNotFound);

  for (const std::string& bad :
       {std::string(""), std::string("has space"), std::string("semi;colon"),
        std::string(257, 'x'), std::string("tab\t")}) {
    auto status = core->Alloc(Spec(bad, DType::kFloat32, {1}), {}).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(
      core->Alloc(Spec(std::string(256, 'y'), DType::kInt8, {1}), {}).ok());
  EXPECT_TRUE(
      core->Alloc(Spec("ok.name:v1/part-2_x", DType::kInt8, {1}), {}).ok());

  auto negative = core->Alloc(Spec("neg", DType::kFloat32, {2, -1}), {});
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("neg"), std::string::npos);
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(core->Alloc(Spec("huge", DType::kFloat32, {big, big}), {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core->Alloc(Spec("huge2", DType::kFloat64,
                             {std::numeric_limits<int64_t>::max() / 4}),
                        {})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  TensorMeta cuda = Spec("gpu", DType::kFloat32, {1});
  cuda.device = Device{DeviceKind::kCuda, 0};
  auto status = core->Alloc(cuda, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("cpu"), std::string::npos);

  // Zero-sized and scalar tensors are fine.
  auto empty = core->Alloc(Spec("empty", DType::kFloat32, {0, 3}), {});
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->numel, 0);
  auto scalar =
      core->Alloc(Spec("scalar", DType::kFloat32, {}), {FillKind::kOnes});
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->numel, 1);
  EXPECT_EQ(ReadAll(*core, "scalar", DType::kFloat32),
            std::vector<double>{1.0});
}

TEST(TensorStoreTest, EnforcesQuotaAndFreesBytes) {
  auto core = MakeCore(/*quota=*/1000);
  ASSERT_TRUE(core->Alloc(Spec("a", DType::kFloat32, {200}), {}).ok());
  EXPECT_EQ(core->BytesInUse(), 800);
  auto over = core->Alloc(Spec("b", DType::kFloat32, {51}), {});
  ASSERT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("204"), std::string::npos);
  EXPECT_NE(over.status().message().find("200"), std::string::npos);
  ASSERT_TRUE(core->Alloc(Spec("b", DType::kFloat32, {50}), {}).ok());
  EXPECT_EQ(core->BytesInUse(), 1000);
  EXPECT_EQ(core->List().size(), 2u);
  auto freed = core->Free("a");
  ASSERT_TRUE(freed.ok());
  EXPECT_EQ(*freed, 800);
  EXPECT_EQ(core->BytesInUse(), 200);
  EXPECT_TRUE(core->Alloc(Spec("c", DType::kFloat64, {100}), {}).ok());
  EXPECT_EQ(core->List().size(), 2u);
}

TEST(TensorStoreTest, WritesAndReadsRanges) {
  auto core = MakeCore();
  ASSERT_TRUE(
      core->Alloc(Spec("t", DType::kInt32, {10}), {FillKind::kArange}).ok());
  const int32_t patch[3] = {100, 101, 102};
  auto written = core->Write(
      "t", 8,
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(patch),
                                 sizeof(patch)));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(ReadAll(*core, "t", DType::kInt32),
            (std::vector<double>{0, 1, 100, 101, 102, 5, 6, 7, 8, 9}));
  EXPECT_EQ(
      core->Write("t", 32,
                  std::span<const std::byte>(
                      reinterpret_cast<const std::byte*>(patch), sizeof(patch)))
          .status()
          .code(),
      absl::StatusCode::kOutOfRange);
  EXPECT_EQ(core->Write("t", -1, {}).status().code(),
            absl::StatusCode::kOutOfRange);

  // Element range [3, 9) in chunks of 2 elements (9 bytes rounds down to 8).
  std::vector<std::pair<int64_t, size_t>> chunks;
  std::vector<int32_t> got;
  ASSERT_TRUE(core->Read("t", 3, 6, 9,
                         [&](int64_t offset, std::span<const std::byte> c) {
                           chunks.emplace_back(offset, c.size());
                           const size_t old = got.size();
                           got.resize(old + c.size() / 4);
                           std::memcpy(got.data() + old, c.data(), c.size());
                           return true;
                         })
                  .ok());
  EXPECT_EQ(got, (std::vector<int32_t>{101, 102, 5, 6, 7, 8}));
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0], (std::pair<int64_t, size_t>{12, 8}));
  EXPECT_EQ(chunks[2], (std::pair<int64_t, size_t>{28, 8}));

  // The sink can stop early.
  int calls = 0;
  ASSERT_TRUE(core->Read("t", 0, 0, 4,
                         [&](int64_t, std::span<const std::byte>) {
                           return ++calls < 2;
                         })
                  .ok());
  EXPECT_EQ(calls, 2);

  auto noop = [](int64_t, std::span<const std::byte>) { return true; };
  EXPECT_EQ(core->Read("t", 11, 0, 0, noop).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(core->Read("t", 5, 6, 0, noop).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(core->Read("t", -1, 1, 0, noop).code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(core->Read("t", 10, 0, 0, noop).ok());  // empty tail
}

TEST(TensorStoreTest, Summarizes) {
  auto core = MakeCore();
  ASSERT_TRUE(core->Alloc(Spec("t", DType::kFloat32, {5}),
                          {FillKind::kAffine, -2, 0, 1})
                  .ok());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(
      core->Write("t", 16,
                  std::span<const std::byte>(
                      reinterpret_cast<const std::byte*>(&nan), sizeof(nan)))
          .ok());
  auto summary = core->Summarize("t", 3);
  ASSERT_TRUE(summary.ok()) << summary.status();
  // -2, -1, 0, 1, NaN
  EXPECT_EQ(summary->sum, -2);
  EXPECT_EQ(summary->min, -2);
  EXPECT_EQ(summary->max, 1);
  EXPECT_EQ(summary->nan_count, 1);
  EXPECT_EQ(summary->head, (std::vector<double>{-2, -1, 0}));
  EXPECT_EQ(summary->meta.numel, 5);

  // FNV-1a 64 of the raw bytes.
  float raw[5] = {-2, -1, 0, 1, nan};
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < sizeof(raw); ++i) {
    hash ^= reinterpret_cast<const unsigned char*>(raw)[i];
    hash *= 0x100000001b3ULL;
  }
  EXPECT_EQ(summary->checksum, hash);
  EXPECT_EQ(core->Summarize("t", 100)->head.size(), 5u);
  EXPECT_EQ(core->Summarize("t", -1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorStoreTest, CountsTensorsAgainstItsLimit) {
  TensorStore store(Device{}, 0, MakeHostMemory(), /*max_tensors=*/2);
  ASSERT_TRUE(store.Alloc(Spec("a", DType::kFloat32, {4}), {}, 0).ok());
  ASSERT_TRUE(store.Alloc(Spec("b", DType::kFloat32, {4}), {}, 0).ok());
  auto third = store.Alloc(Spec("c", DType::kFloat32, {4}), {}, 0);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.status().message().find("--max-tensors"), std::string::npos)
      << third.status();
  // Freeing makes room again; the others are untouched.
  ASSERT_TRUE(store.Free("a").ok());
  EXPECT_TRUE(store.Alloc(Spec("c", DType::kFloat32, {4}), {}, 0).ok());
  EXPECT_EQ(store.List().size(), 2u);
}

TEST(TensorStoreTest, BusyTensorsRefuseHostAccess) {
  TensorStore store(Device{}, 0, MakeHostMemory());
  ASSERT_TRUE(store.Alloc(Spec("t", DType::kFloat32, {4}), {}, 0).ok());
  auto tensor = store.Lookup("t");
  ASSERT_TRUE(tensor.ok());
  ASSERT_TRUE(store.Hold({*tensor}, 7, "all_reduce seq 5 of group world").ok());
  auto freed = store.Free("t");
  ASSERT_EQ(freed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(freed.status().message().find("all_reduce seq 5"),
            std::string::npos);
  EXPECT_EQ(store.Write("t", 0, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store
                .Read("t", 0, 0, 0,
                      [](int64_t, std::span<const std::byte>) { return true; })
                .code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store.Summarize("t", 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  store.Release({*tensor}, 7);
  EXPECT_TRUE(store.Free("t").ok());
  // A tensor freed between Lookup and Hold is not held.
  EXPECT_EQ(store.Hold({*tensor}, 8, "x").code(), absl::StatusCode::kNotFound);
}

// The element-wise device fill kernel runs fill_math.h's ElementFillValue +
// StoreFillElement; here their host instantiation is checked byte for byte
// against FillValue + StoreElement (what the host path writes).
TEST(FillMathTest, ElementFillsMatchHostFillForEveryDType) {
  const std::vector<Fill> fills = {
      {FillKind::kArange},
      {FillKind::kArangePlusRank},
      {FillKind::kRandom, 0, 0, 0, 0},
      {FillKind::kRandom, 0, 0, 0, 0x123456789abcdefULL},
      {FillKind::kAffine, 2, 5, 0.5},
      {FillKind::kAffine, 0.1, -0.3, 0.7},
      {FillKind::kAffine, -300.25, 1000.5, 1.0 / 3},
      {FillKind::kAffine, 65000, 1, 3.5},        // across fp16 overflow
      {FillKind::kAffine, 1e-30, 1e-31, -3e-8},  // small floats, subnormals
      {FillKind::kAffine, 9.2e18, 1e16, 1e15},   // int64 saturation
      {FillKind::kAffine, -1e38, 1e37, 3e36},    // bf16 / f32 overflow
      {FillKind::kAffine, -0.0, 0, 0},
      {FillKind::kAffine, 448, 16, 7.9},  // fp8 e4m3 saturation
  };
  std::vector<int64_t> indices;
  for (int64_t i = 0; i < 4000; ++i) indices.push_back(i);
  for (int64_t big : {int64_t{1} << 31, int64_t{1} << 53, int64_t{1} << 62}) {
    for (int64_t d = -3; d <= 3; ++d) indices.push_back(big + d);
  }
  constexpr int64_t kNumel = (int64_t{1} << 62) + 4;
  for (DType dtype : kAllDTypes) {
    const size_t esize = DTypeSize(dtype);
    for (const Fill& fill : fills) {
      for (int rank : {0, 1, 7, 1000}) {
        const auto params = ElementFillFor(fill, rank, kNumel);
        ASSERT_TRUE(params.has_value()) << static_cast<int>(fill.kind);
        for (int64_t i : indices) {
          alignas(8) unsigned char want[8] = {};
          alignas(8) unsigned char got[8] = {};
          StoreElement(dtype, want, 0, FillValue(fill, rank, i));
          StoreFillElement(dtype, got, 0, ElementFillValue(*params, i));
          ASSERT_EQ(std::memcmp(want, got, esize), 0)
              << DTypeName(dtype) << " fill " << static_cast<int>(fill.kind)
              << " value " << fill.value << " rank " << rank << " index " << i;
        }
      }
    }
  }
}

// StoreFillElement against StoreElement for values all over the double
// range: rounding ties, overflow, subnormals, saturation, specials.
TEST(FillMathTest, StoreFillElementMatchesStoreElement) {
  std::vector<double> values = {0.0,
                                -0.0,
                                std::numeric_limits<double>::infinity(),
                                -std::numeric_limits<double>::infinity(),
                                std::numeric_limits<double>::quiet_NaN(),
                                std::numeric_limits<double>::denorm_min(),
                                std::numeric_limits<double>::max(),
                                65504,
                                65519.99,
                                65520,
                                65536,
                                448,
                                464,
                                480,
                                57344,
                                61440,
                                3.3895313892515355e38,
                                3.4e38,
                                127.5,
                                128,
                                255.5,
                                256,
                                -128.9,
                                -129,
                                2147483647.5,
                                -2147483648.9,
                                9223372036854775807.0,
                                -9223372036854775808.0,
                                1.0 + 0x1.0p-11,  // fp16 tie, to even
                                1.0 + 3 * 0x1.0p-11,
                                1.0 + 0x1.0p-8,  // bf16 tie
                                0x1.0p-25,       // fp16 subnormal tie
                                0x1.8p-24,
                                0x1.0p-133,
                                0x1.0p-134,
                                0x1.0p-10,
                                0x1.0p-17};
  uint64_t x = 1;
  for (int i = 0; i < 200000; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    // Exponents spread over [-160, 160) plus a random mantissa and sign.
    const double m = 1.0 + static_cast<double>(x >> 12) * 0x1.0p-52;
    const int e = static_cast<int>((x >> 3) % 320) - 160;
    values.push_back((x & 1 ? -1 : 1) * std::ldexp(m, e));
    // And values that sit exactly on or next to ties of the narrow types.
    const double grid = std::ldexp(static_cast<double>(x >> 40), e % 20 - 8);
    values.push_back(grid);
    values.push_back(std::nextafter(grid, 0.0));
  }
  for (DType dtype : kAllDTypes) {
    const size_t esize = DTypeSize(dtype);
    for (double v : values) {
      alignas(8) unsigned char want[8] = {};
      alignas(8) unsigned char got[8] = {};
      StoreElement(dtype, want, 0, v);
      StoreFillElement(dtype, got, 0, v);
      ASSERT_EQ(std::memcmp(want, got, esize), 0)
          << DTypeName(dtype) << " value " << v;
    }
  }
}

TEST(FillMathTest, ElementFillForKeepsRiskyFillsOnTheHost) {
  EXPECT_FALSE(ElementFillFor({FillKind::kZeros}, 0, 10).has_value());
  EXPECT_FALSE(ElementFillFor({FillKind::kConstant, 2}, 0, 10).has_value());
  EXPECT_FALSE(ElementFillFor({FillKind::kRank}, 0, 10).has_value());
  EXPECT_FALSE(ElementFillFor({FillKind::kUninitialized}, 0, 10).has_value());
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(ElementFillFor({FillKind::kAffine, nan, 0, 1}, 0, 10));
  EXPECT_FALSE(ElementFillFor({FillKind::kAffine, inf, 0, 1}, 0, 10));
  EXPECT_FALSE(ElementFillFor({FillKind::kAffine, 0, inf, 1}, 0, 10));
  EXPECT_FALSE(ElementFillFor({FillKind::kAffine, 0, 0, -inf}, 0, 10));
  // inf - inf would be a NaN: 1e308 + 3 * 1e308 overflows.
  EXPECT_FALSE(ElementFillFor({FillKind::kAffine, 1e308, 0, 1e308}, 0, 4));
  EXPECT_FALSE(ElementFillFor({FillKind::kAffine, 0, 1e306, 0}, 1000, 4));
  EXPECT_TRUE(ElementFillFor({FillKind::kAffine, 1, 2, 3}, 5, 1 << 30));
  EXPECT_TRUE(ElementFillFor({FillKind::kArange}, 0, 10).has_value());
  EXPECT_TRUE(ElementFillFor({FillKind::kRandom}, 3, 10).has_value());
}

}  // namespace
}  // namespace ccl
