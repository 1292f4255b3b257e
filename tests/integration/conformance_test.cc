// The conformance suite: every collective, reduce op and dtype, in place and
// out of place, sync and async, point to point, against real ccworker
// processes and a real cccoord on loopback. The same source runs on Gloo
// (CPU, label integration) and on NCCL (CUDA, label gpu): the backend follows
// the device the workers are started with.
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/element.h"
#include "gtest/gtest.h"
#include "tests/testing/local_cluster.h"

#ifndef CCL_CONFORMANCE_DEVICE
#define CCL_CONFORMANCE_DEVICE "cpu"
#endif
// World sizes to run; a 2-GPU machine builds with
// CCL_CONFORMANCE_WORLD_SIZES=2.
#ifndef CCL_CONFORMANCE_WORLD_SIZES
#define CCL_CONFORMANCE_WORLD_SIZES 2, 3, 4
#endif
// CCL_CONFORMANCE_CUDA: skip (visibly) when there are fewer GPUs than workers.
#ifdef CCL_CONFORMANCE_CUDA
#include <cuda_runtime.h>
#endif

namespace ccl {
namespace {

using client::ClusterClient;
using client::Op;
using client::TensorSpec;
using testing::LocalCluster;

struct Case {
  OpKind kind;
  ReduceOp reduce = ReduceOp::kSum;
  DType dtype = DType::kFloat32;
  int64_t n = 1;  // elements per rank chunk
  bool in_place = false;
  bool async = false;
  int root = 0;
  std::string Name() const {
    return absl::StrCat(
        std::string(OpKindName(kind)), " ", std::string(ReduceOpName(reduce)),
        " ", std::string(DTypeName(dtype)), " n=", n,
        in_place ? " in-place" : "", async ? " async" : "", " root=", root);
  }
};

// Small integers, exact in every dtype and whose sums and products over four
// ranks stay exact too.
double Value(const Case& c, int rank, int64_t j) {
  if (c.reduce == ReduceOp::kProd) return 1 + (j + rank) % 2;
  const int64_t base = (j * 7 + rank * 3) % 11;
  return c.dtype == DType::kUInt8 ? base : base - 5;
}

double Reduce(const Case& c, const std::vector<double>& values) {
  double out = c.reduce == ReduceOp::kProd ? 1 : 0;
  if (c.reduce == ReduceOp::kMin || c.reduce == ReduceOp::kMax) out = values[0];
  for (double v : values) {
    switch (c.reduce) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        out += v;
        break;
      case ReduceOp::kPremulSum:
        out += 2 * v;
        break;
      case ReduceOp::kProd:
        out *= v;
        break;
      case ReduceOp::kMin:
        out = std::min(out, v);
        break;
      case ReduceOp::kMax:
        out = std::max(out, v);
        break;
    }
  }
  if (c.reduce == ReduceOp::kAvg) {
    out /= static_cast<double>(values.size());
    if (!IsFloatingPoint(c.dtype)) out = std::trunc(out);
  }
  return out;
}

double Tolerance(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return 2e-3;
    case DType::kBFloat16:
      return 1e-2;
    case DType::kFloat32:
      return 1e-6;
    case DType::kFloat64:
      return 1e-12;
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      // Each step rounds (to 3 or 2 mantissa bits) and the reference
      // rounds once: sums of these small integers can land an ulp or two
      // apart. NarrowFloatsRoundOnceAsNcclDoes checks the rounding exactly.
      return 0.25;
    default:
      return 0;
  }
}

std::string Encode(DType dtype, const std::vector<double>& values) {
  std::string bytes(values.size() * DTypeSize(dtype), '\0');
  for (size_t i = 0; i < values.size(); ++i)
    StoreElement(dtype, bytes.data(), i, values[i]);
  return bytes;
}

