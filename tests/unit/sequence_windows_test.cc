// The client's sequence windows without gRPC: a fake coordinator that hands
// out consecutive seqs, a fake worker side that records what comes back, and
// a timer the test fires by hand at a clock it sets.
#include "client/internal/sequence_windows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"

namespace ccl::client::internal {
namespace {

using Clock = SequenceWindows::Clock;
using std::chrono::milliseconds;

class SequenceWindowsTest : public ::testing::Test {
 protected:
  std::unique_ptr<SequenceWindows> Make(int64_t max_window = 8) {
    return std::make_unique<SequenceWindows>(
        [this](const std::string& group,
               int64_t count) -> absl::StatusOr<int64_t> {
          if (!reserve_error_.ok()) return reserve_error_;
          reservations_.push_back(count);
          const int64_t first = next_[group];
          next_[group] += count;
          return first;
        },
        [this](const std::string& group, int64_t begin, int64_t end) {
          released_.emplace_back(group, begin, end);
        },
        [this](Clock::time_point when, std::function<void()> callback) {
          timers_.push_back({when, std::move(callback)});
        },
        SequenceWindows::Options{max_window, kLinger}, [this] { return now_; });
  }

  // Fires the earliest pending timer, with the clock at its time.
  void FireTimer() {
    ASSERT_FALSE(timers_.empty());
    auto timer = std::move(timers_.front());
    timers_.erase(timers_.begin());
    now_ = std::max(now_, timer.when);
    timer.callback();
  }

  static constexpr milliseconds kLinger{20};
  struct Timer {
    Clock::time_point when;
    std::function<void()> callback;
  };
  Clock::time_point now_ = Clock::time_point() + std::chrono::hours(1);
  std::map<std::string, int64_t> next_;
  std::vector<int64_t> reservations_;
  std::vector<std::tuple<std::string, int64_t, int64_t>> released_;
  std::vector<Timer> timers_;
  absl::Status reserve_error_;
};

TEST_F(SequenceWindowsTest, AOneShotOpReservesExactlyOneAndGivesNothingBack) {
  auto windows = Make();
  auto seq = windows->Take("world", 1);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(*seq, 0);
  EXPECT_EQ(reservations_, std::vector<int64_t>{1});
  EXPECT_TRUE(timers_.empty());
  windows->ReleaseAll();
  EXPECT_TRUE(released_.empty());
}

TEST_F(SequenceWindowsTest, ASteadyStreamDoublesTheWindowUpToTheCap) {
  auto windows = Make(/*max_window=*/8);
  for (int64_t i = 0; i < 40; ++i) {
    auto seq = windows->Take("world", 1);
    ASSERT_TRUE(seq.ok()) << seq.status();
    EXPECT_EQ(*seq, i) << "seqs are handed out in order, none skipped";
    now_ += milliseconds(1);
  }
  // 1 + 2 + 4 + 8 + 8 + 8 + 8 = 39 < 40 <= 47: eight reservations for 40
  // ops, and each next one contiguous with the last, so nothing went back.
  EXPECT_EQ(reservations_, (std::vector<int64_t>{1, 2, 4, 8, 8, 8, 8, 8}));
  EXPECT_TRUE(released_.empty());
}

TEST_F(SequenceWindowsTest, UnusedSeqsGoBackAfterTheLingerAndTheWindowShrinks) {
  auto windows = Make();
  ASSERT_TRUE(windows->Take("world", 1).ok());  // reserves [0, 1)
  ASSERT_TRUE(windows->Take("world", 1).ok());  // reserves [1, 3), holds 2
  ASSERT_EQ(timers_.size(), 1u);
  EXPECT_EQ(timers_[0].when, now_ + kLinger);
  FireTimer();
  ASSERT_EQ(released_.size(), 1u);
  EXPECT_EQ(released_[0], std::make_tuple(std::string("world"), 2, 3));
  EXPECT_TRUE(timers_.empty()) << "nothing is held, so nothing to wake for";
  // An idle client is not in a loop: its next op reserves one seq again.
  auto seq = windows->Take("world", 1);
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(*seq, 3);
  EXPECT_EQ(reservations_.back(), 1);
}

TEST_F(SequenceWindowsTest, ATimerBeforeTheLingerEndsWaitsForTheLastUse) {
  auto windows = Make();
  const Clock::time_point start = now_;
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(windows->Take("world", 1).ok());  // the 4th reserves [3, 7)
  }
  ASSERT_EQ(timers_.size(), 1u);
  now_ += milliseconds(15);
  ASSERT_TRUE(windows->Take("world", 1).ok());  // seq 4: still in use
  FireTimer();  // armed when seq 1 left a remainder, at start + linger
  EXPECT_TRUE(released_.empty());
  ASSERT_EQ(timers_.size(), 1u);
  EXPECT_EQ(timers_[0].when, start + milliseconds(15) + kLinger);
  FireTimer();
  ASSERT_EQ(released_.size(), 1u);
  EXPECT_EQ(released_[0], std::make_tuple(std::string("world"), 5, 7));
}

TEST_F(SequenceWindowsTest, AReservationAfterAnotherClientsGivesBackTheRest) {
  auto windows = Make();
  ASSERT_TRUE(windows->Take("world", 1).ok());  // [0, 1)
  ASSERT_TRUE(windows->Take("world", 1).ok());  // [1, 3), holds 2
  next_["world"] += 10;                         // another client's range
  auto plan = windows->Take("world", 3);        // more than is held
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, 13);
  ASSERT_EQ(released_.size(), 1u);
  EXPECT_EQ(released_[0], std::make_tuple(std::string("world"), 2, 3));
}

