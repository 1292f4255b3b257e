// Tests of the coordinator's logic, without gRPC. Heartbeat expiry runs on
// an injected clock; wait deadlines use short real timeouts.
#include "coordinator/coordinator_core.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ccl::coordinator {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

constexpr auto kPatience = std::chrono::seconds(5);

// Captures the one callback of a parked call.
template <typename T>
class Result {
 public:
  CoordinatorCore::Callback<T> callback() {
    auto promise = promise_;
    return [promise](absl::StatusOr<T> r) { promise->set_value(std::move(r)); };
  }
  bool ready() const {
    return future_.wait_for(std::chrono::seconds(0)) ==
           std::future_status::ready;
  }
  absl::StatusOr<T> Get() const {
    if (future_.wait_for(kPatience) != std::future_status::ready) {
      return absl::InternalError("test: the callback never ran");
    }
    return future_.get();
  }

 private:
  std::shared_ptr<std::promise<absl::StatusOr<T>>> promise_ =
      std::make_shared<std::promise<absl::StatusOr<T>>>();
  std::shared_future<absl::StatusOr<T>> future_ =
      promise_->get_future().share();
};

class FakeClock {
 public:
  std::chrono::steady_clock::time_point Now() const {
    return base_ + milliseconds(offset_ms_.load());
  }
  void Advance(milliseconds d) { offset_ms_ += d.count(); }

 private:
  const std::chrono::steady_clock::time_point base_ =
      std::chrono::steady_clock::now();
  std::atomic<int64_t> offset_ms_{0};
};

class CoordinatorCoreTest : public ::testing::Test {
 protected:
  CoordinatorCore& Make(int world_size, bool elastic_shrink = false) {
    CoordinatorOptions options;
    options.world_size = world_size;
    options.elastic_shrink = elastic_shrink;
    options.heartbeat_interval = milliseconds(1000);
    options.heartbeat_timeout = milliseconds(10000);
    options.max_value_bytes = 64;
    options.sweep_period = milliseconds(0);
    options.clock = [this] { return clock_.Now(); };
    auto core = CoordinatorCore::Create(std::move(options));
    EXPECT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    return *core_;
  }

  std::unique_ptr<Result<RegisterResult>> Register(
      const std::string& worker_id, std::optional<int> rank = std::nullopt,
      milliseconds timeout = milliseconds(0)) {
    auto result = std::make_unique<Result<RegisterResult>>();
    RegisterRequest request;
    request.address = "10.0.0.1:" + std::to_string(5000 + addresses_++);
    request.host = "node";
    request.worker_id = worker_id;
    request.secret = Secret(worker_id);
    request.requested_rank = rank;
    request.timeout = timeout;
    core_->Register(core_->NewWaitId(), std::move(request), result->callback());
    return result;
  }

  // Registers `n` workers "w0".."w{n-1}" in order and returns their ranks.
  std::vector<int> FormWorld(int n) {
    std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
    for (int i = 0; i < n; ++i)
      pending.push_back(Register("w" + std::to_string(i)));
    std::vector<int> ranks;
    for (auto& p : pending) {
      auto r = p->Get();
      EXPECT_TRUE(r.ok()) << r.status();
      ranks.push_back(r.ok() ? r->rank : -1);
    }
    return ranks;
  }

  absl::Status Heartbeat(int rank, int64_t generation,
                         const std::string& worker_id) {
    return core_->Heartbeat(Beat(rank, generation, worker_id)).status();
  }

