// A fill that depends on the rank is made with the rank the request meant:
// a worker answers requests while its world is still forming (its NCCL init
// over sockets takes seconds), and before it knows its rank there it must
// not fill with the rank it had before (0 for a fresh worker). Two cores in
// one process, Gloo through an in-memory store.
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/worker_core.h"
#include "tests/testing/in_memory_kv_store.h"

namespace ccl {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::unique_ptr<WorkerCore> MakeCore(
    milliseconds op_timeout = milliseconds(20000)) {
  WorkerConfig config;
  config.default_op_timeout = op_timeout;
  auto core = WorkerCore::Create(config);
  EXPECT_TRUE(core.ok()) << core.status();
  return core.ok() ? *std::move(core) : nullptr;
}

TensorMeta Spec(const std::string& name) {
  TensorMeta meta;
  meta.name = name;
  meta.dtype = DType::kFloat32;
  meta.shape = {4};
  return meta;
}

Fill RankPlusOne() {
  Fill fill;
  fill.kind = FillKind::kRankPlusOne;
  return fill;
}

// Starts an AllocAsync; the future holds its answer.
std::future<absl::StatusOr<TensorMeta>> StartAlloc(WorkerCore& core,
                                                   const std::string& name,
                                                   const Fill& fill,
                                                   RankView view,
                                                   milliseconds wait) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<TensorMeta>>>();
  auto future = promise->get_future();
  core.AllocAsync(Spec(name), fill, view, wait,
                  [promise](absl::StatusOr<TensorMeta> result) {
                    promise->set_value(std::move(result));
                  });
  return future;
}

std::vector<float> Values(WorkerCore& core, const std::string& name) {
  std::vector<float> values;
  absl::Status read = core.Read(
      name, 0, 0, 1 << 20, [&](int64_t, std::span<const std::byte> chunk) {
        const size_t before = values.size();
        values.resize(before + chunk.size() / sizeof(float));
        std::memcpy(values.data() + before, chunk.data(), chunk.size());
        return true;
      });
  EXPECT_TRUE(read.ok()) << read;
  return values;
}

std::vector<absl::Status> FormTwoRanks(WorkerCore& rank0, WorkerCore& rank1,
                                       int64_t generation,
                                       testing::InMemoryKvStore& store) {
  std::vector<absl::Status> formed(2);
  std::thread other(
      [&] { formed[1] = rank1.FormWorld(1, 2, generation, store); });
  formed[0] = rank0.FormWorld(0, 2, generation, store);
  other.join();
  return formed;
}

TEST(RankViewTest, AFreshWorkerFillsWithTheRankItIsGivenNotZero) {
  auto rank0 = MakeCore();
  auto rank1 = MakeCore();
  ASSERT_TRUE(rank0 && rank1);
  // The client saw generation 1 complete with this worker as rank 1, and
  // one without a view of the world: both are asked before it formed.
  auto stamped =
      StartAlloc(*rank1, "stamped", RankPlusOne(), RankView{1, 1}, seconds(30));
  auto unstamped =
      StartAlloc(*rank1, "unstamped", RankPlusOne(), RankView{}, seconds(30));
  // A fill that does not depend on the rank does not wait.
  Fill ones;
  ones.kind = FillKind::kOnes;
  auto plain = StartAlloc(*rank1, "plain", ones, RankView{1, 1}, seconds(30));
  ASSERT_EQ(plain.wait_for(seconds(10)), std::future_status::ready);
  ASSERT_TRUE(plain.get().ok());
  EXPECT_EQ(stamped.wait_for(milliseconds(0)), std::future_status::timeout);

  testing::InMemoryKvStore store;
  for (const absl::Status& s : FormTwoRanks(*rank0, *rank1, 1, store)) {
    ASSERT_TRUE(s.ok()) << s;
  }
  ASSERT_EQ(stamped.wait_for(seconds(10)), std::future_status::ready);
  auto made = stamped.get();
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ(Values(*rank1, "stamped"), std::vector<float>(4, 2.0f));
  ASSERT_EQ(unstamped.wait_for(seconds(10)), std::future_status::ready);
  ASSERT_TRUE(unstamped.get().ok());
  EXPECT_EQ(Values(*rank1, "unstamped"), std::vector<float>(4, 2.0f));
  rank0->Shutdown();
  rank1->Shutdown();
}

TEST(RankViewTest, ARequestForAnotherRankIsRefusedNotFilledWrong) {
  auto rank0 = MakeCore();
  auto rank1 = MakeCore();
  ASSERT_TRUE(rank0 && rank1);
  testing::InMemoryKvStore store;
  for (const absl::Status& s : FormTwoRanks(*rank0, *rank1, 1, store)) {
    ASSERT_TRUE(s.ok()) << s;
  }
  auto wrong =
      StartAlloc(*rank1, "y", RankPlusOne(), RankView{1, 0}, seconds(10));
  ASSERT_EQ(wrong.wait_for(seconds(10)), std::future_status::ready);
  auto refused = wrong.get();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("this worker is rank 1"),
            std::string::npos)
      << refused.status();
  // Nothing was made under that name.
  EXPECT_EQ(rank1->Lookup("y").status().code(), absl::StatusCode::kNotFound);

  // The next generation renumbers the ranks (a shrink to rank 1 alone, as
  // rank 0): a request of that generation waits for it and gets rank 0.
  auto next =
      StartAlloc(*rank1, "next", RankPlusOne(), RankView{2, 0}, seconds(30));
  testing::InMemoryKvStore store2;
  ASSERT_TRUE(rank1->FormWorld(0, 1, 2, store2).ok());
  ASSERT_EQ(next.wait_for(seconds(10)), std::future_status::ready);
  ASSERT_TRUE(next.get().ok());
  EXPECT_EQ(Values(*rank1, "next"), std::vector<float>(4, 1.0f));
  rank0->Shutdown();
  rank1->Shutdown();
}

TEST(RankViewTest, AWorldThatDoesNotFormIsNamedWithItsCause) {
  // Rank 0 of 2 whose peer never comes: forming fails at the op timeout.
  auto alone = MakeCore(milliseconds(300));
  ASSERT_TRUE(alone);
  testing::InMemoryKvStore store;
  const absl::Status formed = alone->FormWorld(0, 2, 1, store);
  ASSERT_FALSE(formed.ok());
  auto waiting =
      StartAlloc(*alone, "y", RankPlusOne(), RankView{1, 0}, milliseconds(200));
  ASSERT_EQ(waiting.wait_for(seconds(10)), std::future_status::ready);
  auto result = waiting.get();
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  const std::string message(result.status().message());
  EXPECT_NE(message.find("does not know yet"), std::string::npos) << message;
  EXPECT_NE(message.find("forming generation 1 failed"), std::string::npos)
      << message;
  alone->Shutdown();
}

}  // namespace
}  // namespace ccl