TEST_F(SequenceWindowsTest, AContiguousReservationExtendsWhatIsHeld) {
  auto windows = Make();
  ASSERT_TRUE(windows->Take("world", 1).ok());  // [0, 1)
  ASSERT_TRUE(windows->Take("world", 1).ok());  // [1, 3), holds 2
  auto plan = windows->Take("world", 5);        // reserves [3, 8)
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(*plan, 2) << "the held seq 2 starts the plan";
  EXPECT_TRUE(released_.empty());
  EXPECT_EQ(windows->Held("world"), std::make_pair(int64_t{7}, int64_t{8}));
}

TEST_F(SequenceWindowsTest, GroupsHaveTheirOwnWindows) {
  auto windows = Make();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(windows->Take("world", 1).ok());
    ASSERT_TRUE(windows->Take("even", 1).ok());
  }
  EXPECT_EQ(windows->Held("world"), std::make_pair(int64_t{2}, int64_t{3}));
  EXPECT_EQ(windows->Held("even"), std::make_pair(int64_t{2}, int64_t{3}));
  windows->ReleaseAll();
  EXPECT_EQ(released_.size(), 2u);
  EXPECT_EQ(windows->Held("world").first, windows->Held("world").second);
}

TEST_F(SequenceWindowsTest, WithoutReleaseOnTheWorkersOnlyWhatIsUsedIsTaken) {
  auto windows = Make();
  windows->StopReservingAhead();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(windows->Take("world", 1).ok());
  EXPECT_EQ(reservations_, (std::vector<int64_t>{1, 1, 1, 1, 1}));
  auto plan = windows->Take("world", 4);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(reservations_.back(), 4);
  windows->ReleaseAll();
  EXPECT_TRUE(released_.empty());
}

TEST_F(SequenceWindowsTest, ACoordinatorErrorIsTheCallersAndChangesNothing) {
  auto windows = Make();
  ASSERT_TRUE(windows->Take("world", 1).ok());
  reserve_error_ = absl::UnavailableError("coordinator gone");
  auto seq = windows->Take("world", 1);
  EXPECT_EQ(seq.status().code(), absl::StatusCode::kUnavailable);
  reserve_error_ = absl::OkStatus();
  seq = windows->Take("world", 1);
  ASSERT_TRUE(seq.ok());
  EXPECT_EQ(*seq, 1);
}

