// Collective conformance over Gloo, in process: N WorkerCores (one per rank)
// form a world through one in-memory KV store and run every op kind against
// references computed here. The same cases are meant to run against NCCL.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/element.h"
#include "gtest/gtest.h"
#include "server/core/worker_core.h"
#include "tests/testing/in_memory_kv_store.h"

namespace ccl {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kWait{30000};
constexpr double kSentinel = 42;

WorkerConfig DefaultConfig() {
  WorkerConfig config;
  config.default_op_timeout = milliseconds(20000);
  config.seq_gap_timeout = milliseconds(20000);
  return config;
}

class World {
 public:
  explicit World(int size, WorkerConfig config = DefaultConfig(),
                 int64_t generation = 1)
      : size_(size) {
    for (int r = 0; r < size; ++r) {
      auto core = WorkerCore::Create(config);
      EXPECT_TRUE(core.ok()) << core.status();
      cores_.push_back(*std::move(core));
    }
    std::vector<absl::Status> statuses(size);
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] {
        statuses[r] = cores_[r]->FormWorld(r, size, generation, kv_);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < size; ++r) {
      EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    }
  }

  int size() const { return size_; }
  WorkerCore& operator[](int r) { return *cores_[r]; }
  int64_t NextSeq() { return seq_++; }

 private:
  int size_;
  testing::InMemoryKvStore kv_;  // outlives the cores
  std::vector<std::unique_ptr<WorkerCore>> cores_;
  int64_t seq_ = 0;
};

double Rounded(DType dtype, double v) {
  alignas(8) unsigned char buf[8] = {};
  StoreElement(dtype, buf, 0, v);
  return LoadElement(dtype, buf, 0);
}

bool Close(DType dtype, double got, double want) {
  if (!IsFloatingPoint(dtype)) return got == want;
  double rel = 1e-6;
  if (dtype == DType::kFloat16 || dtype == DType::kBFloat16) rel = 4e-3;
  if (dtype == DType::kFp8E4M3 || dtype == DType::kFp8E5M2) rel = 0.13;
  return std::fabs(got - want) <= rel * std::max(1.0, std::fabs(want));
}

TensorMeta Spec(const std::string& name, DType dtype, int64_t numel) {
  TensorMeta meta;
  meta.name = name;
  meta.dtype = dtype;
  meta.shape = {numel};
  return meta;
}

void AllocWith(WorkerCore& core, const std::string& name, DType dtype,
               const std::vector<double>& values) {
  auto meta = core.Alloc(Spec(name, dtype, static_cast<int64_t>(values.size())),
                         {FillKind::kUninitialized});
  ASSERT_TRUE(meta.ok()) << meta.status();
  std::vector<std::byte> bytes(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    StoreElement(dtype, bytes.data(), i, values[i]);
  }
  ASSERT_TRUE(core.Write(name, 0, bytes).ok());
}

std::vector<double> ReadAll(WorkerCore& core, const std::string& name) {
  DType dtype = DType::kFloat32;
  for (const auto& meta : core.List()) {
    if (meta.name == name) dtype = meta.dtype;
  }
  std::vector<std::byte> bytes;
  absl::Status status =
      core.Read(name, 0, 0, 0, [&](int64_t, std::span<const std::byte> chunk) {
        bytes.insert(bytes.end(), chunk.begin(), chunk.end());
        return true;
      });
  EXPECT_TRUE(status.ok()) << status;
  std::vector<double> out(bytes.size() / DTypeSize(dtype));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = LoadElement(dtype, bytes.data(), i);
  }
  return out;
}

// ---------------------------------------------------------------------------
// One collective, every rank, checked against a host reference.

struct Case {
  OpKind kind = OpKind::kAllReduce;
  DType dtype = DType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  int64_t n = 7;  // NCCL-style count (per-rank chunk for gather-like ops)
  bool in_place = false;
  int root = 0;
  double premul_scale = 1.0;
};

std::string Describe(const Case& c) {
  return std::string(OpKindName(c.kind)) + " " +
         std::string(DTypeName(c.dtype)) + " " +
         std::string(ReduceOpName(c.reduce_op)) + " n=" + std::to_string(c.n) +
         (c.in_place ? " in-place" : " out-of-place") +
         " root=" + std::to_string(c.root);
}

// Small values keep every reduction exact in every dtype for 4 ranks.
double Input(const Case& c, int rank, int64_t i) {
  double v;
  if (c.reduce_op == ReduceOp::kProd && IsReduction(c.kind)) {
    v = 1 + ((i + rank) % 2);
  } else {
    v = static_cast<double>((i * 7 + rank * 13) % 17);
  }
  return Rounded(c.dtype, v);
}

