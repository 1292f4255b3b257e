// The worker's membership machine (server/core/membership.h) against a fake
// coordinator and a fake worker: every transition (register, heartbeat
// loss, re-form, coordinator restart, drain) by its steps, and the loops
// that chain them where the order matters.
#include "server/core/membership.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ccl {
namespace {

using std::chrono::milliseconds;
using Clock = Membership::Clock;

class FakeWorker final : public MemberWorker {
 public:
  int rank() const override { return Get().rank; }
  int world_size() const override { return Get().world_size; }
  int64_t generation() const override { return Get().generation; }
  int64_t known_generation() const override { return Get().known; }
  absl::Status CommunicatorHealth() const override { return Get().health; }
  bool SettlingAfterBreak() const override { return Get().settling; }
  std::vector<GroupInfo> Groups() const override { return Get().groups; }
  int64_t TensorCount() const override { return 3; }
  int64_t BytesInUse() const override { return 4096; }
  std::string backend() const override { return "fake"; }

  absl::Status FormWorld(const Registration& registration) override {
    std::lock_guard<std::mutex> lock(mutex_);
    formed_.push_back(registration);
    state_.known = std::max(state_.known, registration.generation);
    if (!form_result_.ok()) return form_result_;
    state_.rank = registration.rank;
    state_.world_size = registration.world_size;
    state_.generation = registration.generation;
    state_.health = absl::OkStatus();
    return absl::OkStatus();
  }

  struct State {
    int rank = -1;
    int world_size = 0;
    int64_t generation = 0;
    int64_t known = 0;
    absl::Status health = absl::FailedPreconditionError("no world yet");
    bool settling = false;
    std::vector<GroupInfo> groups;
  };
  void Set(const State& state) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = state;
  }
  void Update(const std::function<void(State&)>& change) {
    std::lock_guard<std::mutex> lock(mutex_);
    change(state_);
  }
  void FailForming(absl::Status why) {
    std::lock_guard<std::mutex> lock(mutex_);
    form_result_ = std::move(why);
  }
  std::vector<Registration> formed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return formed_;
  }

 private:
  State Get() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return state_;
  }
  mutable std::mutex mutex_;
  State state_;
  absl::Status form_result_;
  std::vector<Registration> formed_;
};

class FakeCoordinator final : public MembershipPort {
 public:
  // Answers to Register, in order; the last one repeats.
  void AnswerRegister(std::deque<absl::StatusOr<Registration>> answers) {
    std::lock_guard<std::mutex> lock(mutex_);
    register_answers_ = std::move(answers);
  }
  // Answers to Heartbeat, in order; then the registered generation.
  void AnswerHeartbeat(std::deque<absl::StatusOr<int64_t>> answers) {
    std::lock_guard<std::mutex> lock(mutex_);
    // Kept apart: GCC 12 takes a copied StatusOr<int64_t> of an error for
    // one with an uninitialised value (-Wmaybe-uninitialized).
    for (const auto& answer : answers) {
      beat_answers_.push_back(answer.ok()
                                  ? BeatAnswer{absl::OkStatus(), *answer}
                                  : BeatAnswer{answer.status(), 0});
    }
  }

  absl::StatusOr<Registration> Register(const RegisterAsk& ask) override {
    std::lock_guard<std::mutex> lock(mutex_);
    asks_.push_back(ask);
    changed_.notify_all();
    absl::StatusOr<Registration> answer = register_answers_.front();
    if (register_answers_.size() > 1) register_answers_.pop_front();
    if (answer.ok()) generation_ = answer->generation;
    return answer;
  }
  absl::StatusOr<int64_t> Heartbeat(const HeartbeatRequest& beat,
                                    std::optional<milliseconds>) override {
    std::lock_guard<std::mutex> lock(mutex_);
    beats_.push_back(beat);
    changed_.notify_all();
    if (beat_answers_.empty()) return generation_;
    const BeatAnswer answer = beat_answers_.front();
    beat_answers_.pop_front();
    if (!answer.error.ok()) return answer.error;
    return answer.generation;
  }
  absl::Status Deregister(int rank, int64_t generation,
                          const std::string& secret) override {
    std::lock_guard<std::mutex> lock(mutex_);
    left_ = {rank, generation, secret};
    return absl::OkStatus();
  }
  std::string registrar_name() const override { return "fake coordinator"; }