  // What each test worker proves itself with, as a ccworker brings its own.
  static std::string Secret(const std::string& worker_id) {
    return "secret-of-" + worker_id + "-0123456789abcdef0123456789abcdef";
  }
  HeartbeatRequest Beat(int rank, int64_t generation,
                        const std::string& worker_id, int64_t count = 0,
                        int64_t bytes = 0, std::string reason = "") {
    return HeartbeatRequest{rank,  generation,        worker_id,        count,
                            bytes, std::move(reason), Secret(worker_id)};
  }
  absl::StatusOr<int64_t> Leave(int rank, int64_t generation,
                                const std::string& worker_id) {
    return core_->Deregister(rank, generation, worker_id, Secret(worker_id));
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  int addresses_ = 0;
};

TEST_F(CoordinatorCoreTest, AssignsRanksInArrivalOrderOnceTheWorldIsComplete) {
  Make(3);
  auto a = Register("a");
  auto b = Register("b");
  EXPECT_FALSE(a->ready());
  EXPECT_FALSE(b->ready());
  WorldInfo forming = core_->GetWorld();
  EXPECT_EQ(forming.generation, 0);
  EXPECT_EQ(forming.state, WorldState::kForming);
  ASSERT_EQ(forming.members.size(), 2u);
  EXPECT_EQ(forming.members[1].state, MemberState::kJoining);

  auto c = Register("c");
  std::vector<int> ranks;
  for (auto* r : {a.get(), b.get(), c.get()}) {
    auto result = r->Get();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->generation, 1);
    ASSERT_NE(result->world, nullptr);
    EXPECT_EQ(result->world->members.size(), 3u);
    EXPECT_EQ(result->world->state, WorldState::kComplete);
    ranks.push_back(result->rank);
  }
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 2}));
  WorldInfo world = core_->GetWorld();
  EXPECT_EQ(world.state, WorldState::kComplete);
  EXPECT_EQ(world.members[2].worker_id, "c");
  EXPECT_EQ(world.members[2].state, MemberState::kReady);
  EXPECT_EQ(world.heartbeat_timeout_ms, 10000);
}

TEST_F(CoordinatorCoreTest, HonoursRequestedRanksAndFillsTheRest) {
  Make(3);
  auto a = Register("a", 2);
  auto b = Register("b");
  auto c = Register("c");
  EXPECT_EQ(a->Get()->rank, 2);
  EXPECT_EQ(b->Get()->rank, 0);
  EXPECT_EQ(c->Get()->rank, 1);
}

TEST_F(CoordinatorCoreTest, DuplicateRankIsAlreadyExistsNamingTheHolder) {
  Make(2);
  auto a = Register("a", 0);
  auto b = Register("b", 0);
  auto r = b->Get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(r.status().message(), HasSubstr("rank 0"));
  EXPECT_THAT(r.status().message(), HasSubstr("10.0.0.1:5000"));
  EXPECT_FALSE(a->ready());
}

TEST_F(CoordinatorCoreTest, FullWorldIsResourceExhausted) {
  Make(2);
  FormWorld(2);
  auto r = Register("late")->Get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("world of size 2 is full"));
}

TEST_F(CoordinatorCoreTest, SameWorkerIdGetsItsRankBack) {
  Make(2);
  auto first = Register("a");
  auto again = Register("a");  // A reconnect while the world forms.
  EXPECT_FALSE(again->ready());
  auto b = Register("b");
  EXPECT_EQ(first->Get()->rank, 0);
  EXPECT_EQ(again->Get()->rank, 0);
  EXPECT_EQ(b->Get()->rank, 1);
  // After formation a reconnect answers at once, in the same generation.
  auto later = Register("b")->Get();
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->rank, 1);
  EXPECT_EQ(later->generation, 1);
  // But it cannot claim a second rank.
  EXPECT_EQ(Register("b", 0)->Get().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorCoreTest, RejectsInvalidRegistrations) {
  Make(4);
  RegisterRequest no_address;
  no_address.worker_id = "x";
  Result<RegisterResult> r;
  core_->Register(core_->NewWaitId(), no_address, r.callback());
  EXPECT_EQ(r.Get().status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.Get().status().message(), HasSubstr("address"));

  auto negative = Register("x", -1)->Get();
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("negative"));

  auto too_big = Register("x", 4)->Get();
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_big.status().message(), HasSubstr("world size 4"));

  EXPECT_EQ(
      Register("x", std::nullopt, milliseconds(-5))->Get().status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(core_->GetWorld().members.empty());
}