double Reduced(const Case& c, int world, int64_t i) {
  double acc = 0;
  for (int r = 0; r < world; ++r) {
    double v = Input(c, r, i);
    if (c.reduce_op == ReduceOp::kPremulSum) {
      v = Rounded(c.dtype, v * c.premul_scale);
    }
    if (r == 0) {
      acc = v;
      continue;
    }
    switch (c.reduce_op) {
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      default:
        acc += v;
        break;
    }
  }
  if (c.reduce_op == ReduceOp::kAvg) {
    acc = IsFloatingPoint(c.dtype) ? acc / world : std::trunc(acc / world);
  }
  return Rounded(c.dtype, acc);
}

void RunCase(World& w, const Case& c) {
  SCOPED_TRACE(Describe(c) + " world=" + std::to_string(w.size()));
  const int W = w.size();
  const int64_t n = c.n;
  const int64_t seq = w.NextSeq();
  const std::string in_name = "in" + std::to_string(seq);
  const std::string out_name = "out" + std::to_string(seq);
  auto seq_of = [&](int r, int64_t count, auto value) {
    std::vector<double> v(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) v[i] = value(r, i);
    return v;
  };
  auto sentinel = [&](int64_t count) {
    return std::vector<double>(static_cast<size_t>(count), kSentinel);
  };
  auto own = [&](int r, int64_t i) { return Input(c, r, i); };

  // Allocate per the op's layout (in place: nccl-tests' large buffer).
  for (int r = 0; r < W; ++r) {
    std::vector<double> in, out;
    switch (c.kind) {
      case OpKind::kAllReduce:
      case OpKind::kReduce:
      case OpKind::kBroadcast:
        in = seq_of(r, n, own);
        out = sentinel(n);
        break;
      case OpKind::kAllGather:
      case OpKind::kGather:
        if (c.in_place) {
          in = sentinel(W * n);
          for (int64_t i = 0; i < n; ++i) in[r * n + i] = Input(c, r, i);
        } else {
          in = seq_of(r, n, own);
        }
        out = sentinel(W * n);
        break;
      case OpKind::kReduceScatter:
      case OpKind::kAllToAll:
        in = seq_of(r, W * n, own);
        out = sentinel(c.kind == OpKind::kAllToAll ? W * n : n);
        break;
      case OpKind::kScatter:
        in = r == c.root ? seq_of(r, W * n, own) : sentinel(W * n);
        out = sentinel(n);
        break;
      default:
        FAIL() << "not a collective case";
    }
    AllocWith(w[r], in_name, c.dtype, in);
    if (!c.in_place) AllocWith(w[r], out_name, c.dtype, out);
  }

  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < W; ++r) {
    OpSpec spec;
    spec.seq = seq;
    spec.kind = c.kind;
    spec.input = in_name;
    spec.output = c.in_place ? "" : out_name;
    spec.reduce_op = c.reduce_op;
    spec.premul_scale = c.premul_scale;
    spec.root = c.root;
    auto work = w[r].Submit(spec);
    ASSERT_TRUE(work.ok()) << "rank " << r << ": " << work.status();
    works.push_back(*work);
  }
  for (int r = 0; r < W; ++r) {
    absl::Status status = works[r]->Wait(kWait);
    ASSERT_TRUE(status.ok()) << "rank " << r << ": " << status;
    EXPECT_EQ(works[r]->state(), WorkState::kCompleted);
  }

  for (int r = 0; r < W; ++r) {
    const std::string result_name = c.in_place ? in_name : out_name;
    const std::vector<double> got = ReadAll(w[r], result_name);
    // expected(k) for each checked element k of the result tensor; NaN
    // marks an element with no specified value.
    auto expect = [&](int64_t k) -> double {
      switch (c.kind) {
        case OpKind::kAllReduce:
          return Reduced(c, W, k);
        case OpKind::kBroadcast:
          return Input(c, c.root, k);
        case OpKind::kReduce:
          if (r == c.root) return Reduced(c, W, k);
          // Off the root the tensors stay as they were.
          return c.in_place ? Input(c, r, k) : Rounded(c.dtype, kSentinel);
        case OpKind::kAllGather:
          return Input(c, static_cast<int>(k / n), k % n);
        case OpKind::kGather:
          if (r == c.root) return Input(c, static_cast<int>(k / n), k % n);
          if (c.in_place) {
            return k / n == r ? Input(c, r, k % n)
                              : Rounded(c.dtype, kSentinel);
          }
          return Rounded(c.dtype, kSentinel);
        case OpKind::kReduceScatter:
          if (c.in_place) {
            return k / n == r ? Reduced(c, W, k) : std::nan("");
          }
          return Reduced(c, W, r * n + k);
        case OpKind::kScatter:
          if (c.in_place) {
            if (k / n == r) return Input(c, c.root, k);
            return r == c.root ? Input(c, c.root, k)
                               : Rounded(c.dtype, kSentinel);
          }
          return Input(c, c.root, r * n + k);
        case OpKind::kAllToAll:
          return Input(c, static_cast<int>(k / n), r * n + k % n);
        default:
          return std::nan("");
      }
    };
    int64_t wrong = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      const double want = expect(static_cast<int64_t>(k));
      if (std::isnan(want)) continue;
      if (!Close(c.dtype, got[k], want)) {
        if (++wrong <= 3) {
          ADD_FAILURE() << "rank " << r << " element " << k << ": got "
                        << got[k] << " want " << want;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "rank " << r;
    // Out-of-place inputs are never modified.
    if (!c.in_place && c.kind != OpKind::kScatter) {
      const std::vector<double> in = ReadAll(w[r], in_name);
      for (size_t k = 0; k < in.size(); ++k) {
        ASSERT_EQ(in[k], Input(c, r, static_cast<int64_t>(k))) << "input " << k;
      }
    }
    EXPECT_TRUE(w[r].Free(in_name).ok());
    if (!c.in_place) {
      EXPECT_TRUE(w[r].Free(out_name).ok());
    }
  }
}

constexpr OpKind kCollectives[] = {OpKind::kAllReduce,     OpKind::kBroadcast,
                                   OpKind::kReduce,        OpKind::kAllGather,
                                   OpKind::kReduceScatter, OpKind::kGather,
                                   OpKind::kScatter,       OpKind::kAllToAll};
constexpr DType kReducible[] = {
    DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kInt32,
    DType::kInt64,   DType::kInt8,    DType::kUInt8};
constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd,
                                   ReduceOp::kMin, ReduceOp::kMax,
                                   ReduceOp::kAvg, ReduceOp::kPremulSum};