  // Waits (bounded) until `asks` registrations have come.
  bool AwaitAsks(size_t asks) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(20),
                             [&] { return asks_.size() >= asks; });
  }
  // Waits (bounded) for a heartbeat that `matches`.
  bool AwaitBeat(const std::function<bool(const HeartbeatRequest&)>& matches) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(20), [&] {
      return std::any_of(beats_.begin(), beats_.end(), matches);
    });
  }
  std::vector<RegisterAsk> asks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return asks_;
  }
  std::tuple<int, int64_t, std::string> left() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return left_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<absl::StatusOr<Registration>> register_answers_;
  struct BeatAnswer {
    absl::Status error;
    int64_t generation = 0;
  };
  std::deque<BeatAnswer> beat_answers_;
  int64_t generation_ = 0;
  std::vector<RegisterAsk> asks_;
  std::vector<HeartbeatRequest> beats_;
  std::tuple<int, int64_t, std::string> left_{-1, -1, ""};
};

Registration RegistrationOf(int rank, int64_t generation, int world_size,
                            std::string secret = "issued") {
  Registration r;
  r.rank = rank;
  r.generation = generation;
  r.world_size = world_size;
  r.secret = std::move(secret);
  r.heartbeat_interval_ms = 50;
  return r;
}

class MembershipTest : public ::testing::Test {
 protected:
  MembershipOptions Options() {
    MembershipOptions options;
    options.register_timeout = milliseconds(20000);
    options.on_state = [this](const std::string& state) {
      std::lock_guard<std::mutex> lock(states_mutex_);
      states_.push_back(state);
    };
    return options;
  }
  std::vector<std::string> states() {
    std::lock_guard<std::mutex> lock(states_mutex_);
    return states_;
  }
  // A worker formed at `generation` as `rank` of `world_size`, healthy.
  void Formed(int rank, int64_t generation, int world_size) {
    FakeWorker::State state;
    state.rank = rank;
    state.world_size = world_size;
    state.generation = generation;
    state.known = generation;
    state.health = absl::OkStatus();
    worker_.Set(state);
  }

  FakeWorker worker_;
  FakeCoordinator coordinator_;
  std::mutex states_mutex_;
  std::vector<std::string> states_;
};

// ---- Register

TEST_F(MembershipTest, FirstJoinRegistersAndBuildsTheWorld) {
  coordinator_.AnswerRegister({RegistrationOf(2, 1, 4, "s1")});
  Membership membership(worker_, coordinator_, Options());
  ASSERT_TRUE(membership.Join().ok());
  ASSERT_EQ(worker_.formed().size(), 1u);
  EXPECT_EQ(worker_.formed()[0].rank, 2);
  EXPECT_EQ(worker_.formed()[0].generation, 1);
  EXPECT_EQ(states(), (std::vector<std::string>{"joining", "ready"}));
  // The first registration asks for nothing of a re-join.
  const RegisterAsk first = coordinator_.asks().at(0);
  EXPECT_FALSE(first.rejoin);
  EXPECT_FALSE(first.requested_rank.has_value());
  EXPECT_FALSE(first.resume_generation.has_value());
  // Heartbeats carry what the coordinator said, with its secret.
  const HeartbeatRequest beat = membership.NextBeat(/*report_broken=*/true);
  EXPECT_EQ(beat.rank, 2);
  EXPECT_EQ(beat.generation, 1);
  EXPECT_EQ(beat.secret, "s1");
  EXPECT_EQ(beat.tensor_count, 3);
  EXPECT_EQ(beat.reform_reason, "");
  EXPECT_EQ(membership.heartbeat_interval(), milliseconds(50));
}