TEST_F(CoordinatorCoreTest, RejectsInvalidOptions) {
  for (int size : {0, -3}) {
    CoordinatorOptions options;
    options.world_size = size;
    EXPECT_EQ(CoordinatorCore::Create(options).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  CoordinatorOptions options;
  options.world_size = 2;
  options.heartbeat_timeout = milliseconds(10);
  options.heartbeat_interval = milliseconds(100);
  EXPECT_EQ(CoordinatorCore::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorCoreTest, RegisterTimeoutWithdrawsTheRank) {
  Make(2);
  auto r = Register("slow", 1, milliseconds(30))->Get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("missing ranks"));
  EXPECT_TRUE(core_->GetWorld().members.empty());
  // The rank is free again: a retry by anyone can take it.
  auto retry = Register("other", 1);
  auto zero = Register("zero", 0);
  EXPECT_EQ(retry->Get()->rank, 1);
  EXPECT_EQ(zero->Get()->generation, 1);
}

TEST_F(CoordinatorCoreTest, CancelWithdrawsAPendingRegistration) {
  Make(2);
  Result<RegisterResult> r;
  RegisterRequest request;
  request.address = "h:1";
  request.worker_id = "gone";
  auto id = core_->NewWaitId();
  core_->Register(id, request, r.callback());
  core_->Cancel(id);
  EXPECT_EQ(r.Get().status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(core_->GetWorld().members.empty());
  core_->Cancel(id);  // Already finished: a no-op.
}

TEST_F(CoordinatorCoreTest, DeregisterWhileJoiningAbortsTheWait) {
  Make(2);
  auto a = Register("a");
  ASSERT_TRUE(Leave(0, 0, "a").ok());
  EXPECT_EQ(a->Get().status().code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(core_->GetWorld().members.empty());
}

TEST_F(CoordinatorCoreTest,
       GenerationAdvancesWhenAReplacementCompletesTheWorld) {
  Make(2);
  FormWorld(2);
  EXPECT_EQ(Leave(1, 1, "w0").status().code(), absl::StatusCode::kNotFound);
  auto left = Leave(1, 1, "w1");
  ASSERT_TRUE(left.ok()) << left.status();
  WorldInfo degraded = core_->GetWorld();
  EXPECT_EQ(degraded.state, WorldState::kDegraded);
  EXPECT_EQ(degraded.members[1].state, MemberState::kLeft);
  auto hb = core_->Heartbeat(Beat(0, 1, "w0", 0, 0));
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->world_state, WorldState::kDegraded);

  auto replacement = Register("w1-new")->Get();
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->rank, 1);
  EXPECT_EQ(replacement->generation, 2);

  absl::Status stale = Heartbeat(0, 1, "w0");
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.message(),
              HasSubstr("generation 1 is over; current is 2; re-register"));
  auto back = Register("w0")->Get();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 0);
  EXPECT_EQ(back->generation, 2);
  EXPECT_TRUE(Heartbeat(0, 2, "w0").ok());
  EXPECT_EQ(core_->GetWorld().state, WorldState::kComplete);
}

TEST_F(CoordinatorCoreTest, SilentMembersBecomeLost) {
  Make(2);
  FormWorld(2);
  clock_.Advance(milliseconds(6000));
  ASSERT_TRUE(core_->Heartbeat(Beat(0, 1, "w0", 3, 4096)).ok());
  clock_.Advance(milliseconds(6000));  // w1 silent for 12 s > 10 s.
  WorldInfo world = core_->GetWorld();
  EXPECT_EQ(world.state, WorldState::kDegraded);
  EXPECT_EQ(world.members[0].state, MemberState::kReady);
  EXPECT_EQ(world.members[0].last_seen_age_ms, 6000);
  EXPECT_EQ(world.members[0].tensor_count, 3);
  EXPECT_EQ(world.members[0].tensor_bytes, 4096);
  EXPECT_EQ(world.members[1].state, MemberState::kLost);
  EXPECT_EQ(Heartbeat(1, 1, "w1").code(),
            absl::StatusCode::kFailedPrecondition);

  // The lost worker itself may come back; the world re-forms.
  auto back = Register("w1")->Get();
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 1);
  EXPECT_EQ(back->generation, 2);
}

TEST_F(CoordinatorCoreTest, LostRankCanBeTakenByAReplacement) {
  Make(2);
  FormWorld(2);
  clock_.Advance(milliseconds(11000));
  core_->SweepLiveness();
  EXPECT_EQ(core_->GetWorld().members[0].state, MemberState::kLost);
  auto a = Register("n0");
  auto b = Register("n1");
  EXPECT_EQ(a->Get()->rank, 0);
  EXPECT_EQ(b->Get()->rank, 1);
  EXPECT_EQ(b->Get()->generation, 2);
}