class GlooConformance : public ::testing::TestWithParam<int> {};

TEST_P(GlooConformance, EveryCollectiveEverySizeInAndOutOfPlace) {
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

TEST_P(GlooConformance, EveryReduceOpAndDType) {
  World w(GetParam());
  ASSERT_FALSE(::testing::Test::HasFailure());
  for (OpKind kind :
       {OpKind::kAllReduce, OpKind::kReduce, OpKind::kReduceScatter}) {
    for (DType dtype : kReducible) {
      for (ReduceOp op : kReduceOps) {
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

TEST_P(GlooConformance, DataMovementForEveryDType) {
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

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooConformance,
                         ::testing::Values(2, 3, 4), [](const auto& info) {
                           return "world" + std::to_string(info.param);
                         });

// ---------------------------------------------------------------------------

std::shared_ptr<Work> SubmitOk(WorkerCore& core, const OpSpec& spec) {
  auto work = core.Submit(spec);
  EXPECT_TRUE(work.ok()) << work.status();
  return work.ok() ? *work : nullptr;
}

OpSpec Op(OpKind kind, int64_t seq, std::string input = "",
          std::string output = "") {
  OpSpec spec;
  spec.kind = kind;
  spec.seq = seq;
  spec.input = std::move(input);
  spec.output = std::move(output);
  return spec;
}

TEST(GlooSeedExamples, FourRanks) {
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
        w[r].Alloc(Spec("x", DType::kFloat32, 1), {FillKind::kRankPlusOne})
            .ok());
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
        w[r].Alloc(Spec("g", DType::kInt32, 3), {FillKind::kArangePlusRank})
            .ok());
  }
  ASSERT_TRUE(w[0].Alloc(Spec("gathered", DType::kInt32, 12), {}).ok());
  run_all([](int) { return Op(OpKind::kGather, 2, "g", "gathered"); });
  EXPECT_EQ(ReadAll(w[0], "gathered"),
            (std::vector<double>{0, 1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5}));

  // All-gather of [rank].
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(
        w[r].Alloc(Spec("me", DType::kInt64, 1), {FillKind::kRank}).ok());
    ASSERT_TRUE(w[r].Alloc(Spec("all", DType::kInt64, 4), {}).ok());
  }
  run_all([](int) { return Op(OpKind::kAllGather, 3, "me", "all"); });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ReadAll(w[r], "all"), (std::vector<double>{0, 1, 2, 3}));
  }

  // Reduce-scatter of [rank + i for i in range(4)]: rank r gets
  // sum_k (k + r) = 6 + 4r.
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(w[r].Alloc(Spec("rs_in", DType::kFloat32, 4),
                           {FillKind::kArangePlusRank})
                    .ok());
    ASSERT_TRUE(w[r].Alloc(Spec("rs_out", DType::kFloat32, 1), {}).ok());
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

TEST(GlooSeedExamples, ScatterOnTwoRanks) {
  World w(2);
  AllocWith(w[0], "s", DType::kInt64, {0, 1, 2, 3});
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(w[r].Alloc(Spec("part", DType::kInt64, 2), {}).ok());
  }
  // Rank 1 has no input at all.
  auto w0 = SubmitOk(w[0], Op(OpKind::kScatter, 0, "s", "part"));
  auto w1 = SubmitOk(w[1], Op(OpKind::kScatter, 0, "", "part"));
  ASSERT_TRUE(w0->Wait(kWait).ok()) << w0->status();
  ASSERT_TRUE(w1->Wait(kWait).ok()) << w1->status();
  EXPECT_EQ(ReadAll(w[0], "part"), (std::vector<double>{0, 1}));
  EXPECT_EQ(ReadAll(w[1], "part"), (std::vector<double>{2, 3}));
}