std::vector<double> Decode(DType dtype, const std::string& bytes) {
  std::vector<double> values(bytes.size() / DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = LoadElement(dtype, bytes.data(), i);
  return values;
}

class ConformanceTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
#ifdef CCL_CONFORMANCE_CUDA
    int gpus = 0;
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
    if (std::string missing = testing::CudaWorkersMissing(GetParam(), gpus);
        !missing.empty()) {
      GTEST_SKIP() << missing;
    }
#endif
    testing::LocalClusterOptions options;
    options.workers = GetParam();
    options.device = CCL_CONFORMANCE_DEVICE;
    options.worker_args = {"--op-timeout-ms", "20000"};
    // The 3-rank world's workers spin between requests and ops
    // (--busy-poll-us), so that the whole API runs over the spinning queue
    // and executors as well as over the sleeping ones of the other worlds.
    if (GetParam() == 3) {
      options.worker_args.insert(options.worker_args.end(),
                                 {"--busy-poll-us", "200"});
    }
    auto cluster = LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
    auto client = cluster_->Client();
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    world_ = GetParam();
  }

  // On the worker's own device (the spec names none).
  void Alloc(int rank, const std::string& name, DType dtype, int64_t numel) {
    auto info = client_->Alloc(rank, TensorSpec{name, dtype, {numel}});
    ASSERT_TRUE(info.ok()) << "rank " << rank << ": " << info.status();
  }

  void Write(int rank, const std::string& name, DType dtype,
             const std::vector<double>& values) {
    auto info = client_->Write(rank, name, 0, Encode(dtype, values));
    ASSERT_TRUE(info.ok()) << "rank " << rank << ": " << info.status();
  }

  std::vector<double> Read(int rank, const std::string& name, DType dtype) {
    auto bytes = client_->Read(rank, name, 0, 0);
    EXPECT_TRUE(bytes.ok()) << "rank " << rank << ": " << bytes.status();
    return bytes.ok() ? Decode(dtype, *bytes) : std::vector<double>();
  }

  void FreeAll(const std::vector<std::string>& names) {
    for (const auto& name : names) {
      for (int r = 0; r < world_; ++r) (void)client_->Free(r, name);
    }
  }

  // Submits `op` on every rank (waiting for async ones) and expects success.
  void RunEverywhere(Op op, bool async) {
    op.async = async;
    auto results = client_->Collective(op);
    for (const auto& r : results) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
      if (async) {
        auto waited =
            client_->Wait(r.rank, r.result->work_id, std::chrono::seconds(30));
        ASSERT_TRUE(waited.ok())
            << "rank " << r.rank << ": " << waited.status();
        EXPECT_EQ(waited->state, client::WorkState::kCompleted);
      }
    }
  }

  void Check(const Case& c);

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<ClusterClient> client_;
  int world_ = 0;
};