TEST_F(CoordinatorCoreTest, ABrokenRankAsksForANewGenerationOfAWholeWorld) {
  Make(2);
  FormWorld(2);
  HeartbeatRequest broken =
      Beat(1, 1, "w1", 0, 0, "gloo all_reduce seq 3 timed out");
  auto reply = core_->Heartbeat(broken);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->generation, 2);
  // The other rank learns it from its next heartbeat and re-registers into
  // the new generation at once, keeping its rank.
  EXPECT_EQ(Heartbeat(0, 1, "w0").code(),
            absl::StatusCode::kFailedPrecondition);
  auto again = Register("w0")->Get();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rank, 0);
  EXPECT_EQ(again->generation, 2);
  // A second request for the same (now old) generation bumps nothing.
  EXPECT_EQ(core_->Heartbeat(broken).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_->GetWorld().generation, 2);
}

// A rank whose communicator broke asks for a new generation; it starts once
// every rank has been heard from since, so that a rank that died (and broke
// the others' communicators) is not counted into it.
TEST_F(CoordinatorCoreTest, AReFormWaitsUntilEveryRankIsHeardFrom) {
  Make(3);
  FormWorld(3);
  clock_.Advance(milliseconds(300));
  auto asked = core_->Heartbeat(Beat(1, 1, "w1", 0, 0, "peer reset"));
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ(asked->generation, 1);
  EXPECT_EQ(core_->Heartbeat(Beat(2, 1, "w2", 0, 0, "peer reset"))->generation,
            1);
  // The last rank's ordinary heartbeat completes the roll call: the reply
  // already names the new generation.
  auto last = core_->Heartbeat(Beat(0, 1, "w0", 0, 0, ""));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->generation, 2);
  EXPECT_EQ(core_->GetWorld().generation, 2);
}

// The notes saw two generations per kill: the survivors' request started
// one at once, whose rendezvous failed when the dead rank was declared lost,
// and the replacement then needed another. Now it is one.
TEST_F(CoordinatorCoreTest, AKilledRankCostsOneGenerationNotTwo) {
  Make(3);
  FormWorld(3);
  clock_.Advance(milliseconds(300));
  // Rank 2 is killed mid-op; the survivors' communicators break at once.
  EXPECT_EQ(core_->Heartbeat(Beat(0, 1, "w0", 0, 0, "peer reset"))->generation,
            1);
  EXPECT_EQ(core_->Heartbeat(Beat(1, 1, "w1", 0, 0, "peer reset"))->generation,
            1);
  // Rank 2 stays silent past the timeout and is lost.
  clock_.Advance(milliseconds(10500));
  EXPECT_EQ(core_->Heartbeat(Beat(0, 1, "w0", 0, 0, "peer reset"))->generation,
            1);
  EXPECT_EQ(core_->Heartbeat(Beat(1, 1, "w1", 0, 0, "peer reset"))->generation,
            1);
  core_->SweepLiveness();
  EXPECT_EQ(core_->GetWorld().state, WorldState::kDegraded);
  EXPECT_EQ(core_->GetWorld().generation, 1);
  // A replacement takes the rank: one new generation for the whole kill.
  auto replacement = Register("w2-new", 2)->Get();
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->generation, 2);
  EXPECT_EQ(core_->GetWorld().state, WorldState::kComplete);
  // The survivors' stale requests for generation 1 change nothing.
  EXPECT_EQ(
      core_->Heartbeat(Beat(0, 1, "w0", 0, 0, "peer reset")).status().code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(core_->GetWorld().generation, 2);
}

TEST_F(CoordinatorCoreTest, ADegradedWorldWaitsForTheMissingRankToReForm) {
  Make(2);
  FormWorld(2);
  clock_.Advance(milliseconds(11000));
  ASSERT_TRUE(Heartbeat(0, 1, "w0").ok());
  core_->SweepLiveness();  // w1 is lost
  auto reply = core_->Heartbeat(Beat(0, 1, "w0", 0, 0, "peer vanished"));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->generation, 1);
  EXPECT_EQ(reply->world_state, WorldState::kDegraded);
}

