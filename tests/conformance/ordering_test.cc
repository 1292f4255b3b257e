// Point-to-point, ordering by seq, validation before queueing, the work
// table, benches with checks, large messages, and the agreement between
// ranks, on the backend this binary was built for (world.h).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/element.h"
#include "gtest/gtest.h"
#include "tests/conformance/world.h"

namespace ccl::conformance {
namespace {

TEST(PointToPoint, BothDirectionsAndRing) {
  CCL_REQUIRE_RANKS(3);
  World w(3);
  for (int r = 0; r < 3; ++r) {
    AllocWith(w[r], "buf", DType::kFloat64, {r * 10.0, r * 10.0 + 1});
    ASSERT_TRUE(Alloc(w[r], "rx", DType::kFloat64, 2, {}).ok());
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
    ASSERT_TRUE(Alloc(w[r], "rx", DType::kFloat64, 2, {}).ok());
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

TEST(Ordering, OutOfOrderSubmissionsRunInSeqOrder) {
  CCL_REQUIRE_RANKS(3);
  World w(3);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(
        Alloc(w[r], "t", DType::kInt64, 4, {FillKind::kRankPlusOne}).ok());
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
    EXPECT_EQ(groups[0].finished_below, 3);
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

TEST(Ordering, SeqGapIsDeclaredLostAndSkipped) {
  WorkerConfig config = DefaultConfig();
  config.seq_gap_timeout = milliseconds(300);
  World w(2, config);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(Alloc(w[r], "t", DType::kFloat32, 3, {FillKind::kOnes}).ok());
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

// A missing seq whose holder is gone (the coordinator says its client's
// lease ended: WorkerConfig::on_sequence_gap) is skipped at once, with the
// rest of the dead client's range, not after the gap timeout (10 minutes
// here). A seq of that range the client did send before it died runs.
TEST(Ordering, AGapWhoseHolderIsGoneIsSkippedAtOnce) {
  WorkerConfig config = DefaultConfig();
  config.seq_gap_timeout = std::chrono::minutes(10);
  std::mutex mutex;
  std::vector<int64_t> asked;
  std::vector<std::thread> answers;
  int stopped = 0;
  config.on_sequence_gap =
      [&](int64_t, const std::string& group, int64_t seq,
          std::function<void(int64_t, int64_t, absl::Status)> skip)
      -> std::function<void()> {
    std::lock_guard<std::mutex> lock(mutex);
    EXPECT_EQ(group, "world");
    asked.push_back(seq);
    // As the coordinator answers: on its own thread, the dead range 0..3.
    answers.emplace_back([skip] {
      skip(0, 4,
           absl::FailedPreconditionError(
               "skipped: seqs 0..3 were reserved by a client that "
               "went away"));
    });
    return [&] {
      std::lock_guard<std::mutex> lock(mutex);
      ++stopped;
    };
  };
  {
    World w(2, config);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(Alloc(w[r], "t", DType::kFloat32, 3, {FillKind::kOnes}).ok());
    }
    std::vector<std::shared_ptr<Work>> works;
    for (int r = 0; r < 2; ++r) {
      works.push_back(SubmitOk(w[r], Op(OpKind::kAllReduce, 2, "t")));
      works.push_back(SubmitOk(w[r], Op(OpKind::kAllReduce, 4, "t")));
    }
    for (auto& work : works)
      ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
    EXPECT_EQ(ReadAll(w[0], "t"), (std::vector<double>{4, 4, 4}));
    auto late = w[1].Submit(Op(OpKind::kAllReduce, 3, "t"));
    EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(late.status().message().find("went away"), std::string::npos)
        << late.status();
  }
  std::lock_guard<std::mutex> lock(mutex);
  for (auto& answer : answers) answer.join();
  // Each rank asked once, about seq 0, and ended the question.
  EXPECT_EQ(asked, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(stopped, 2);
}

// With busy polling (WorkerConfig::busy_poll) the executor's threads spin
// between ops instead of sleeping: order, pauses longer than the spin, a
// lost seq and shutdown behave as they do without it.
TEST(Ordering, BusyPollingKeepsOrderPausesGapsAndShutdown) {
  WorkerConfig config = DefaultConfig();
  config.busy_poll = std::chrono::microseconds(500);
  config.seq_gap_timeout = milliseconds(300);
  auto w = std::make_unique<World>(2, config);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(
        Alloc((*w)[r], "t", DType::kInt64, 2, {FillKind::kRankPlusOne}).ok());
  }
  // 4 bursts of 10 all_reduces (sum), rank 1 submitting each burst in
  // reverse, with pauses of 5 ms (ten spins) between: t = 3 * 2^39.
  constexpr int kBursts = 4, kBurst = 10;
  for (int burst = 0; burst < kBursts; ++burst) {
    std::vector<std::shared_ptr<Work>> works;
    for (int r = 0; r < 2; ++r) {
      for (int i = 0; i < kBurst; ++i) {
        const int seq = burst * kBurst + (r == 0 ? i : kBurst - 1 - i);
        works.push_back(SubmitOk((*w)[r], Op(OpKind::kAllReduce, seq, "t")));
      }
    }
    for (auto& work : works)
      ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
    std::this_thread::sleep_for(milliseconds(5));
  }
  const double expected = 3.0 * static_cast<double>(int64_t{1} << 39);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ReadAll((*w)[r], "t"), (std::vector<double>{expected, expected}));
  }
  // A seq that never comes is skipped after the gap timeout.
  const int64_t next = kBursts * kBurst;
  std::vector<std::shared_ptr<Work>> after_gap;
  for (int r = 0; r < 2; ++r) {
    after_gap.push_back(
        SubmitOk((*w)[r], Op(OpKind::kAllReduce, next + 1, "t")));
  }
  for (auto& work : after_gap)
    ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  EXPECT_EQ((*w)[0].Submit(Op(OpKind::kAllReduce, next, "t")).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // Queued ops are cancelled and the spinning threads joined at shutdown.
  auto queued = SubmitOk((*w)[0], Op(OpKind::kAllReduce, next + 3, "t"));
  ASSERT_NE(queued, nullptr);
  w.reset();
  const absl::Status cancelled = queued->Wait(milliseconds(0));
  EXPECT_FALSE(cancelled.ok());
  EXPECT_NE(cancelled.code(), absl::StatusCode::kDeadlineExceeded) << cancelled;
}

TEST(Validation, RefusesBadOpsBeforeQueueing) {
  World w(2);
  WorkerCore& c = w[0];
  ASSERT_TRUE(Alloc(c, "f4", DType::kFloat32, 4, {}).ok());
  ASSERT_TRUE(Alloc(c, "f5", DType::kFloat32, 5, {}).ok());
  ASSERT_TRUE(Alloc(c, "f8", DType::kFloat32, 8, {}).ok());
  ASSERT_TRUE(Alloc(c, "i4", DType::kInt32, 4, {}).ok());
  ASSERT_TRUE(Alloc(c, "bf", DType::kBFloat16, 4, {}).ok());

  auto code = [&](OpSpec spec) { return c.Submit(spec).status(); };
  auto expect = [&](absl::StatusCode want, OpSpec spec,
                    const std::string& mention) {
    absl::Status status = code(spec);
    EXPECT_EQ(status.code(), want) << status;
    EXPECT_NE(status.message().find(mention), std::string::npos)
        << status << " should mention " << mention;
  };
  using S = absl::StatusCode;
  // Each refused op still takes its seq. Rank 1 is sent the same op, as
  // a client does, and holds none of the tensors: it refuses too (NOT_FOUND)
  // and both stand in for the op at its seq (or, where the request itself
  // is malformed, both give the seq back).
  int64_t seq = 0;
  auto next = [&](OpSpec spec) {
    spec.seq = seq;
    EXPECT_FALSE(w[1].Submit(spec).ok());
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
  // A generation this worker has not reached takes its seq all the same
  // (the client most likely reserved it): on rank 1 too.
  EXPECT_EQ(w[1].Submit(generation).status().code(), S::kFailedPrecondition);
  // premul_sum scales in floating point on every backend.
  OpSpec premul = Op(OpKind::kAllReduce, 0, "i4");
  premul.reduce_op = ReduceOp::kPremulSum;
  premul.premul_scale = 0.5;
  expect(S::kInvalidArgument, next(premul), "premul_sum");
  // A refused seq cannot be reused, and the next seq runs at once (well
  // within the 20 s gap timeout) with bfloat16 moving fine.
  EXPECT_EQ(c.Submit(Op(OpKind::kBarrier, 0)).status().code(),
            S::kAlreadyExists);
  auto a = SubmitOk(w[0], Op(OpKind::kBroadcast, seq, "bf"));
  ASSERT_TRUE(Alloc(w[1], "bf", DType::kBFloat16, 4, {FillKind::kArange}).ok());
  auto b = SubmitOk(w[1], Op(OpKind::kBroadcast, seq, "bf"));
  ASSERT_TRUE(a->Wait(std::chrono::seconds(5)).ok()) << a->status();
  ASSERT_TRUE(b->Wait(std::chrono::seconds(5)).ok()) << b->status();
  EXPECT_EQ(ReadAll(w[1], "bf"), (std::vector<double>{0, 0, 0, 0}));
}

// An op one rank refuses for its own tensors (a restarted rank lost one;
// another client holds it there) fails on every rank, naming that rank,
// with nothing sent, and the group goes on: the refusing rank stands in for
// the op in its agreement rather than running ahead of the others, which
// would abort the communicator and fail every later op until a re-form.
TEST(Validation, AnOpOneRankRefusesFailsEverywhereAndTheGroupGoesOn) {
  World w(3);
  for (int r : {0, 2}) {
    ASSERT_TRUE(Alloc(w[r], "t", DType::kFloat32, 2, {FillKind::kOnes}).ok());
  }
  ASSERT_TRUE(Alloc(w[1], "other", DType::kFloat32, 2, {FillKind::kOnes}).ok());
  auto a = SubmitOk(w[0], Op(OpKind::kAllReduce, 0, "t"));
  EXPECT_EQ(w[1].Submit(Op(OpKind::kAllReduce, 0, "t")).status().code(),
            absl::StatusCode::kNotFound);
  auto c = SubmitOk(w[2], Op(OpKind::kAllReduce, 0, "t"));
  for (auto* work : {&a, &c}) {
    const absl::Status status = (*work)->Wait(kWait);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find("refused at rank 1"), std::string::npos)
        << status;
  }
  // Nothing was sent, and the next seq runs on the same communicator.
  EXPECT_EQ(ReadAll(w[0], "t"), (std::vector<double>{1, 1}));
  ASSERT_TRUE(Alloc(w[1], "t", DType::kFloat32, 2, {FillKind::kOnes}).ok());
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < 3; ++r) {
    works.push_back(SubmitOk(w[r], Op(OpKind::kAllReduce, 1, "t")));
  }
  for (auto& work : works)
    ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  EXPECT_EQ(ReadAll(w[1], "t"), (std::vector<double>{3, 3}));
  // A send refused at its sender fails its recv the same way.
  auto recv = SubmitOk(w[2], [] {
    OpSpec spec = Op(OpKind::kRecv, 2, "t");
    spec.peer = 0;
    return spec;
  }());
  OpSpec send = Op(OpKind::kSend, 2, "missing");
  send.peer = 2;
  EXPECT_EQ(w[0].Submit(send).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(w[1].Submit(Op(OpKind::kNop, 2)).ok());
  const absl::Status received = recv->Wait(kWait);
  EXPECT_EQ(received.code(), absl::StatusCode::kFailedPrecondition) << received;
  EXPECT_NE(received.message().find("refused at rank 0"), std::string::npos)
      << received;
  EXPECT_EQ(ReadAll(w[2], "t"), (std::vector<double>{3, 3}));
}

// The same for a bench: the refusing rank stands in at its seq, so the
// ranks that accepted it fail at its first checkpoint, naming that rank,
// and the group goes on in step (given back, the seq would put that rank
// ahead and abort the communicator at the next op).
TEST(Validation, ABenchOneRankRefusesFailsEverywhereAndTheGroupGoesOn) {
  World w(3);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(Alloc(w[r], "t", DType::kFloat32, 2, {FillKind::kOnes}).ok());
  }
  BenchOptions options;
  options.warmup = 1;
  options.iters = 5;
  for (bool agree : {true, false}) {
    SCOPED_TRACE(agree ? "checked" : "skip_agreement");
    const int64_t seq = agree ? 0 : 1;
    OpSpec spec = Op(OpKind::kAllReduce, seq, "t");
    spec.agree = agree;
    OpSpec missing = spec;
    missing.input = "missing";
    auto a = w[0].Bench(spec, options);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(w[1].Bench(missing, options).status().code(),
              absl::StatusCode::kNotFound);
    auto c = w[2].Bench(spec, options);
    ASSERT_TRUE(c.ok()) << c.status();
    for (auto* work : {&*a, &*c}) {
      const absl::Status status = (*work)->Wait(kWait);
      EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
      EXPECT_NE(status.message().find("refused at rank 1"), std::string::npos)
          << status;
    }
  }
  // Nothing was sent, and the next seq runs on the same communicator.
  EXPECT_EQ(ReadAll(w[0], "t"), (std::vector<double>{1, 1}));
  std::vector<std::shared_ptr<Work>> works;
  for (int r = 0; r < 3; ++r) {
    works.push_back(SubmitOk(w[r], Op(OpKind::kAllReduce, 2, "t")));
  }
  for (auto& work : works)
    ASSERT_TRUE(work->Wait(kWait).ok()) << work->status();
  EXPECT_EQ(ReadAll(w[1], "t"), (std::vector<double>{3, 3}));
}

TEST(Validation, NoWorldYet) {
  auto core = WorkerCore::Create(DefaultConfig());
  ASSERT_TRUE(core.ok());
  EXPECT_EQ((*core)->Submit(Op(OpKind::kBarrier, 0)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE((*core)->Groups().empty());
  if (!kCuda) {
    // Where no GPU is visible (or the build has no NCCL), a CUDA worker is
    // refused up front rather than failing at its first op.
    WorkerConfig gpu;
    gpu.device = Device{DeviceKind::kCuda, 0};
    EXPECT_EQ(WorkerCore::Create(gpu).status().code(),
              absl::StatusCode::kUnimplemented);
  }
}

TEST(Work, BusyTensorsWorkTableAndCallbacks) {
  World w(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(Alloc(w[r], "t", DType::kFloat32, 2, {FillKind::kOnes}).ok());
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

TEST(Work, ShutdownCancelsQueuedOps) {
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

TEST(Work, OpTimeoutBreaksTheCommunicator) {
  World w(2);
  ASSERT_TRUE(Alloc(w[0], "t", DType::kFloat32, 2, {}).ok());
  OpSpec spec = Op(OpKind::kAllReduce, 0, "t");
  spec.timeout = milliseconds(200);
  auto work = SubmitOk(w[0], spec);  // rank 1 never joins in
  absl::Status status = work->Wait(kWait);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  // The next op names the cause first, with the code the peers' transport
  // errors carry.
  auto next = SubmitOk(w[0], Op(OpKind::kBarrier, 1));
  const absl::Status refused = next->Wait(kWait);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("seq 1 was not run: "), std::string::npos)
      << refused;
  EXPECT_NE(refused.message().find("within 200 ms"), std::string::npos)
      << refused;
  EXPECT_EQ(w[0].Groups()[0].state, "broken");
}

TEST(Bench, ChecksEveryOpKind) {
  CCL_REQUIRE_RANKS(3);
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
      ASSERT_TRUE(Alloc(w[r], in, dtype, in_n, {}).ok());
      if (!in_place) {
        ASSERT_TRUE(Alloc(w[r], out, dtype, out_n, {}).ok());
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
      if (op == ReduceOp::kPremulSum && !TakesPremulScale(dtype)) continue;
      bench_all(OpKind::kAllReduce, dtype, op, 64, 64, false);
    }
  }
  bench_all(OpKind::kAllGather, DType::kBFloat16, ReduceOp::kSum, 8, 24, false);
}

TEST(Large, SixteenMiBAllReduce) {
  CCL_REQUIRE_RANKS(3);
  World w(3);
  const int64_t n = 4 << 20;  // float32: 16 MiB
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(
        Alloc(w[r], "big", DType::kFloat32, n, {FillKind::kArangePlusRank})
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

// Different sizes or dtypes across ranks used to reach Gloo, whose transport
// thread ends the process when a peer sends more than was posted. Ranks now
// agree first: every rank fails with the difference named, and the world
// keeps working.
TEST(Agreement, MismatchedCollectivesFailEverywhereAndTheWorldGoesOn) {
  World w(2);
  ASSERT_TRUE(Alloc(w[0], "x", DType::kFloat32, 4, {}).ok());
  ASSERT_TRUE(Alloc(w[1], "x", DType::kFloat32, 8, {}).ok());
  for (const absl::Status& status : RunPerRank(
           w,
           {Op(OpKind::kAllReduce, 0, "x"), Op(OpKind::kAllReduce, 0, "x")})) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("rank 1 runs all_reduce of 8 float32"),
              std::string::npos)
        << status;
  }
  ASSERT_TRUE(Alloc(w[0], "y", DType::kInt32, 4, {}).ok());
  ASSERT_TRUE(Alloc(w[1], "y", DType::kFloat32, 4, {}).ok());
  for (const absl::Status& status : RunPerRank(
           w,
           {Op(OpKind::kBroadcast, 1, "y"), Op(OpKind::kBroadcast, 1, "y")})) {
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("int32"), std::string::npos) << status;
  }
  // Two different collectives at one seq.
  ASSERT_TRUE(w[1].Free("y").ok());
  ASSERT_TRUE(Alloc(w[1], "y", DType::kInt32, 4, {}).ok());
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

TEST(Agreement, SendRecvSizeMismatchFailsOnBothSides) {
  World w(2);
  ASSERT_TRUE(Alloc(w[0], "s", DType::kFloat32, 4, {}).ok());
  ASSERT_TRUE(Alloc(w[1], "s", DType::kFloat32, 2, {}).ok());
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
  ASSERT_TRUE(Alloc(w[1], "s", DType::kFloat32, 4, {}).ok());
  send.seq = recv.seq = 1;
  for (const absl::Status& status : RunPerRank(w, {send, recv})) {
    EXPECT_TRUE(status.ok()) << status;
  }
}

// A seq that reached only some ranks (its client died while sending it):
// the others declare it lost after the gap timeout and go on to the next
// seq, while the ranks that got it run it. The fingerprint exchange pairs
// calls by their order, not by seq, so without the seq in the fingerprint
// rank 0's seq 0 was paired with rank 1's seq 1 (identical ops passed,
// different ones failed as "ranks disagree"), and every later exchange of
// the group stayed off by one. Now both ranks see that they are out of step,
// fail at once, and the communicator is aborted so that the group re-forms.
TEST(Agreement, RanksThatSkippedDifferentSeqsAreOutOfStep) {
  WorkerConfig config = DefaultConfig();
  config.seq_gap_timeout = milliseconds(300);
  World w(2, config);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(Alloc(w[r], "t", DType::kFloat32, 3, {FillKind::kOnes}).ok());
  }
  const auto start = std::chrono::steady_clock::now();
  OpSpec only_rank0 = Op(OpKind::kAllReduce, 0, "t");
  OpSpec next = Op(OpKind::kAllReduce, 1, "t");
  only_rank0.timeout = next.timeout = milliseconds(15000);
  auto first = SubmitOk(w[0], only_rank0);
  auto second = SubmitOk(w[1], next);
  for (auto& work : {first, second}) {
    const absl::Status status = work->Wait(kWait);
    EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
    EXPECT_NE(status.message().find("out of step"), std::string::npos)
        << status;
    EXPECT_NE(status.message().find("rank 0 at seq 0; rank 1 at seq 1"),
              std::string::npos)
        << status;
  }
  // At the gap timeout, not the op's deadline.
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(10000));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(w[r].Groups()[0].state, "broken");
  EXPECT_EQ(ReadAll(w[0], "t"), (std::vector<double>{1, 1, 1}));
}

// The tutorial's trap: a recv whose sender never sends. It fails within its
// timeout and says what is missing. Gloo closes the pair on a timeout, so
// the group reports itself broken (a new generation rebuilds it) while the
// worker and its tensors stay.
TEST(Agreement, LoneRecvTimesOutAndSaysWhatIsMissing) {
  World w(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(Alloc(w[r], "t", DType::kFloat32, 3, {}).ok());
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
  const absl::Status refused = next->Wait(kWait);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_NE(refused.message().find("rank 0 posted no matching send"),
            std::string::npos)
      << refused;
  EXPECT_EQ(ReadAll(w[1], "t").size(), 3u);
}

}  // namespace
}  // namespace ccl::conformance