TEST_F(SequenceWindowsTest, TakingNothingIsRefused) {
  auto windows = Make();
  EXPECT_EQ(windows->Take("world", 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(reservations_.empty());
}

// After a failed op the client gives back what the group holds and asks
// the coordinator for its next op's seq (which tells it of a re-form),
// starting again at one number; other groups keep theirs.
TEST_F(SequenceWindowsTest, DropGivesBackTheGroupsSeqsAndAsksAgain) {
  auto windows = Make(/*max_window=*/8);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(windows->Take("world", 1).ok());
  ASSERT_TRUE(windows->Take("pair", 1).ok());
  ASSERT_TRUE(windows->Take("pair", 1).ok());
  const auto [next, end] = windows->Held("world");
  ASSERT_LT(next, end) << "a stream of four reserves ahead";
  const auto pair_held = windows->Held("pair");
  released_.clear();
  reservations_.clear();
  windows->Drop("world");
  ASSERT_EQ(released_.size(), 1u);
  EXPECT_EQ(released_[0], std::make_tuple(std::string("world"), next, end));
  EXPECT_EQ(windows->Held("pair"), pair_held);
  auto seq = windows->Take("world", 1);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(*seq, end) << "the next seq comes from the coordinator";
  EXPECT_EQ(reservations_, std::vector<int64_t>{1});
  windows->Drop("unknown");  // nothing held: nothing happens
  EXPECT_EQ(released_.size(), 1u);
}

// A client that moved to a new generation forgets what it held in the old
// one without giving it back (those executors are gone), and reserves anew.
TEST_F(SequenceWindowsTest, ForgetAllGivesNothingBackAndReservesAnew) {
  auto windows = Make(/*max_window=*/8);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(windows->Take("world", 1).ok());
  released_.clear();
  reservations_.clear();
  windows->ForgetAll();
  EXPECT_TRUE(released_.empty());
  EXPECT_EQ(windows->Held("world"), std::make_pair(int64_t{0}, int64_t{0}));
  next_.clear();  // the new generation counts from 0
  auto seq = windows->Take("world", 1);
  ASSERT_TRUE(seq.ok()) << seq.status();
  EXPECT_EQ(*seq, 0);
  EXPECT_EQ(reservations_, std::vector<int64_t>{1});
  // A timer armed in the old generation finds nothing to give back.
  while (!timers_.empty()) FireTimer();
  EXPECT_TRUE(released_.empty());
}

// The cases both clients run: tests/spec/sequence_windows.json, which
// client/python/tests/test_seq_windows.py runs against the Python client.
using Triple = std::tuple<std::string, int64_t, int64_t>;

std::vector<Triple> Triples(const nlohmann::json& list) {
  std::vector<Triple> out;
  for (const auto& t : list) {
    out.emplace_back(t[0].get<std::string>(), t[1].get<int64_t>(),
                     t[2].get<int64_t>());
  }
  return out;
}

TEST(SequenceWindowsSpecTest, TheCasesBothClientsRun) {
  std::ifstream in(CCL_SEQUENCE_WINDOWS_SPEC);
  ASSERT_TRUE(in) << CCL_SEQUENCE_WINDOWS_SPEC;
  const nlohmann::json spec = nlohmann::json::parse(in);
  ASSERT_GE(spec["cases"].size(), 5u);
  const SequenceWindows::Options options{
      spec["max_window"].get<int64_t>(),
      milliseconds(spec["linger_ms"].get<int64_t>())};
  for (const auto& c : spec["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
    std::map<std::string, int64_t> next;
    std::vector<Triple> reserved, released;
    std::multimap<Clock::time_point, std::function<void()>> timers;
    SequenceWindows windows(
        [&](const std::string& group,
            int64_t count) -> absl::StatusOr<int64_t> {
          const int64_t first = next[group];
          next[group] += count;
          reserved.emplace_back(group, first, count);
          return first;
        },
        [&](const std::string& group, int64_t begin, int64_t end) {
          released.emplace_back(group, begin, end);
        },
        [&](Clock::time_point when, std::function<void()> callback) {
          timers.emplace(when, std::move(callback));
        },
        options, [&] { return now; });
    int index = 0;
    for (const auto& step : c["steps"]) {
      SCOPED_TRACE(absl::StrCat("step ", index++, ": ", step.dump()));
      reserved.clear();
      released.clear();
      std::optional<int64_t> seq;
      if (step.contains("take")) {
        auto taken = windows.Take(step["take"].get<std::string>(), 1);
        ASSERT_TRUE(taken.ok()) << taken.status();
        seq = *taken;
      } else if (step.contains("idle_ms")) {
        // Due timers run in time order, each with the clock at its time.
        const Clock::time_point until =
            now + milliseconds(step["idle_ms"].get<int64_t>());
        while (!timers.empty() && timers.begin()->first <= until) {
          auto timer = timers.extract(timers.begin());
          now = std::max(now, timer.key());
          timer.mapped()();
        }
        now = until;
      } else if (step.contains("drop")) {
        windows.Drop(step["drop"].get<std::string>());
      } else if (step.contains("release_all")) {
        windows.ReleaseAll();
      } else {
        FAIL() << "unknown step";
      }
      if (step.contains("seq")) {
        EXPECT_EQ(seq, std::optional<int64_t>(step["seq"].get<int64_t>()));
      }
      EXPECT_EQ(reserved,
                Triples(step.value("reserved", nlohmann::json::array())));
      std::vector<Triple> want =
          Triples(step.value("released", nlohmann::json::array()));
      std::sort(want.begin(), want.end());
      std::sort(released.begin(), released.end());
      EXPECT_EQ(released, want);
      if (step.contains("held")) {
        for (const auto& [group, range] : step["held"].items()) {
          EXPECT_EQ(
              windows.Held(group),
              std::make_pair(range[0].get<int64_t>(), range[1].get<int64_t>()))
              << group;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ccl::client::internal