TEST_F(CoordinatorCoreTest,
       ARestartedCoordinatorAdoptsTheGenerationEveryRankResumes) {
  Make(2);
  std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
  for (int i = 0; i < 2; ++i) {
    RegisterRequest request;
    request.address = "10.0.0.1:600" + std::to_string(i);
    request.worker_id = "w" + std::to_string(i);
    request.requested_rank = i;
    request.resume_generation = 7;
    request.resume_next_seq = {{"world", 40 + i}, {"pair", 3}};
    auto result = std::make_unique<Result<RegisterResult>>();
    core_->Register(core_->NewWaitId(), std::move(request), result->callback());
    pending.push_back(std::move(result));
  }
  for (auto& p : pending) {
    auto r = p->Get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->generation, 7);
  }
  // Sequence numbers continue after the highest any rank ran.
  auto world_seq = core_->ReserveSequence(7, "world", 1);
  ASSERT_TRUE(world_seq.ok()) << world_seq.status();
  EXPECT_EQ(world_seq->second, 41);
  EXPECT_EQ(core_->ReserveSequence(0, "pair", 2)->second, 3);
  EXPECT_EQ(core_->GetWorld().state, WorldState::kComplete);
}

TEST_F(CoordinatorCoreTest, RanksResumingDifferentGenerationsGetANewerOne) {
  Make(2);
  std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
  for (int i = 0; i < 2; ++i) {
    RegisterRequest request;
    request.address = "10.0.0.1:600" + std::to_string(i);
    request.worker_id = "w" + std::to_string(i);
    request.resume_generation = i == 0 ? 4 : 0;  // rank 1 is a new process
    auto result = std::make_unique<Result<RegisterResult>>();
    core_->Register(core_->NewWaitId(), std::move(request), result->callback());
    pending.push_back(std::move(result));
  }
  for (auto& p : pending) EXPECT_EQ(p->Get()->generation, 5);
  RegisterRequest bad;
  bad.address = "10.0.0.1:1";
  bad.resume_generation = -1;
  Result<RegisterResult> rejected;
  core_->Register(core_->NewWaitId(), bad, rejected.callback());
  EXPECT_EQ(rejected.Get().status().code(), absl::StatusCode::kInvalidArgument);
}

// Chaos seed 1894393862: the coordinator died while the world re-formed
// into generation 13; no worker had a communicator left to resume, so the
// restarted coordinator began again at generation 1, and requests stamped 13
// then took seqs of the new numbering. The generations the workers knew of
// count too: the new world is above all of them.
TEST_F(CoordinatorCoreTest,
       ARestartedCoordinatorAdoptingNothingStartsAboveEveryKnownGeneration) {
  Make(2);
  std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
  for (int i = 0; i < 2; ++i) {
    RegisterRequest request;
    request.address = "10.0.0.1:600" + std::to_string(i);
    request.worker_id = "w" + std::to_string(i);
    request.requested_rank = i;
    request.rejoin = true;
    request.known_generation = i == 0 ? 13 : 12;  // nothing to resume
    auto result = std::make_unique<Result<RegisterResult>>();
    core_->Register(core_->NewWaitId(), std::move(request), result->callback());
    pending.push_back(std::move(result));
  }
  for (auto& p : pending) {
    auto r = p->Get();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->generation, 14);
  }
  EXPECT_FALSE(core_->ReserveSequence(13, "world", 1).ok());
  RegisterRequest bad;
  bad.address = "10.0.0.1:1";
  bad.known_generation = -1;
  Result<RegisterResult> rejected;
  core_->Register(core_->NewWaitId(), bad, rejected.callback());
  EXPECT_EQ(rejected.Get().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorCoreTest, ElasticShrinkGoesOnWithoutALostRank) {
  Make(3, /*elastic_shrink=*/true);
  FormWorld(3);
  clock_.Advance(milliseconds(6000));
  ASSERT_TRUE(Heartbeat(0, 1, "w0").ok());
  ASSERT_TRUE(Heartbeat(2, 1, "w2").ok());
  clock_.Advance(milliseconds(6000));  // w1 silent for 12 s
  core_->SweepLiveness();
  WorldInfo world = core_->GetWorld();
  EXPECT_EQ(world.generation, 2);
  EXPECT_EQ(world.world_size, 2);
  ASSERT_EQ(world.members.size(), 2u);
  EXPECT_EQ(world.members[1].worker_id, "w2");
  // w2's old rank is gone; it re-joins naming it and gets its new rank.
  EXPECT_EQ(Heartbeat(2, 1, "w2").code(), absl::StatusCode::kNotFound);
  RegisterRequest again;
  again.address = "10.0.0.1:7000";
  again.worker_id = "w2";
  again.secret = Secret("w2");
  again.requested_rank = 2;
  again.rejoin = true;
  Result<RegisterResult> rejoined;
  core_->Register(core_->NewWaitId(), again, rejoined.callback());
  auto r = rejoined.Get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->generation, 2);
  EXPECT_EQ(r->world->world_size, 2);
  // Without the rejoin flag the same request is a conflict, as before.
  again.rejoin = false;
  Result<RegisterResult> conflict;
  core_->Register(core_->NewWaitId(), again, conflict.callback());
  EXPECT_EQ(conflict.Get().status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A rank that leaves shrinks the world too.
  ASSERT_TRUE(Leave(0, 2, "w0").ok());
  world = core_->GetWorld();
  EXPECT_EQ(world.generation, 3);
  EXPECT_EQ(world.world_size, 1);
  EXPECT_EQ(world.state, WorldState::kComplete);
}

