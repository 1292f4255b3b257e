// The host agent's batching (coordinator/host_agent/registration_batcher.h).
#include "coordinator/host_agent/registration_batcher.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ccl::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using CallIds = std::vector<RegistrationBatcher::CallId>;

constexpr auto kNever = std::chrono::hours(1);
// Long enough that consecutive calls of a test land inside one window
// however loaded the machine, short enough to wait for.
constexpr auto kWindow = std::chrono::seconds(1);

// Collects the batches sent, from any thread.
class Sent {
 public:
  RegistrationBatcher::Send Sink() {
    return [this](CallIds batch) {
      std::lock_guard<std::mutex> lock(mutex_);
      batches_.push_back(std::move(batch));
      arrived_.notify_all();
    };
  }
  std::vector<CallIds> batches() {
    std::lock_guard<std::mutex> lock(mutex_);
    return batches_;
  }
  // The first `n` batches, waiting for them at most 10 s.
  std::vector<CallIds> WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mutex_);
    arrived_.wait_for(lock, std::chrono::seconds(10),
                      [&] { return batches_.size() >= n; });
    return batches_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<CallIds> batches_;
};

TEST(RegistrationBatcherTest, ABatchLeavesOnceTheHostsWorkersWait) {
  Sent sent;
  RegistrationBatcher batcher(3, kNever, sent.Sink());
  batcher.Add(1, "");
  batcher.Add(2, "");
  EXPECT_THAT(sent.batches(), IsEmpty());
  batcher.Add(3, "");  // sent on this thread, before Add returns
  EXPECT_THAT(sent.batches(), ElementsAre(CallIds{1, 2, 3}));
  batcher.Add(4, "");
  EXPECT_THAT(sent.batches(), ElementsAre(CallIds{1, 2, 3}));
}

// A batch the window sent early leaves the round open: its stragglers leave
// the moment the last of them comes, not a window later; the next round (a
// restarted worker) waits for the window again.
TEST(RegistrationBatcherTest, StragglersLeaveAsSoonAsTheRoundIsComplete) {
  Sent sent;
  RegistrationBatcher batcher(3, kWindow, sent.Sink());
  batcher.Add(1, "");
  EXPECT_THAT(sent.WaitFor(1), ElementsAre(CallIds{1}));
  batcher.Add(2, "");
  EXPECT_THAT(sent.batches(), ElementsAre(CallIds{1}));
  batcher.Add(3, "");  // 1, 2 and 3 are the host's three
  EXPECT_THAT(sent.batches(), ElementsAre(CallIds{1}, CallIds{2, 3}));
  batcher.Add(4, "");
  EXPECT_THAT(sent.WaitFor(3),
              ElementsAre(CallIds{1}, CallIds{2, 3}, CallIds{4}));
}

TEST(RegistrationBatcherTest, WhatWaitsLeavesWhenTheWindowEnds) {
  Sent sent;
  RegistrationBatcher batcher(0, kWindow, sent.Sink());
  batcher.Add(1, "");
  batcher.Add(2, "");
  EXPECT_THAT(sent.WaitFor(1), ElementsAre(CallIds{1, 2}));
  // A later call (a restarted worker) starts a window of its own.
  batcher.Add(3, "");
  EXPECT_THAT(sent.WaitFor(2), ElementsAre(CallIds{1, 2}, CallIds{3}));
}

TEST(RegistrationBatcherTest, CallsWithDifferentCredentialsNeverShareABatch) {
  Sent sent;
  RegistrationBatcher batcher(2, kNever, sent.Sink());
  batcher.Add(1, "Bearer a");
  batcher.Add(2, "Bearer b");
  EXPECT_THAT(sent.batches(), IsEmpty());
  batcher.Add(3, "Bearer a");
  batcher.Add(4, "Bearer b");
  EXPECT_THAT(sent.batches(), ElementsAre(CallIds{1, 3}, CallIds{2, 4}));
}

TEST(RegistrationBatcherTest, ACallThatWentAwayIsNotSent) {
  Sent sent;
  RegistrationBatcher batcher(2, kNever, sent.Sink());
  batcher.Add(1, "");
  EXPECT_TRUE(batcher.Remove(1));
  batcher.Add(2, "");
  EXPECT_THAT(sent.batches(), IsEmpty());
  batcher.Add(3, "");
  EXPECT_THAT(sent.batches(), ElementsAre(CallIds{2, 3}));
  EXPECT_FALSE(batcher.Remove(2)) << "its batch has left";
  EXPECT_FALSE(batcher.Remove(99)) << "never added";
}

TEST(RegistrationBatcherTest, AWindowWhoseCallsAllWentAwaySendsNothing) {
  Sent sent;
  RegistrationBatcher batcher(0, std::chrono::milliseconds(20), sent.Sink());
  batcher.Add(1, "");
  EXPECT_TRUE(batcher.Remove(1));
  batcher.Add(2, "");
  // The first window's timer may fire before or after 2 came: either way 1
  // never leaves and 2 leaves alone.
  EXPECT_THAT(sent.WaitFor(1), ElementsAre(CallIds{2}));
}

}  // namespace
}  // namespace ccl::coordinator