void ConformanceTest::Check(const Case& c) {
  SCOPED_TRACE(c.Name());
  const int w = world_;
  const int64_t n = c.n;
  // Element counts of the input and output buffers of one rank.
  int64_t in_len = n, out_len = n;
  switch (c.kind) {
    case OpKind::kAllGather:
    case OpKind::kGather:
      out_len = w * n;
      break;
    case OpKind::kReduceScatter:
    case OpKind::kScatter:
      in_len = w * n;
      break;
    case OpKind::kAllToAll:
      in_len = out_len = w * n;
      break;
    default:
      break;
  }
  // In place, the large buffer is the only one (nccl-tests' convention).
  const int64_t buffer_len = std::max(in_len, out_len);
  const std::string in = "conf.in", out = "conf.out";
  std::vector<std::vector<double>> inputs(w);
  for (int r = 0; r < w; ++r) {
    const int64_t len = c.in_place ? buffer_len : in_len;
    inputs[r].reserve(len);
    for (int64_t j = 0; j < len; ++j) inputs[r].push_back(Value(c, r, j));
    Alloc(r, in, c.dtype, len);
    Write(r, in, c.dtype, inputs[r]);
    if (!c.in_place) Alloc(r, out, c.dtype, out_len);
  }
  // What rank r contributes at element i of its chunk.
  auto contribution = [&](int r, int64_t i) {
    const bool grows = out_len > in_len;
    return inputs[r][(c.in_place && grows ? r * n : 0) + i];
  };

  Op op;
  op.kind = c.kind;
  op.reduce = c.reduce;
  op.premul_scale = 2.0;
  op.root = c.root;
  op.input = in;
  if (!c.in_place) op.output = out;
  RunEverywhere(op, c.async);
  if (::testing::Test::HasFatalFailure()) {
    FreeAll({in, out});
    return;
  }

  const std::string result_name = c.in_place ? in : out;
  const double tolerance = Tolerance(c.dtype);
  // One rank's values of one element, reused: 64 MiB cases have 16M elements,
  // and an allocation per element cost seconds (more under ASan).
  std::vector<double> column;
  column.reserve(w);
  // What a rank should hold; the same on every rank except where each gets
  // its own chunk (then computed once: it is much of a 64 MiB case's time).
  std::vector<double> expected;
  const bool same_on_every_rank = c.kind != OpKind::kReduceScatter &&
                                  c.kind != OpKind::kScatter &&
                                  c.kind != OpKind::kAllToAll;
  for (int q = 0; q < w; ++q) {
    if ((c.kind == OpKind::kReduce || c.kind == OpKind::kGather) &&
        q != c.root) {
      continue;  // undefined off the root, as in torch
    }
    const std::vector<double> got = Read(q, result_name, c.dtype);
    // Where the result starts in the buffer that holds it.
    int64_t offset = 0;
    if (!same_on_every_rank || expected.empty()) {
      expected.clear();
      expected.reserve(out_len);
      switch (c.kind) {
        case OpKind::kAllReduce:
        case OpKind::kReduce:
          for (int64_t i = 0; i < n; ++i) {
            column.clear();
            for (int r = 0; r < w; ++r) column.push_back(inputs[r][i]);
            expected.push_back(Reduce(c, column));
          }
          break;
        case OpKind::kBroadcast:
          for (int64_t i = 0; i < n; ++i) expected.push_back(inputs[c.root][i]);
          break;
        case OpKind::kAllGather:
        case OpKind::kGather:
          for (int r = 0; r < w; ++r) {
            for (int64_t i = 0; i < n; ++i)
              expected.push_back(contribution(r, i));
          }
          break;
        case OpKind::kReduceScatter:
          offset = c.in_place ? q * n : 0;
          for (int64_t i = 0; i < n; ++i) {
            column.clear();
            for (int r = 0; r < w; ++r) column.push_back(inputs[r][q * n + i]);
            expected.push_back(Reduce(c, column));
          }
          break;
        case OpKind::kScatter:
          offset = c.in_place ? q * n : 0;
          for (int64_t i = 0; i < n; ++i)
            expected.push_back(inputs[c.root][q * n + i]);
          break;
        case OpKind::kAllToAll:
          for (int r = 0; r < w; ++r) {
            for (int64_t i = 0; i < n; ++i)
              expected.push_back(inputs[r][q * n + i]);
          }
          break;
        default:
          break;
      }
    }
    ASSERT_GE(static_cast<int64_t>(got.size()),
              offset + static_cast<int64_t>(expected.size()))
        << "rank " << q;
    int64_t wrong = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      // As the dtype holds it (rounded, wrapped).
      const double want = RoundToDType(c.dtype, expected[i]);
      const double have = got[offset + i];
      if (std::fabs(have - want) > tolerance * std::max(1.0, std::fabs(want))) {
        if (wrong++ < 5) {
          ADD_FAILURE() << "rank " << q << " element " << i << ": got " << have
                        << ", expected " << want;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "rank " << q;
  }
  FreeAll({in, out});
}

TEST_P(ConformanceTest, ReductionsEveryOpAndDtype) {
  const std::vector<DType> dtypes = {
      DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
      DType::kFp8E4M3, DType::kFp8E5M2, DType::kInt32,   DType::kInt64,
      DType::kInt8,    DType::kUInt8};
  const std::vector<ReduceOp> reduces = {ReduceOp::kSum, ReduceOp::kProd,
                                         ReduceOp::kMin, ReduceOp::kMax,
                                         ReduceOp::kAvg, ReduceOp::kPremulSum};
  int variant = 0;
  for (OpKind kind :
       {OpKind::kAllReduce, OpKind::kReduce, OpKind::kReduceScatter}) {
    for (ReduceOp reduce : reduces) {
      for (DType dtype : dtypes) {
        // Refused on every backend (the in-process suite checks that).
        if (reduce == ReduceOp::kPremulSum && !TakesPremulScale(dtype)) {
          continue;
        }
        ++variant;
        Case c{kind, reduce, dtype};
        c.n = variant % 3 == 0 ? 1 : (variant % 3 == 1 ? 7 : 1023);
        c.in_place = variant % 2 == 0;
        c.async = variant % 5 == 0;
        c.root = variant % world_;
        Check(c);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// The narrow floats' rounding, exactly, on values spread over each dtype's
// whole range (overflow and subnormals included): every backend must give
// what one rounding of the exact result gives (fp8 saturating to its largest
// finite value, as NCCL's conversions do). min and max are exact at any
// world size; a sum's rounding depends on the order of the steps, which the
// backends choose differently from 3 ranks on, so the arithmetic ops are
// held to it at 2 ranks (one step: a + b rounded once). The same reference
// on Gloo and on NCCL makes this the CPU-against-GPU comparison.
// On an H100 (NCCL 2.28, sm_90), a bfloat16 or float16 premul_sum at 2 ranks
// rounds its last step once, as a fused multiply-add; Gloo rounds each
// product and then the sum (seen on simulated hosts: 482 of 4096 float16
// and 51 of 4096 bfloat16 results differed from Gloo's rule). fp8 rounds
// the product when it converts it back, so one rule holds on both.
#ifdef CCL_CONFORMANCE_CUDA
constexpr bool kFusedPremulSum = true;
#else
constexpr bool kFusedPremulSum = false;
#endif

double RoundOnceSaturating(DType dtype, double exact) {
  const double rounded = RoundToDType(dtype, exact);
  const bool fp8 = dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2;
  if (fp8 && !std::isnan(exact) && !std::isfinite(rounded)) {
    const double max = dtype == DType::kFp8E4M3 ? 448 : 57344;
    return std::signbit(exact) ? -max : max;
  }
  return rounded;
}

// x + y rounded once to `dtype`, x and y exact doubles (a narrow float times
// a narrow float is). Their double sum may itself be rounded, and a sum that
// lands exactly halfway between two values of the dtype would then round to
// even where the exact one does not (seen on an H100: 2^29 * 1.25 times
// bfloat16's 0.30078125 is such a tie, and a product of 1.9e-27 beside it
// decides it upwards). What the double sum lost moves it a double's ulp
// that way, far below the dtype's, so only ties change.
double RoundFusedOnce(DType dtype, double x, double y) {
  double sum = x + y;
  const double y_part = sum - x;
  const double lost = (x - (sum - y_part)) + (y - y_part);  // exact (TwoSum)
  if (lost != 0) {
    sum = std::nextafter(sum, lost > 0 ? HUGE_VAL : -HUGE_VAL);
  }
  return RoundOnceSaturating(dtype, sum);
}

TEST_P(ConformanceTest, NarrowFloatsRoundOnceAsNcclDoes) {
  const int64_t n = 4096;
  const double scale = 0.3;  // rounded to the dtype first, as NCCL's scalar
  std::vector<ReduceOp> reduces = {ReduceOp::kMin, ReduceOp::kMax};
  if (world_ == 2) {
    reduces.insert(reduces.end(), {ReduceOp::kSum, ReduceOp::kProd,
                                   ReduceOp::kAvg, ReduceOp::kPremulSum});
  }
  for (DType dtype :
       {DType::kBFloat16, DType::kFp8E4M3, DType::kFp8E5M2, DType::kFloat16}) {
    for (ReduceOp reduce : reduces) {
      SCOPED_TRACE(absl::StrCat(std::string(DTypeName(dtype)), " ",
                                std::string(ReduceOpName(reduce))));
      // Every rank's values: random bit patterns, finite ones kept. avg's
      // inputs stay below a quarter of the largest value and at least twice
      // the smallest normal one, where halving is exact: dividing the
      // rounded sum and summing halved inputs (NCCL versions do either)
      // then agree.
      uint64_t state = 0x9e3779b97f4a7c15ull * (1 + static_cast<int>(dtype)) +
                       static_cast<uint64_t>(reduce);
      auto next_bits = [&] {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<uint32_t>(state >> 33);
      };
      // The largest finite value: float16 and bfloat16 round 1e300 to inf,
      // which let avg's inputs overflow the sum (found on an H100: NCCL
      // halved first there and got the average, the model inf).
      const double max = dtype == DType::kFloat16 ? 65504.0
                         : dtype == DType::kBFloat16
                             ? 3.3895313892515355e38
                             : RoundOnceSaturating(dtype, 1e300);
      std::vector<std::vector<double>> values(world_);
      for (int r = 0; r < world_; ++r) {
        while (static_cast<int64_t>(values[r].size()) < n) {
          uint32_t bits = next_bits();
          double v = LoadElement(dtype, &bits, 0);
          if (!std::isfinite(v)) continue;
          if (reduce == ReduceOp::kAvg &&
              (std::fabs(v) > max / 4 || std::fabs(v) < 0.05)) {
            continue;
          }
          values[r].push_back(v);
        }
        Alloc(r, "narrow", dtype, n);
        Write(r, "narrow", dtype, values[r]);
      }
      Op op;
      op.kind = OpKind::kAllReduce;
      op.reduce = reduce;
      op.premul_scale = scale;
      op.input = "narrow";
      RunEverywhere(op, false);
      if (HasFatalFailure()) return;
      const double factor = RoundOnceSaturating(dtype, scale);
      for (int q = 0; q < world_; ++q) {
        const std::vector<double> got = Read(q, "narrow", dtype);
        ASSERT_EQ(static_cast<int64_t>(got.size()), n);
        int wrong = 0;
        for (int64_t i = 0; i < n; ++i) {
          double want = values[0][i];
          for (int r = 1; r < world_; ++r) {
            const double v = values[r][i];
            switch (reduce) {
              case ReduceOp::kMin:
                want = std::min(want, v);
                break;
              case ReduceOp::kMax:
                want = std::max(want, v);
                break;
              case ReduceOp::kProd:
                want = RoundOnceSaturating(dtype, want * v);
                break;
              case ReduceOp::kPremulSum:
                want = RoundOnceSaturating(
                    dtype, RoundOnceSaturating(dtype, want * factor) +
                               RoundOnceSaturating(dtype, v * factor));
                break;
              default:  // sum, avg
                want = RoundOnceSaturating(dtype, want + v);
                break;
            }
          }
          if (reduce == ReduceOp::kAvg) {
            want = RoundOnceSaturating(dtype, want / world_);
          }
          bool same = std::isnan(want) ? std::isnan(got[i]) : got[i] == want;
          if (kFusedPremulSum && reduce == ReduceOp::kPremulSum &&
              (dtype == DType::kBFloat16 || dtype == DType::kFloat16)) {
            // NCCL's last step multiplies the reducing rank's own element
            // and adds the received product in one rounding (the compiler
            // fuses its half and bfloat16 multiply and add): round(a*s +
            // round(b*s)), a the element of whichever rank reduces it.
            const double a = values[0][i];
            const double b = values[1][i];
            const double fused_a = RoundFusedOnce(
                dtype, a * factor, RoundOnceSaturating(dtype, b * factor));
            const double fused_b = RoundFusedOnce(
                dtype, b * factor, RoundOnceSaturating(dtype, a * factor));
            same = got[i] == fused_a || got[i] == fused_b;
            if (!same) want = fused_a;
          }
          if (!same && wrong++ < 5) {
            std::string inputs;
            for (int r = 0; r < world_; ++r) {
              absl::StrAppend(&inputs, r == 0 ? "" : ", ", values[r][i]);
            }
            ADD_FAILURE() << "rank " << q << " element " << i << ": "
                          << ReduceOpName(reduce) << " of (" << inputs
                          << "): got " << got[i] << ", want " << want;
          }
        }
        EXPECT_EQ(wrong, 0) << "rank " << q;
      }
      FreeAll({"narrow"});
    }
  }
}

TEST_P(ConformanceTest, DataMovementEveryOpAndDtype) {
  const std::vector<DType> dtypes = {DType::kFloat32,  DType::kFloat16,
                                     DType::kBFloat16, DType::kInt64,
                                     DType::kUInt8,    DType::kFp8E4M3};
  int variant = 0;
  for (OpKind kind : {OpKind::kBroadcast, OpKind::kAllGather, OpKind::kGather,
                      OpKind::kScatter, OpKind::kAllToAll}) {
    for (DType dtype : dtypes) {
      for (int64_t n : {1, 7, 65537}) {
        for (bool in_place : {false, true}) {
          if (in_place && kind == OpKind::kAllToAll) continue;
          ++variant;
          if (n == 65537 && dtype != DType::kFloat32) continue;
          Case c{kind,     ReduceOp::kSum,   dtype,           n,
                 in_place, variant % 4 == 0, variant % world_};
          Check(c);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// The largest size each backend is held to: every element checked through
// the worker's own summary (min == max == the expected value), since moving
// a GiB through the test would dwarf the op. 64 MiB on CPU keeps CI short.
TEST_P(ConformanceTest, LargestSizeEveryElementThroughSummaries) {
#ifdef CCL_CONFORMANCE_CUDA
  const int64_t n = int64_t{256} << 20;  // 1 GiB of float32
#else
  const int64_t n = int64_t{16} << 20;  // 64 MiB of float32
#endif
  const double expected = world_ * (world_ + 1) / 2.0;
  for (const auto& r : client_->Alloc(
           client_->AllRanks(), TensorSpec{"huge", DType::kFloat32, {n}},
           client::Fill{client::FillKind::kRankPlusOne})) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  Op op;
  op.kind = OpKind::kAllReduce;
  op.input = "huge";
  RunEverywhere(op, false);
  for (int r = 0; r < world_; ++r) {
    auto summary = client_->Summarize(r, "huge", 4);
    ASSERT_TRUE(summary.ok()) << "rank " << r << ": " << summary.status();
    EXPECT_EQ(summary->min, expected) << "rank " << r;
    EXPECT_EQ(summary->max, expected) << "rank " << r;
    EXPECT_EQ(summary->nan_count, 0) << "rank " << r;
    EXPECT_EQ(summary->sum, expected * static_cast<double>(n)) << "rank " << r;
  }
  FreeAll({"huge"});
}

// MiB of float32 per rank in LargeAllReduceAndBroadcast: 64, or
// CCL_CONFORMANCE_LARGE_MIB. The sanitized run (preset asan) takes 16: still
// sixteen 1 MiB chunks each way, at a quarter of the checked copies that make
// it the longest case there.
int64_t LargeMiB() {
  const char* value = std::getenv("CCL_CONFORMANCE_LARGE_MIB");
  return value != nullptr && std::atoi(value) > 0 ? std::atoi(value) : 64;
}

TEST_P(ConformanceTest, LargeAllReduceAndBroadcast) {
  const int64_t n = LargeMiB() << 18;  // float32 elements
  Check(Case{OpKind::kAllReduce, ReduceOp::kSum, DType::kFloat32, n, false});
  Check(Case{OpKind::kBroadcast, ReduceOp::kSum, DType::kFloat32, n, true, true,
             world_ - 1});
}

TEST_P(ConformanceTest, SendRecvBothDirectionsAndRing) {
  const std::string t = "p2p.t";
  for (int r = 0; r < world_; ++r) Alloc(r, t, DType::kFloat32, 3);
  auto send = [&](int from, int to, bool async) {
    Op s, rv;
    s.kind = OpKind::kSend;
    s.input = t;
    s.peer = to;
    s.async = async;
    rv.kind = OpKind::kRecv;
    rv.input = t;
    rv.peer = from;
    rv.async = async;
    auto results = client_->PointToPoint({{from, s}, {to, rv}});
    for (const auto& r : results) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
      if (async && (r.rank == from || r.rank == to)) {
        auto waited =
            client_->Wait(r.rank, r.result->work_id, std::chrono::seconds(30));
        ASSERT_TRUE(waited.ok()) << waited.status();
      }
    }
  };
  // Rank 0 -> 1 (sync), then 1 -> 0 (async), as in the tutorial.
  Write(0, t, DType::kFloat32, {1, 2, 3});
  send(0, 1, false);
  EXPECT_EQ(Read(1, t, DType::kFloat32), (std::vector<double>{1, 2, 3}));
  Write(1, t, DType::kFloat32, {4, 5, 6});
  send(1, 0, true);
  EXPECT_EQ(Read(0, t, DType::kFloat32), (std::vector<double>{4, 5, 6}));
  // A token passed around the ring reaches every rank.
  Write(0, t, DType::kFloat32, {7, 8, 9});
  for (int r = 0; r < world_; ++r) {
    send(r, (r + 1) % world_, r % 2 == 1);
  }
  for (int r = 0; r < world_; ++r) {
    EXPECT_EQ(Read(r, t, DType::kFloat32), (std::vector<double>{7, 8, 9})) << r;
  }
  FreeAll({t});
}

TEST_P(ConformanceTest, BarrierAndValidationErrors) {
  Op barrier;
  barrier.kind = OpKind::kBarrier;
  RunEverywhere(barrier, false);

  // A missing tensor and a bad root are refused before launch, on every rank.
  Op bad;
  bad.kind = OpKind::kAllReduce;
  bad.input = "no.such.tensor";
  for (const auto& r : client_->Collective(bad)) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kNotFound) << r.rank;
  }
  for (int r = 0; r < world_; ++r) Alloc(r, "v.t", DType::kFloat32, 4);
  bad.kind = OpKind::kBroadcast;
  bad.input = "v.t";
  bad.root = world_;
  for (const auto& r : client_->Collective(bad)) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kInvalidArgument)
        << r.rank;
  }
  // The cluster still serves the next op.
  RunEverywhere(barrier, false);
  FreeAll({"v.t"});
}

TEST_P(ConformanceTest, ConcurrentClientsNeverDeadlock) {
  constexpr int kIterations = 100;
  auto run_client = [&](int id) {
    auto client = cluster_->Client();
    ASSERT_TRUE(client.ok()) << client.status();
    const std::string in = absl::StrCat("cc.in.", id),
                      out = absl::StrCat("cc.out.", id);
    for (int r = 0; r < world_; ++r) {
      ASSERT_TRUE((*client)->Alloc(r, TensorSpec{in, DType::kInt64, {2}}).ok());
      ASSERT_TRUE(
          (*client)->Alloc(r, TensorSpec{out, DType::kInt64, {2}}).ok());
    }
    for (int k = 0; k < kIterations; ++k) {
      for (int r = 0; r < world_; ++r) {
        ASSERT_TRUE(
            (*client)
                ->Write(r, in, 0,
                        Encode(DType::kInt64, {double(k + r), double(id)}))
                .ok());
      }
      Op op;
      op.kind = OpKind::kAllReduce;
      op.input = in;
      op.output = out;
      for (const auto& r : (*client)->Collective(op)) {
        ASSERT_TRUE(r.result.ok()) << r.result.status();
      }
      const double want = world_ * k + world_ * (world_ - 1) / 2;
      for (int r = 0; r < world_; ++r) {
        auto bytes = (*client)->Read(r, out, 0, 0);
        ASSERT_TRUE(bytes.ok());
        ASSERT_EQ(Decode(DType::kInt64, *bytes),
                  (std::vector<double>{want, double(world_ * id)}))
            << "client " << id << " iteration " << k << " rank " << r;
      }
    }
  };
  std::thread a(run_client, 1), b(run_client, 2);
  a.join();
  b.join();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ConformanceTest,
                         ::testing::Values(CCL_CONFORMANCE_WORLD_SIZES),
                         [](const auto& info) {
                           return absl::StrCat("world", info.param);
                         });

}  // namespace
}  // namespace ccl