TEST(GlooPointToPoint, BothDirectionsAndRing) {
  World w(3);
  for (int r = 0; r < 3; ++r) {
    AllocWith(w[r], "buf", DType::kFloat64, {r * 10.0, r * 10.0 + 1});
    ASSERT_TRUE(w[r].Alloc(Spec("rx", DType::kFloat64, 2), {}).ok());
  }
  // seq 0: 0 -> 1 (rank 2 takes the seq with a nop); seq 1: 1 -> 0.
  for (auto [seq, from, to] : {std::tuple{0, 0, 1}, std::tuple{1, 1, 0}}) {
    OpSpec send = Op(OpKind::kSend, seq, "buf");
    send.peer = to;
    OpSpec recv = Op(OpKind::kRecv, seq, "rx");
    recv.peer = from;
    const int other = 3 - from - to;
    auto a = SubmitOk(w[from], send);
    auto b = SubmitOk(w[to], recv);
    auto c = SubmitOk(w[other], Op(OpKind::kNop, seq));
    for (auto& work : {a, b, c})
      ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
    EXPECT_EQ(ReadAll(w[to], "rx"),
              (std::vector<double>{from * 10.0, from * 10.0 + 1}));
  }
  // Ring: at one seq every rank sends to the next... but a seq holds one
  // op per rank, so the ring takes two seqs: even ranks send first.
  // Use the output-named recv form here.
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(w[r].Free("rx").ok());
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(w[r].Alloc(Spec("rx", DType::kFloat64, 2), {}).ok());
  }
  // seq 2: r -> r+1 for r = 0; seq 3: 1 -> 2; seq 4: 2 -> 0.
  for (int step = 0; step < 3; ++step) {
    const int64_t seq = 2 + step;
    const int from = step;
    const int to = (step + 1) % 3;
    const int other = (step + 2) % 3;
    OpSpec send = Op(OpKind::kSend, seq, "buf");
    send.peer = to;
    OpSpec recv = Op(OpKind::kRecv, seq, "", "rx");
    recv.peer = from;
    std::vector<std::shared_ptr<Work>> works = {
        SubmitOk(w[other], Op(OpKind::kNop, seq)), SubmitOk(w[to], recv),
        SubmitOk(w[from], send)};
    for (auto& work : works)
      ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  }
  for (int r = 0; r < 3; ++r) {
    const int from = (r + 2) % 3;
    EXPECT_EQ(ReadAll(w[r], "rx"),
              (std::vector<double>{from * 10.0, from * 10.0 + 1}));
  }
  // Send to self and out-of-range peers are refused before queueing.
  OpSpec self = Op(OpKind::kSend, 5, "buf");
  self.peer = 1;
  EXPECT_EQ(w[1].Submit(self).status().code(),
            absl::StatusCode::kInvalidArgument);
  self.peer = 3;
  EXPECT_EQ(w[1].Submit(self).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GlooOrdering, OutOfOrderSubmissionsRunInSeqOrder) {
  World w(3);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(
        w[r].Alloc(Spec("t", DType::kInt64, 4), {FillKind::kRankPlusOne}).ok());
  }
  // seq 0: broadcast from rank 2 (t = 3); seq 1: all_reduce sum (t = 9);
  // seq 2: all_reduce prod (t = 729). Submitted in reverse (rank 1 mixed).
  std::vector<std::vector<std::shared_ptr<Work>>> works(3);
  const std::vector<std::vector<int>> orders = {
      {2, 1, 0}, {1, 2, 0}, {2, 0, 1}};
  for (int r = 0; r < 3; ++r) {
    for (int seq : orders[r]) {
      OpSpec spec;
      if (seq == 0) {
        spec = Op(OpKind::kBroadcast, 0, "t");
        spec.root = 2;
      } else {
        spec = Op(OpKind::kAllReduce, seq, "t");
        spec.reduce_op = seq == 1 ? ReduceOp::kSum : ReduceOp::kProd;
      }
      works[r].push_back(SubmitOk(w[r], spec));
    }
  }
  for (auto& rank_works : works) {
    for (auto& work : rank_works)
      ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(ReadAll(w[r], "t"), (std::vector<double>{729, 729, 729, 729}));
    auto groups = w[r].Groups();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].name, "world");
    EXPECT_EQ(groups[0].ranks, (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(groups[0].group_rank, r);
    EXPECT_EQ(groups[0].next_seq, 3);
    EXPECT_EQ(groups[0].backend, "gloo");
    EXPECT_EQ(groups[0].state, "ready");
  }
  // Duplicates of a run or queued seq are refused.
  EXPECT_EQ(w[0].Submit(Op(OpKind::kBarrier, 1)).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_NE(SubmitOk(w[0], Op(OpKind::kBarrier, 5)), nullptr);
  EXPECT_EQ(w[0].Submit(Op(OpKind::kBarrier, 5)).status().code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(GlooOrdering, SeqGapIsDeclaredLostAndSkipped) {
  WorkerConfig config = DefaultConfig();
  config.seq_gap_timeout = milliseconds(300);
  World w(2, config);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        w[r].Alloc(Spec("t", DType::kFloat32, 3), {FillKind::kOnes}).ok());
  }
  // seq 0 never comes; seq 1 waits behind it, then runs.
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < 2; ++r)
    works.push_back(SubmitOk(w[r], Op(OpKind::kAllReduce, 1, "t")));
  for (auto& work : works)
    ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(250));
  EXPECT_GE(works[0]->timing().queue_us, 250000);
  EXPECT_EQ(ReadAll(w[0], "t"), (std::vector<double>{2, 2, 2}));
  // The lost seq arriving late fails clearly.
  auto late = w[0].Submit(Op(OpKind::kAllReduce, 0, "t"));
  ASSERT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.status().message().find("seq 0 of group world never arrived"),
            std::string::npos)
      << late.status();
  // And the group keeps working.
  works.clear();
  for (int r = 0; r < 2; ++r)
    works.push_back(SubmitOk(w[r], Op(OpKind::kAllReduce, 2, "t")));
  for (auto& work : works)
    ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  EXPECT_EQ(ReadAll(w[1], "t"), (std::vector<double>{4, 4, 4}));
}