TEST_F(MembershipTest, RegistrationCodesThatAreTriedAgain) {
  using absl::StatusCode;
  for (bool first : {true, false}) {
    EXPECT_TRUE(Membership::Retryable(StatusCode::kUnavailable, first));
    // The rank's lost predecessor is still held; it will not be for long.
    EXPECT_TRUE(Membership::Retryable(StatusCode::kAlreadyExists, first));
    EXPECT_FALSE(Membership::Retryable(StatusCode::kInvalidArgument, first));
    EXPECT_FALSE(Membership::Retryable(StatusCode::kPermissionDenied, first));
    EXPECT_FALSE(Membership::Retryable(StatusCode::kResourceExhausted, first));
  }
  // A first join's deadline is its register timeout; a re-join waits in
  // short attempts until every rank is back.
  EXPECT_FALSE(Membership::Retryable(StatusCode::kDeadlineExceeded, true));
  EXPECT_TRUE(Membership::Retryable(StatusCode::kDeadlineExceeded, false));
  EXPECT_FALSE(Membership::Retryable(StatusCode::kCancelled, true));
  EXPECT_TRUE(Membership::Retryable(StatusCode::kCancelled, false));
}

TEST_F(MembershipTest, ARankStillHeldIsRegisteredOnceItIsFree) {
  coordinator_.AnswerRegister(
      {absl::AlreadyExistsError("rank 0 is held by a live worker"),
       absl::UnavailableError("connection refused"), RegistrationOf(0, 2, 2)});
  Membership membership(worker_, coordinator_, Options());
  ASSERT_TRUE(membership.Join().ok());
  EXPECT_EQ(coordinator_.asks().size(), 3u);
  ASSERT_EQ(worker_.formed().size(), 1u);
}

TEST_F(MembershipTest, ARefusedRegistrationEndsTheJoinWithItsReason) {
  coordinator_.AnswerRegister(
      {absl::InvalidArgumentError("device cuda:0 is claimed twice")});
  Membership membership(worker_, coordinator_, Options());
  const absl::Status joined = membership.Join();
  EXPECT_EQ(joined.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(joined.message(), "device cuda:0 is claimed twice");
  EXPECT_EQ(coordinator_.asks().size(), 1u);
  EXPECT_TRUE(worker_.formed().empty());
}

// ---- Heartbeat loss

TEST_F(MembershipTest, WhatAHeartbeatAnswerMeans) {
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(1, 5, 2), /*first=*/true);
  const HeartbeatRequest beat = membership.NextBeat(true);
  using Beat = Membership::Beat;
  EXPECT_EQ(membership.Heard(beat, int64_t{5}), Beat::kOk);
  // The world moved on without this worker.
  EXPECT_EQ(membership.Heard(beat, int64_t{6}), Beat::kRejoin);
  // Generation over or this rank lost; a coordinator that forgot the world.
  EXPECT_EQ(membership.Heard(beat, absl::FailedPreconditionError("lost")),
            Beat::kRejoin);
  EXPECT_EQ(membership.Heard(beat, absl::NotFoundError("unknown worker")),
            Beat::kRejoin);
  // Communicators need no coordinator: keep serving, keep beating.
  EXPECT_EQ(membership.Heard(beat, absl::UnavailableError("refused")),
            Beat::kUnreachable);
  EXPECT_EQ(membership.Heard(beat, absl::DeadlineExceededError("slow")),
            Beat::kUnreachable);
  // Another process holds this worker's id: nothing a re-join fixes.
  EXPECT_EQ(membership.Heard(beat, absl::PermissionDeniedError("secret")),
            Beat::kUnreachable);
}