TEST_F(CoordinatorCoreTest, HeartbeatFromStrangersIsNotFound) {
  Make(2);
  FormWorld(2);
  EXPECT_EQ(Heartbeat(0, 1, "intruder").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Heartbeat(7, 1, "w0").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Heartbeat(-1, 1, "w0").code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorCoreTest, KvSetGetWaitAndTimeout) {
  Make(1);
  Result<KvWaitResult> early;
  core_->KvWait(core_->NewWaitId(), 0, {"a", "b"}, milliseconds(0), false,
                early.callback());
  ASSERT_TRUE(core_->KvSet(0, "a", "1").ok());
  EXPECT_FALSE(early.ready());
  EXPECT_EQ(core_->KvGet(0, "b").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(core_->KvSet(0, "b", "2").ok());
  EXPECT_TRUE(early.Get().ok());
  EXPECT_EQ(core_->KvGet(0, "a")->second, "1");

  Result<KvWaitResult> present;
  core_->KvWait(core_->NewWaitId(), 0, {"a"}, milliseconds(0), false,
                present.callback());
  EXPECT_TRUE(present.ready());

  Result<KvWaitResult> late;
  core_->KvWait(core_->NewWaitId(), 0, {"a", "zz", "yy"}, milliseconds(30),
                false, late.callback());
  auto r = late.Get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(r.status().message(), HasSubstr("missing keys: yy, zz"));
}

// A key present when a wait began and deleted before the wait's last key
// arrived is waited for again (reading it crashed the coordinator: found by
// coordinator_request_fuzzer).
TEST_F(CoordinatorCoreTest, AWaitForAKeyDeletedMeanwhileWaitsForItAgain) {
  Make(1);
  ASSERT_TRUE(core_->KvSet(0, "b", "2").ok());
  Result<KvWaitResult> wait;
  core_->KvWait(core_->NewWaitId(), 0, {"a", "b"}, milliseconds(0), true,
                wait.callback());
  ASSERT_TRUE(core_->KvDelete(0, "b").ok());
  ASSERT_TRUE(core_->KvSet(0, "a", "1").ok());
  EXPECT_FALSE(wait.ready());
  ASSERT_TRUE(core_->KvSet(0, "b", "3").ok());
  auto got = wait.Get();
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->values.size(), 2u);
  EXPECT_EQ(*got->values[0], "1");
  EXPECT_EQ(*got->values[1], "3");
}

TEST_F(CoordinatorCoreTest, KvRejectsBadInput) {
  Make(1);
  EXPECT_EQ(core_->KvSet(0, "", "v").status().code(),
            absl::StatusCode::kInvalidArgument);
  auto big = core_->KvSet(0, "k", std::string(65, 'x'));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.status().message(), HasSubstr("64 bytes"));
  EXPECT_EQ(core_->KvSet(3, "k", "v").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->KvGet(0, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->KvAdd(0, "", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->KvDelete(0, "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->KvCompareSet(0, "", "", "v").status().code(),
            absl::StatusCode::kInvalidArgument);
  Result<KvWaitResult> wait;
  core_->KvWait(core_->NewWaitId(), 0, {"a", ""}, milliseconds(0), false,
                wait.callback());
  EXPECT_EQ(wait.Get().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorCoreTest, KvAddCountsAndWakesWaiters) {
  Make(1);
  Result<KvWaitResult> wait;
  core_->KvWait(core_->NewWaitId(), 0, {"n"}, milliseconds(0), false,
                wait.callback());
  EXPECT_EQ(core_->KvAdd(0, "n", 5)->second, 5);
  EXPECT_TRUE(wait.Get().ok());
  EXPECT_EQ(core_->KvAdd(0, "n", -7)->second, -2);
  EXPECT_EQ(core_->KvGet(0, "n")->second, "-2");
  ASSERT_TRUE(core_->KvSet(0, "s", "hello").ok());
  EXPECT_EQ(core_->KvAdd(0, "s", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CoordinatorCoreTest, KvCompareSetAndDelete) {
  Make(1);
  auto first = core_->KvCompareSet(0, "k", "", "v1");
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->swapped);
  auto again = core_->KvCompareSet(0, "k", "", "v2");
  EXPECT_FALSE(again->swapped);
  EXPECT_EQ(again->value, "v1");
  auto swap = core_->KvCompareSet(0, "k", "v1", "v2");
  EXPECT_TRUE(swap->swapped);
  EXPECT_EQ(swap->value, "v2");
  auto wrong = core_->KvCompareSet(0, "k", "v1", "v3");
  EXPECT_FALSE(wrong->swapped);
  EXPECT_EQ(wrong->value, "v2");
  auto absent = core_->KvCompareSet(0, "none", "x", "y");
  EXPECT_FALSE(absent->swapped);
  EXPECT_EQ(absent->value, "");

  EXPECT_TRUE(core_->KvDelete(0, "k")->second);
  EXPECT_FALSE(core_->KvDelete(0, "k")->second);
  EXPECT_EQ(core_->KvGet(0, "k").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorCoreTest, KvIsScopedByGeneration) {
  Make(2);
  ASSERT_TRUE(core_->KvSet(0, "pre", "0").ok());  // Generation 0.
  FormWorld(2);
  EXPECT_EQ(core_->KvGet(0, "pre").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*core_->KvSet(0, "k", "gen1"), 1);
  ASSERT_TRUE(Leave(1, 1, "w1").ok());
  ASSERT_TRUE(Register("w1-new")->Get().ok());  // Generation 2.
  EXPECT_EQ(core_->KvGet(0, "k").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(core_->KvGet(1, "k")->second, "gen1");
  ASSERT_TRUE(core_->KvSet(2, "k", "gen2").ok());
  EXPECT_EQ(core_->KvGet(0, "k")->second, "gen2");
  auto future = core_->KvGet(3, "k");
  EXPECT_EQ(future.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(future.status().message(), HasSubstr("unknown generation 3"));
}

TEST_F(CoordinatorCoreTest, SequenceRangesAreDisjointAndContiguous) {
  Make(1);
  FormWorld(1);
  constexpr int kThreads = 8;
  constexpr int kPerThread = 1000;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        int64_t count = 1 + (i + t) % 3;
        auto r = core_->ReserveSequence(0, "", count);
        if (r.ok()) got[t].emplace_back(r->second, count);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::pair<int64_t, int64_t>> all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  ASSERT_EQ(all.size(), size_t{kThreads * kPerThread});
  std::sort(all.begin(), all.end());
  int64_t next = 0;
  for (auto [first, count] : all) {
    ASSERT_EQ(first, next);
    next += count;
  }
  // "" is the world group; other groups and generations count on their own.
  EXPECT_EQ(core_->ReserveSequence(0, "world", 1)->second, next);
  EXPECT_EQ(core_->ReserveSequence(0, "tp0", 4)->second, 0);
  EXPECT_EQ(core_->ReserveSequence(0, "tp0", 1)->second, 4);
}

// A coordinator that has formed no world yet (one that just restarted,
// before its workers re-registered) has no generation to count in: seqs it
// handed out would be numbered apart from those of the generation it then
// adopts, and two ops could get one seq.
TEST_F(CoordinatorCoreTest, NoSequencesBeforeAWorldHasFormed) {
  Make(2);
  auto early = core_->ReserveSequence(0, "world", 1);
  EXPECT_EQ(early.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(early.status().message()),
              HasSubstr("no world has formed yet"));
  FormWorld(2);
  auto r = core_->ReserveSequence(0, "world", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 1);
  EXPECT_EQ(r->second, 0);
}

TEST_F(CoordinatorCoreTest, SequenceRejectsBadCounts) {
  Make(1);
  FormWorld(1);
  // At most a worker's kMaxSeqsAhead (2^16) at once: a longer range could
  // not be queued, only skipped.
  for (int64_t count : {int64_t{0}, int64_t{-1}, int64_t{65537}}) {
    EXPECT_EQ(core_->ReserveSequence(0, "g", count).status().code(),
              absl::StatusCode::kInvalidArgument)
        << count;
  }
  EXPECT_TRUE(core_->ReserveSequence(0, "g", 65536).ok());
}

TEST_F(CoordinatorCoreTest, UniqueIdIsPostedOnceAndHandedToWaiters) {
  Make(1);
  Result<UniqueIdResult> before;
  core_->GetUniqueId(core_->NewWaitId(), 0, "world", milliseconds(0),
                     before.callback());
  EXPECT_FALSE(before.ready());
  ASSERT_TRUE(core_->PostUniqueId(0, "", "id-1").ok());  // "" is "world".
  ASSERT_TRUE(before.Get().ok());
  EXPECT_EQ(before.Get()->unique_id, "id-1");

  Result<UniqueIdResult> after;
  core_->GetUniqueId(core_->NewWaitId(), 0, "", milliseconds(0),
                     after.callback());
  EXPECT_EQ(after.Get()->unique_id, "id-1");

  EXPECT_TRUE(core_->PostUniqueId(0, "world", "id-1").ok());  // Retry.
  EXPECT_EQ(core_->PostUniqueId(0, "world", "id-2").status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(core_->PostUniqueId(0, "g", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(core_->PostUniqueId(0, "g", std::string(4097, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(core_->PostUniqueId(0, "g", std::string(4096, 'x')).ok());

  Result<UniqueIdResult> never;
  core_->GetUniqueId(core_->NewWaitId(), 0, "other", milliseconds(30),
                     never.callback());
  EXPECT_EQ(never.Get().status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(CoordinatorCoreTest, ShutdownFailsParkedCallsAndRefusesNewOnes) {
  Make(2);
  auto reg = Register("a");
  Result<KvWaitResult> wait;
  core_->KvWait(core_->NewWaitId(), 0, {"k"}, milliseconds(0), false,
                wait.callback());
  Result<UniqueIdResult> uid;
  core_->GetUniqueId(core_->NewWaitId(), 0, "", milliseconds(0),
                     uid.callback());
  core_->Shutdown();
  EXPECT_EQ(reg->Get().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(wait.Get().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(uid.Get().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Register("b")->Get().status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(CoordinatorCoreTest, ConcurrentRegistrationsGetDistinctRanks) {
  constexpr int kWorld = 64;
  Make(kWorld);
  std::vector<std::unique_ptr<Result<RegisterResult>>> results(kWorld);
  for (int i = 0; i < kWorld; ++i) {
    results[i] = std::make_unique<Result<RegisterResult>>();
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = t; i < kWorld; i += 8) {
        RegisterRequest request;
        request.address = "h:" + std::to_string(i);
        request.worker_id = "w" + std::to_string(i);
        core_->Register(core_->NewWaitId(), request, results[i]->callback());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<int> ranks;
  for (auto& r : results) {
    auto got = r->Get();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->generation, 1);
    ranks.push_back(got->rank);
  }
  std::sort(ranks.begin(), ranks.end());
  for (int i = 0; i < kWorld; ++i) EXPECT_EQ(ranks[i], i);
}

}  // namespace
}  // namespace ccl::coordinator