TEST(GlooValidation, RefusesBadOpsBeforeQueueing) {
  World w(2);
  WorkerCore& c = w[0];
  ASSERT_TRUE(c.Alloc(Spec("f4", DType::kFloat32, 4), {}).ok());
  ASSERT_TRUE(c.Alloc(Spec("f5", DType::kFloat32, 5), {}).ok());
  ASSERT_TRUE(c.Alloc(Spec("f8", DType::kFloat32, 8), {}).ok());
  ASSERT_TRUE(c.Alloc(Spec("i4", DType::kInt32, 4), {}).ok());
  ASSERT_TRUE(c.Alloc(Spec("bf", DType::kBFloat16, 4), {}).ok());
  ASSERT_TRUE(c.Alloc(Spec("e4", DType::kFp8E4M3, 4), {}).ok());

  auto code = [&](OpSpec spec) { return c.Submit(spec).status(); };
  auto expect = [&](absl::StatusCode want, OpSpec spec,
                    const std::string& mention) {
    absl::Status status = code(spec);
    EXPECT_EQ(status.code(), want) << status;
    EXPECT_NE(status.message().find(mention), std::string::npos)
        << status << " should mention " << mention;
  };
  using S = absl::StatusCode;
  // Each refused op still takes its seq; rank 1 sees nops there, as ranks
  // outside an op do.
  int64_t seq = 0;
  auto next = [&](OpSpec spec) {
    spec.seq = seq;
    EXPECT_TRUE(w[1].Submit(Op(OpKind::kNop, seq)).ok());
    ++seq;
    return spec;
  };
  expect(S::kInvalidArgument, next(Op(OpKind::kAllReduce, 0, "f4", "f5")),
         "f5");
  expect(S::kInvalidArgument, next(Op(OpKind::kAllReduce, 0, "f4", "i4")),
         "int32");
  expect(S::kNotFound, next(Op(OpKind::kAllGather, 0, "f4", "f4x")), "f4x");
  expect(S::kInvalidArgument, next(Op(OpKind::kAllGather, 0, "f4", "f5")),
         "f5");
  expect(S::kInvalidArgument, next(Op(OpKind::kReduceScatter, 0, "f5")),
         "multiple");
  expect(S::kInvalidArgument, next(Op(OpKind::kAllToAll, 0, "f5")), "f5");
  expect(S::kInvalidArgument, next(Op(OpKind::kScatter, 0, "f5", "f4")), "f5");
  expect(S::kInvalidArgument, next(Op(OpKind::kAllReduce, 0)), "input");
  expect(S::kNotFound, next(Op(OpKind::kAllReduce, 0, "missing")), "missing");
  expect(S::kNotFound, next(Op(OpKind::kAllReduce, 0, "f4", "gone")), "gone");
  OpSpec rooted = Op(OpKind::kBroadcast, 0, "f4");
  rooted.root = 2;
  expect(S::kInvalidArgument, next(rooted), "root 2");
  rooted.root = -1;
  expect(S::kInvalidArgument, next(rooted), "root -1");
  // An unknown group or generation names no executor, so no seq is taken.
  OpSpec group = Op(OpKind::kBarrier, seq);
  group.group = "tp0";
  expect(S::kNotFound, group, "tp0");
  OpSpec generation = Op(OpKind::kBarrier, seq);
  generation.generation = 7;
  expect(S::kFailedPrecondition, generation, "generation");
  expect(S::kUnimplemented, next(Op(OpKind::kAllReduce, 0, "bf")), "bfloat16");
  expect(S::kUnimplemented, next(Op(OpKind::kReduceScatter, 0, "e4")),
         "fp8_e4m3");
  OpSpec reduce = Op(OpKind::kReduce, 0, "bf");
  expect(S::kUnimplemented, next(reduce), "NCCL");
  // A refused seq cannot be reused, and the next seq runs at once (well
  // within the 20 s gap timeout) with bfloat16 moving fine.
  EXPECT_EQ(c.Submit(Op(OpKind::kBarrier, 0)).status().code(),
            S::kAlreadyExists);
  auto a = SubmitOk(w[0], Op(OpKind::kBroadcast, seq, "bf"));
  ASSERT_TRUE(
      w[1].Alloc(Spec("bf", DType::kBFloat16, 4), {FillKind::kArange}).ok());
  auto b = SubmitOk(w[1], Op(OpKind::kBroadcast, seq, "bf"));
  ASSERT_TRUE(a->Wait(std::chrono::seconds(5)).ok()) << a->status();
  ASSERT_TRUE(b->Wait(std::chrono::seconds(5)).ok()) << b->status();
  EXPECT_EQ(ReadAll(w[1], "bf"), (std::vector<double>{0, 0, 0, 0}));
}