TEST_F(MembershipTest, BeatsComeEveryIntervalWhileNothingIsBroken) {
  Formed(0, 3, 2);
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(0, 3, 2), true);
  const Clock::time_point t0 = Clock::now();
  const milliseconds interval = membership.heartbeat_interval();
  EXPECT_TRUE(membership.PlanBeat(t0).beat);
  EXPECT_FALSE(membership.PlanBeat(t0 + interval / 2).beat);
  EXPECT_TRUE(membership.PlanBeat(t0 + interval).beat);
  EXPECT_FALSE(membership.PlanBeat(t0 + interval + interval / 2).beat);
}

// ---- Re-form

TEST_F(MembershipTest, ABrokenCommunicatorIsReportedOnceAfterItsDiagnosis) {
  Formed(0, 3, 2);
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(0, 3, 2), true);
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(membership.PlanBeat(t0).beat);  // the first, healthy beat
  worker_.Update([](FakeWorker::State& s) {
    s.health = absl::InternalError("peer 1 vanished mid-op");
    s.settling = true;
  });
  // The failed ops' diagnosis reads this generation's KV: the beat that
  // asks for a new generation waits for it.
  const milliseconds interval = membership.heartbeat_interval();
  const auto at = [&](milliseconds after) { return t0 + after; };
  EXPECT_FALSE(membership.PlanBeat(at(milliseconds(10))).beat);
  const Membership::BeatPlan held =
      membership.PlanBeat(at(interval + milliseconds(10)));
  EXPECT_TRUE(held.beat);  // the interval's beat goes, without the report
  EXPECT_FALSE(held.report_broken);
  EXPECT_EQ(membership.NextBeat(held.report_broken).reform_reason, "");
  // Diagnosed: reported at once, not at the next beat's time.
  worker_.Update([](FakeWorker::State& s) { s.settling = false; });
  const Clock::time_point reported = at(interval + milliseconds(20));
  const Membership::BeatPlan report = membership.PlanBeat(reported);
  ASSERT_TRUE(report.beat);
  EXPECT_TRUE(report.report_broken);
  EXPECT_EQ(membership.NextBeat(report.report_broken).reform_reason,
            "peer 1 vanished mid-op");
  // Once: then beats keep their interval.
  EXPECT_FALSE(membership.PlanBeat(reported + milliseconds(10)).beat);
  EXPECT_FALSE(membership.PlanBeat(reported + interval / 2).beat);
  EXPECT_TRUE(membership.PlanBeat(reported + interval).beat);
}

TEST_F(MembershipTest, ADiagnosisThatNeverEndsHoldsTheReportOnlySoLong) {
  Formed(0, 3, 2);
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(0, 3, 2), true);
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(membership.PlanBeat(t0).beat);
  worker_.Update([](FakeWorker::State& s) {
    s.health = absl::InternalError("watchdog: op timed out");
    s.settling = true;  // a check that hangs
  });
  ASSERT_FALSE(membership.PlanBeat(t0 + milliseconds(1)).report_broken);
  const Clock::time_point bound =
      t0 + milliseconds(1) + Membership::kSettleBound;
  EXPECT_FALSE(membership.PlanBeat(bound - milliseconds(1)).report_broken);
  const Membership::BeatPlan late = membership.PlanBeat(bound);
  EXPECT_TRUE(late.beat);
  EXPECT_TRUE(late.report_broken);
}

TEST_F(MembershipTest, AWorldThatFailedToFormAsksForTheNextGeneration) {
  coordinator_.AnswerRegister({RegistrationOf(1, 4, 2)});
  worker_.FailForming(absl::DeadlineExceededError("rendezvous timed out"));
  MembershipOptions options = Options();
  options.register_timeout = milliseconds(300);
  Membership membership(worker_, coordinator_, options);
  // Join waits for the next generation until its timeout; meanwhile the
  // heartbeat asks the coordinator for one, saying why.
  const absl::Status joined = membership.Join();
  EXPECT_EQ(joined.code(), absl::StatusCode::kDeadlineExceeded);
  const std::string why =
      "building the communicators of generation 4 failed: rendezvous timed "
      "out";
  EXPECT_TRUE(coordinator_.AwaitBeat(
      [&](const HeartbeatRequest& beat) { return beat.reform_reason == why; }));
}

TEST_F(MembershipTest, AReformReasonIsCutToWhatTheCoordinatorTakes) {
  Formed(0, 3, 2);
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(0, 3, 2), true);
  worker_.Update([](FakeWorker::State& s) {
    s.health =
        absl::InternalError("line one\nline two\t" + std::string(5000, 'x'));
  });
  const std::string reason = membership.NextBeat(true).reform_reason;
  EXPECT_EQ(reason.size(), 4003u);
  EXPECT_EQ(reason.substr(0, 19), "line one line two x");
  EXPECT_EQ(reason.substr(4000), "...");
}

// ---- Coordinator restart

TEST_F(MembershipTest, AReJoinOffersTheGenerationToARestartedCoordinator) {
  Formed(1, 5, 2);
  worker_.Update([](FakeWorker::State& s) {
    GroupInfo world;
    world.name = "world";
    world.next_seq = 17;
    s.groups = {world};
  });
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(1, 5, 2, "old secret"), true);
  // The coordinator answered a beat with a newer generation once.
  membership.Heard(membership.NextBeat(true), int64_t{8});
  const RegisterAsk ask = membership.NextRegistration(/*first=*/false);
  EXPECT_TRUE(ask.rejoin);
  EXPECT_EQ(ask.requested_rank, 1);
  EXPECT_EQ(ask.timeout, Membership::kRejoinAttempt);
  EXPECT_EQ(ask.secret, "old secret");
  EXPECT_EQ(ask.resume_generation, 5);
  EXPECT_EQ(ask.resume_next_seq,
            (std::map<std::string, int64_t>{{"world", 17}}));
  // Above every generation it heard of, so a restarted coordinator does not
  // hand out one that peers already used.
  EXPECT_EQ(ask.known_generation, 8);
  // The coordinator resumed it: the communicators carry on unbuilt.
  EXPECT_TRUE(membership.Registered(RegistrationOf(1, 5, 2), false));
  EXPECT_TRUE(worker_.formed().empty());
  EXPECT_EQ(states().back(), "ready");
}

TEST_F(MembershipTest, ABrokenWorldIsNotOfferedForResumption) {
  Formed(1, 5, 2);
  worker_.Update(
      [](FakeWorker::State& s) { s.health = absl::InternalError("broken"); });
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(1, 5, 2), true);
  const RegisterAsk ask = membership.NextRegistration(false);
  EXPECT_FALSE(ask.resume_generation.has_value());
  EXPECT_TRUE(ask.resume_next_seq.empty());
  // Even given the same generation back, it is built again.
  EXPECT_FALSE(membership.Registered(RegistrationOf(1, 5, 2), false));
  EXPECT_EQ(states().back(), "re-forming");
}

TEST_F(MembershipTest, ANewGenerationOrPlaceIsBuilt) {
  Formed(1, 5, 2);
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(1, 5, 2), true);
  EXPECT_FALSE(membership.Registered(RegistrationOf(1, 6, 2), false));
  EXPECT_FALSE(membership.Registered(RegistrationOf(0, 5, 2), false));
  EXPECT_FALSE(membership.Registered(RegistrationOf(1, 5, 3), false));
}