TEST(GlooValidation, NoWorldYet) {
  auto core = WorkerCore::Create(DefaultConfig());
  ASSERT_TRUE(core.ok());
  EXPECT_EQ((*core)->Submit(Op(OpKind::kBarrier, 0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*core)->Groups().empty());
  WorkerConfig gpu;
  gpu.device = Device{DeviceKind::kCuda, 0};
  EXPECT_EQ(WorkerCore::Create(gpu).status().code(),
            absl::StatusCode::kUnimplemented);
}

TEST(GlooWork, BusyTensorsWorkTableAndCallbacks) {
  World w(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        w[r].Alloc(Spec("t", DType::kFloat32, 2), {FillKind::kOnes}).ok());
  }
  // Rank 0's seq 1 waits behind seq 0, holding "t"; async, so it is in the
  // work table.
  OpSpec async_op = Op(OpKind::kAllReduce, 1, "t");
  async_op.async = true;
  auto queued = SubmitOk(w[0], async_op);
  ASSERT_NE(queued, nullptr);
  EXPECT_EQ(queued->state(), WorkState::kQueued);
  auto freed = w[0].Free("t");
  ASSERT_EQ(freed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(freed.status().message().find("all_reduce seq 1"),
            std::string::npos)
      << freed.status();
  EXPECT_EQ(w[0].Write("t", 0, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(queued->Wait(milliseconds(10)).code(),
            absl::StatusCode::kDeadlineExceeded);

  std::atomic<int> early{0};
  queued->OnDone([&] { ++early; });
  EXPECT_EQ(w[0].FindWork(queued->id()), queued);

  std::vector<std::shared_ptr<Work>> works = {
      SubmitOk(w[0], Op(OpKind::kBarrier, 0)),
      SubmitOk(w[1], Op(OpKind::kBarrier, 0)),
      SubmitOk(w[1], Op(OpKind::kAllReduce, 1, "t"))};
  for (auto& work : works) ASSERT_TRUE(work->Wait(kWait).ok());
  ASSERT_TRUE(queued->Wait(kWait).ok());
  EXPECT_EQ(early.load(), 1);
  std::atomic<int> late{0};
  queued->OnDone([&] { ++late; });
  EXPECT_EQ(late.load(), 1);
  EXPECT_EQ(ReadAll(w[0], "t"), (std::vector<double>{2, 2}));

  EXPECT_NE(queued->id(), works[0]->id());
  w[0].ForgetWork(queued->id());
  EXPECT_EQ(w[0].FindWork(queued->id()), nullptr);
  EXPECT_TRUE(w[0].Free("t").ok());
}

TEST(GlooWork, ShutdownCancelsQueuedOps) {
  World w(2);
  auto queued = SubmitOk(w[0], Op(OpKind::kBarrier, 3));
  w[0].Shutdown();
  ASSERT_EQ(queued->Wait(milliseconds(1000)).code(),
            absl::StatusCode::kCancelled);
  EXPECT_EQ(queued->state(), WorkState::kFailed);
  EXPECT_EQ(w[0].Submit(Op(OpKind::kBarrier, 4)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  w[0].Shutdown();  // idempotent
}

TEST(GlooWork, OpTimeoutBreaksTheCommunicator) {
  World w(2);
  ASSERT_TRUE(w[0].Alloc(Spec("t", DType::kFloat32, 2), {}).ok());
  OpSpec spec = Op(OpKind::kAllReduce, 0, "t");
  spec.timeout = milliseconds(200);
  auto work = SubmitOk(w[0], spec);  // rank 1 never joins in
  absl::Status status = work->Wait(kWait);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  auto next = SubmitOk(w[0], Op(OpKind::kBarrier, 1));
  EXPECT_EQ(next->Wait(kWait).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(w[0].Groups()[0].state, "broken");
}

TEST(GlooBench, ChecksEveryOpKind) {
  World w(3);
  int64_t seq = 0;
  auto bench_all = [&](OpKind kind, DType dtype, ReduceOp op, int64_t in_n,
                       int64_t out_n, bool in_place) {
    SCOPED_TRACE(std::string(OpKindName(kind)) + " " +
                 std::string(DTypeName(dtype)) + " " +
                 std::string(ReduceOpName(op)) + (in_place ? " in place" : ""));
    std::vector<std::shared_ptr<BenchWork>> works(3);
    const std::string in = "bin" + std::to_string(seq);
    const std::string out = "bout" + std::to_string(seq);
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(w[r].Alloc(Spec(in, dtype, in_n), {}).ok());
      if (!in_place) {
        ASSERT_TRUE(w[r].Alloc(Spec(out, dtype, out_n), {}).ok());
      }
      OpSpec spec = Op(kind, seq, in, in_place ? "" : out);
      spec.reduce_op = op;
      spec.premul_scale = 0.5;
      spec.root = 1;
      BenchOptions options;
      options.warmup = 1;
      options.iters = 3;
      options.check = true;
      auto work = w[r].Bench(spec, options);
      ASSERT_TRUE(work.ok()) << work.status();
      works[r] = *work;
    }
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(works[r]->Wait(kWait).ok()) << works[r]->status();
      const BenchResult result = works[r]->result();
      EXPECT_EQ(result.wrong, 0) << "rank " << r;
      EXPECT_GT(result.avg_us, 0);
      EXPECT_GT(result.time_us, 0);
      // Over the same instances: consistent whatever the load.
      EXPECT_LE(result.min_us, result.avg_us);
      EXPECT_GE(result.max_us, result.avg_us);
      ASSERT_TRUE(w[r].Free(in).ok());  // released by now
      if (!in_place) {
        ASSERT_TRUE(w[r].Free(out).ok());
      }
    }
    ++seq;
  };
  const int64_t n = 1000;
  for (bool in_place : {false, true}) {
    bench_all(OpKind::kAllReduce, DType::kFloat32, ReduceOp::kSum, n, n,
              in_place);
    bench_all(OpKind::kBroadcast, DType::kFloat32, ReduceOp::kSum, n, n,
              in_place);
    bench_all(OpKind::kReduce, DType::kFloat32, ReduceOp::kMax, n, n, in_place);
    bench_all(OpKind::kAllGather, DType::kFloat32, ReduceOp::kSum,
              in_place ? 3 * n : n, 3 * n, in_place);
    bench_all(OpKind::kReduceScatter, DType::kFloat32, ReduceOp::kSum, 3 * n, n,
              in_place);
    bench_all(OpKind::kGather, DType::kFloat32, ReduceOp::kSum,
              in_place ? 3 * n : n, 3 * n, in_place);
    bench_all(OpKind::kScatter, DType::kFloat32, ReduceOp::kSum, 3 * n,
              in_place ? 3 * n : n, in_place);
    bench_all(OpKind::kAllToAll, DType::kFloat32, ReduceOp::kSum, 3 * n, 3 * n,
              in_place);
  }
  for (DType dtype : kReducible) {
    for (ReduceOp op : kReduceOps) {
      bench_all(OpKind::kAllReduce, dtype, op, 64, 64, false);
    }
  }
  bench_all(OpKind::kAllGather, DType::kBFloat16, ReduceOp::kSum, 8, 24, false);
}

TEST(GlooLarge, SixteenMiBAllReduce) {
  World w(3);
  const int64_t n = 4 << 20;  // float32: 16 MiB
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(
        w[r].Alloc(Spec("big", DType::kFloat32, n), {FillKind::kArangePlusRank})
            .ok());
  }
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < 3; ++r)
    works.push_back(SubmitOk(w[r], Op(OpKind::kAllReduce, 0, "big")));
  for (auto& work : works)
    ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  for (int r = 0; r < 3; ++r) {
    const std::vector<double> got = ReadAll(w[r], "big");
    ASSERT_EQ(got.size(), static_cast<size_t>(n));
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      // (i + 0) + (i + 1) + (i + 2), each rounded to float32 first.
      const double want = static_cast<float>(static_cast<float>(i) * 3 + 3);
      if (got[i] != want) ++wrong;
    }
    EXPECT_EQ(wrong, 0) << "rank " << r;
  }
}

}  // namespace
}  // namespace ccl

namespace ccl {
namespace {

// gloo::float16's copy assignment skips the copy when the old bits, read as
// an integer, encode to the new value. A reduction accumulating in place
// over such bits must still be right: here the old bits 0x0002 (a tiny
// subnormal, or the int 2) meet a sum that rounds to 2.0.
TEST(GlooFloat16, InPlaceSumOverBitsThatLookLikeTheResult) {
  World w(2);
  const uint16_t rank0[3] = {0x0002, 0x0004, 0x0001};
  const uint16_t rank1[3] = {0x4000, 0x4400, 0x3C00};  // 2.0, 4.0, 1.0
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(w[r].Alloc(Spec("x", DType::kFloat16, 3), {}).ok());
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
}  // namespace ccl

namespace ccl {
namespace {

// Submits one op per rank at `seq` and returns each rank's status.
std::vector<absl::Status> RunPerRank(World& w,
                                     const std::vector<OpSpec>& specs) {
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < w.size(); ++r) works.push_back(SubmitOk(w[r], specs[r]));
  std::vector<absl::Status> statuses;
  for (auto& work : works) {
    statuses.push_back(work ? work->Wait(kWait) : absl::InternalError("none"));
  }
  return statuses;
}

// Different sizes or dtypes across ranks used to reach Gloo, whose transport
// thread ends the process when a peer sends more than was posted. Ranks now
// agree first: every rank fails with the difference named, and the world
// keeps working.
TEST(GlooAgreement, MismatchedCollectivesFailEverywhereAndTheWorldGoesOn) {
  World w(2);
  ASSERT_TRUE(w[0].Alloc(Spec("x", DType::kFloat32, 4), {}).ok());
  ASSERT_TRUE(w[1].Alloc(Spec("x", DType::kFloat32, 8), {}).ok());
  for (const absl::Status& status : RunPerRank(
           w,
           {Op(OpKind::kAllReduce, 0, "x"), Op(OpKind::kAllReduce, 0, "x")})) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("rank 1 runs all_reduce of 8 float32"),
              std::string::npos)
        << status;
  }
  ASSERT_TRUE(w[0].Alloc(Spec("y", DType::kInt32, 4), {}).ok());
  ASSERT_TRUE(w[1].Alloc(Spec("y", DType::kFloat32, 4), {}).ok());
  for (const absl::Status& status : RunPerRank(
           w,
           {Op(OpKind::kBroadcast, 1, "y"), Op(OpKind::kBroadcast, 1, "y")})) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("int32"), std::string::npos) << status;
  }
  // Two different collectives at one seq.
  ASSERT_TRUE(w[1].Free("y").ok());
  ASSERT_TRUE(w[1].Alloc(Spec("y", DType::kInt32, 4), {}).ok());
  for (const absl::Status& status : RunPerRank(
           w,
           {Op(OpKind::kAllReduce, 2, "y"), Op(OpKind::kBroadcast, 2, "y")})) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("broadcast"), std::string::npos) << status;
  }
  for (const absl::Status& status : RunPerRank(
           w,
           {Op(OpKind::kAllReduce, 3, "y"), Op(OpKind::kAllReduce, 3, "y")})) {
    EXPECT_TRUE(status.ok()) << status;
  }
  EXPECT_EQ(w[0].Groups()[0].state, "ready");
}