TEST_F(MembershipTest, ACoordinatorThatForgotTheWorldIsReJoinedInPlace) {
  // Joined; then the heartbeat hears "unknown" (the coordinator restarted)
  // and the loops re-register with the generation, which is resumed.
  coordinator_.AnswerRegister({RegistrationOf(0, 2, 1)});
  coordinator_.AnswerHeartbeat(
      {absl::NotFoundError("no such worker (coordinator restarted)")});
  Membership membership(worker_, coordinator_, Options());
  ASSERT_TRUE(membership.Join().ok());
  std::thread run([&] { membership.Run(); });
  const bool rejoined = coordinator_.AwaitAsks(2);
  membership.Stop();
  run.join();
  ASSERT_TRUE(rejoined);
  const RegisterAsk again = coordinator_.asks().at(1);
  EXPECT_TRUE(again.rejoin);
  EXPECT_EQ(again.resume_generation, 2);
  EXPECT_EQ(worker_.formed().size(), 1u);  // built once, resumed after
}

TEST_F(MembershipTest, AWorldMovedOnIsReJoinedAndBuilt) {
  coordinator_.AnswerRegister(
      {RegistrationOf(0, 2, 2), RegistrationOf(0, 3, 2)});
  coordinator_.AnswerHeartbeat({int64_t{3}});  // a replacement joined
  Membership membership(worker_, coordinator_, Options());
  ASSERT_TRUE(membership.Join().ok());
  std::thread run([&] { membership.Run(); });
  const bool rejoined = coordinator_.AwaitAsks(2);
  // Run builds generation 3 right after its registration answered.
  for (int i = 0; i < 200 && worker_.formed().size() < 2; ++i) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  membership.Stop();
  run.join();
  ASSERT_TRUE(rejoined);
  ASSERT_EQ(worker_.formed().size(), 2u);
  EXPECT_EQ(worker_.formed()[1].generation, 3);
  EXPECT_EQ(membership.registered_generation(), 3);
}

// ---- Drain and stop

TEST_F(MembershipTest, StopEndsARegistrationThatWaitsForTheCoordinator) {
  coordinator_.AnswerRegister({absl::UnavailableError("connection refused")});
  Membership membership(worker_, coordinator_, Options());
  absl::Status joined;
  std::thread join([&] { joined = membership.Join(); });
  ASSERT_TRUE(coordinator_.AwaitAsks(2));  // it is backing off and retrying
  membership.Stop();
  join.join();
  EXPECT_EQ(joined.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(joined.message(), "the worker is stopping");
  EXPECT_TRUE(worker_.formed().empty());
}

TEST_F(MembershipTest, LeaveDeregistersWithTheIssuedSecret) {
  coordinator_.AnswerRegister({RegistrationOf(3, 9, 4, "s9")});
  Membership membership(worker_, coordinator_, Options());
  ASSERT_TRUE(membership.Join().ok());
  membership.Stop();
  membership.Run();  // returns at once: stopped
  ASSERT_TRUE(membership.Leave().ok());
  EXPECT_EQ(coordinator_.left(), std::make_tuple(3, int64_t{9}, "s9"));
}

TEST_F(MembershipTest, ABreakIsSealedOncePerGenerationItBelongsTo) {
  Formed(0, 7, 2);
  Membership membership(worker_, coordinator_, Options());
  membership.Registered(RegistrationOf(0, 7, 2, "s7"), true);
  membership.NextBeat(true);  // its tensor counts go with the seal
  const auto seal =
      membership.SealBeat(7, absl::InternalError("NCCL error: remote closed"));
  ASSERT_TRUE(seal.has_value());
  EXPECT_EQ(seal->generation, 7);
  EXPECT_EQ(seal->seal_reason, "NCCL error: remote closed");
  EXPECT_EQ(seal->secret, "s7");
  EXPECT_EQ(seal->tensor_count, 3);
  EXPECT_EQ(seal->reform_reason, "");
  // Every op of a broken communicator reports the break: one seal.
  EXPECT_FALSE(membership.SealBeat(7, absl::InternalError("again")));
  // A generation this worker has left has nothing to seal.
  EXPECT_FALSE(membership.SealBeat(6, absl::InternalError("old")));
}

}  // namespace
}  // namespace ccl