TEST(GlooAgreement, SendRecvSizeMismatchFailsOnBothSides) {
  World w(2);
  ASSERT_TRUE(w[0].Alloc(Spec("s", DType::kFloat32, 4), {}).ok());
  ASSERT_TRUE(w[1].Alloc(Spec("s", DType::kFloat32, 2), {}).ok());
  OpSpec send = Op(OpKind::kSend, 0, "s");
  send.peer = 1;
  OpSpec recv = Op(OpKind::kRecv, 0, "s");
  recv.peer = 0;
  for (const absl::Status& status : RunPerRank(w, {send, recv})) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("do not match"), std::string::npos)
        << status;
  }
  ASSERT_TRUE(w[1].Free("s").ok());
  ASSERT_TRUE(w[1].Alloc(Spec("s", DType::kFloat32, 4), {}).ok());
  send.seq = recv.seq = 1;
  for (const absl::Status& status : RunPerRank(w, {send, recv})) {
    EXPECT_TRUE(status.ok()) << status;
  }
}

// The tutorial's trap: a recv whose sender never sends. It fails within its
// timeout and says what is missing. Gloo closes the pair on a timeout, so
// the group reports itself broken (a new generation rebuilds it) while the
// worker and its tensors stay.
TEST(GlooAgreement, LoneRecvTimesOutAndSaysWhatIsMissing) {
  World w(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(w[r].Alloc(Spec("t", DType::kFloat32, 3), {}).ok());
  }
  OpSpec recv = Op(OpKind::kRecv, 0, "t");
  recv.peer = 0;
  recv.timeout = milliseconds(300);
  const std::vector<absl::Status> statuses =
      RunPerRank(w, {Op(OpKind::kNop, 0), recv});
  EXPECT_TRUE(statuses[0].ok()) << statuses[0];
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kDeadlineExceeded)
      << statuses[1];
  EXPECT_NE(statuses[1].message().find("rank 0 posted no matching send"),
            std::string::npos)
      << statuses[1];
  EXPECT_EQ(w[1].Groups()[0].state, "broken");
  auto next = SubmitOk(w[1], Op(OpKind::kBarrier, 1));
  EXPECT_EQ(next->Wait(kWait).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadAll(w[1], "t").size(), 3u);
}

}  // namespace
}  // namespace ccl
