// The coordinator's membership logic, without gRPC: ranks, registration,
// heartbeats and loss, generations and re-forms, shutdown.
#include "common/world_keys.h"
#include "tests/unit/coordinator_core_fixture.h"

namespace ccl::coordinator::core_testing {
namespace {

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

// NCCL refuses a world in which two ranks of one host share a GPU; the
// coordinator refuses the second claim at registration, naming both
// workers, the GPU and the way out, and never lets the world form (and
// fail, and re-form) with it.
TEST_F(CoordinatorCoreTest, TwoRanksOfOneHostOnOneGpuAreRefusedClearly) {
  Make(3);
  auto on_gpu = [&](const std::string& worker_id, int rank,
                    const std::string& host_id) {
    RegisterRequest request = Request(worker_id, milliseconds(0));
    request.requested_rank = rank;
    request.device = Device{DeviceKind::kCuda, 0};
    request.host_id = host_id;
    request.boot_id = "boot-1";
    request.device_bus_id = "0000:3b:00.0";
    return Send(std::move(request));
  };
  auto first = on_gpu("a", 0, "");
  // No host id on either: hostname and boot id are the host, as to NCCL.
  auto same = on_gpu("b", 1, "")->Get();
  EXPECT_EQ(same.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(same.status().message(), HasSubstr("GPU 0000:3b:00.0 (cuda:0)"));
  EXPECT_THAT(same.status().message(), HasSubstr("host 'node'"));
  EXPECT_THAT(same.status().message(), HasSubstr("rank 0 (worker 'a'"));
  EXPECT_THAT(same.status().message(), HasSubstr("Duplicate GPU detected"));
  EXPECT_THAT(same.status().message(), HasSubstr("--host-id"));
  // Each a simulated host of its own: the same GPU is fine.
  auto first_sim = on_gpu("c", 1, "simhost1");
  auto second_sim = on_gpu("d", 2, "simhost2");
  ASSERT_TRUE(first->Get().ok());
  ASSERT_TRUE(first_sim->Get().ok());
  ASSERT_TRUE(second_sim->Get().ok());
  EXPECT_EQ(core_->GetWorld().state, WorldState::kComplete);
  EXPECT_EQ(core_->GetWorld().members[2].host_id, "simhost2");
  EXPECT_EQ(core_->GetWorld().members[2].device_bus_id, "0000:3b:00.0");
}

TEST_F(CoordinatorCoreTest, AGpuClaimOfALostMemberIsFreeForItsReplacement) {
  Make(2);
  auto on_gpu = [&](const std::string& worker_id, int rank,
                    const std::string& host_id, const std::string& bus_id) {
    RegisterRequest request = Request(worker_id, milliseconds(0));
    request.requested_rank = rank;
    request.device = Device{DeviceKind::kCuda, 0};
    request.host_id = host_id;
    request.device_bus_id = bus_id;
    return Send(std::move(request));
  };
  auto a = on_gpu("a", 0, "h0", "bus-0");
  auto b = on_gpu("b", 1, "h1", "bus-0");
  ASSERT_TRUE(a->Get().ok());
  ASSERT_TRUE(b->Get().ok());
  clock_.Advance(milliseconds(11000));
  ASSERT_TRUE(core_->Heartbeat(Beat(0, 1, "a")).ok());
  core_->SweepLiveness();
  ASSERT_EQ(core_->GetWorld().members[1].state, MemberState::kLost);
  // The lost rank's claim binds nobody: its replacement (same host, same
  // GPU) takes rank 1.
  auto replacement = on_gpu("b2", 1, "h1", "bus-0")->Get();
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->rank, 1);
}

// A registration into a full world waits for a rank to free; when none
// does within its timeout it is refused, naming whom it waited on.
TEST_F(CoordinatorCoreTest, FullWorldIsResourceExhausted) {
  Make(2);
  FormWorld(2);
  clock_.Advance(milliseconds(700));
  ASSERT_TRUE(Heartbeat(0, 1, "w0").ok());
  auto late = Register("late", std::nullopt, milliseconds(50));
  EXPECT_FALSE(late->ready());
  auto r = late->Get();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("world of size 2 is full, and no member was declared "
                        "gone while worker 'late' waited"));
  // The quietest member first: the likeliest to have died.
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("held by rank 1 (worker 'w1' at 10.0.0.1:5001) last "
                        "heard 700 ms ago, rank 0"));
}

// A replacement started at once after its predecessor was killed (a
// container restart) comes while the world is still full: it waits, and
// takes the rank as soon as the silent member is declared lost (issue 42).
TEST_F(CoordinatorCoreTest, AReplacementWaitsForTheRankOfALostMember) {
  Make(2);
  FormWorld(2);
  auto replacement = Register("w1-new");
  EXPECT_FALSE(replacement->ready());
  clock_.Advance(milliseconds(5000));
  ASSERT_TRUE(Heartbeat(0, 1, "w0").ok());
  core_->SweepLiveness();  // w1 silent 5 s of 10: not lost yet
  EXPECT_FALSE(replacement->ready());
  clock_.Advance(milliseconds(5500));
  ASSERT_TRUE(Heartbeat(0, 1, "w0").ok());
  core_->SweepLiveness();
  auto joined = replacement->Get();
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->rank, 1);
  EXPECT_EQ(joined->generation, 2);
}

// A registration that comes when a member is already silent past its
// timeout (no sweep has run) takes its rank at once.
TEST_F(CoordinatorCoreTest, ARegistrationDeclaresASilentMemberLost) {
  Make(2);
  FormWorld(2);
  clock_.Advance(milliseconds(10500));
  ASSERT_TRUE(Heartbeat(0, 1, "w0").ok());
  auto replacement = Register("w1-new")->Get();
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ(replacement->rank, 1);
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

// A heartbeat's progress (how far each group got on the worker) lands in the
// generation's KV store, where a failed op's arrival diagnosis on another
// rank reads it; a beat of a generation that is over publishes nothing.
TEST_F(CoordinatorCoreTest, HeartbeatProgressIsPublishedPerGroupAndGeneration) {
  Make(2);
  FormWorld(2);
  HeartbeatRequest beat = Beat(1, 1, "w1");
  beat.finished_below = {{"world", 12}, {"pair", 3}};
  ASSERT_TRUE(core_->Heartbeat(beat).ok());
  EXPECT_EQ(core_->KvGet(1, ProgressKey("world", 1))->second, "12");
  EXPECT_EQ(core_->KvGet(1, ProgressKey("pair", 1))->second, "3");
  EXPECT_FALSE(core_->KvGet(1, ProgressKey("world", 0)).ok());
  beat.finished_below = {{"world", 13}};
  ASSERT_TRUE(core_->Heartbeat(beat).ok());
  EXPECT_EQ(core_->KvGet(1, ProgressKey("world", 1))->second, "13");
  EXPECT_EQ(core_->KvGet(1, ProgressKey("pair", 1))->second, "3");

  // Generation 2: its store starts without progress, and the old
  // generation's beat (refused) adds none to it.
  beat.reform_reason = "broken";
  ASSERT_EQ(core_->Heartbeat(beat)->generation, 2);
  beat.reform_reason.clear();
  beat.finished_below = {{"world", 40}};
  EXPECT_FALSE(core_->Heartbeat(beat).ok());
  EXPECT_FALSE(core_->KvGet(2, ProgressKey("world", 1)).ok());
  for (const char* worker : {"w0", "w1"}) {
    auto again = Register(worker)->Get();
    ASSERT_TRUE(again.ok()) << again.status();
  }
  HeartbeatRequest fresh = Beat(1, 2, "w1");
  fresh.finished_below = {{"world", 12}};  // the same figure as in gen 1
  ASSERT_TRUE(core_->Heartbeat(fresh).ok());
  EXPECT_EQ(core_->KvGet(2, ProgressKey("world", 1))->second, "12");
}

// A rank whose communicator just broke seals its generation (issue 42): no
// new sequence numbers are handed out in it, refused as UNAVAILABLE naming
// the cause, and the world says it is re-forming and why, so a client waits
// for the next generation instead of queueing ops the broken rank can never
// run (a gap the others would wait out). The next generation is open again.
TEST_F(CoordinatorCoreTest, ABrokenCommunicatorSealsItsGeneration) {
  Make(2);
  FormWorld(2);
  ASSERT_TRUE(core_->ReserveSequence(1, "world", 1).ok());
  HeartbeatRequest seal = Beat(1, 1, "w1");
  seal.seal_reason = "recv from rank 0 timed out";
  ASSERT_TRUE(core_->Heartbeat(seal).ok());
  EXPECT_EQ(core_->GetWorld().generation, 1);
  EXPECT_EQ(core_->GetWorld().reforming_reason,
            "rank 1's communicator broke: recv from rank 0 timed out");
  for (const char* group : {"world", "pair"}) {
    auto refused = core_->ReserveSequence(1, group, 1);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("generation 1 is re-forming after rank 1's "
                          "communicator broke: recv from rank 0 timed out"));
  }
  // A later cause does not replace the first one: it is what the user did.
  clock_.Advance(milliseconds(10));
  HeartbeatRequest again = Beat(0, 1, "w0", 0, 0, "peer closed the connection");
  ASSERT_TRUE(core_->Heartbeat(again).ok());
  EXPECT_THAT(core_->GetWorld().reforming_reason, HasSubstr("rank 1's"));
  // Rank 1 heard from after rank 0's request: generation 2 begins, unsealed.
  clock_.Advance(milliseconds(10));
  auto last = core_->Heartbeat(Beat(1, 1, "w1", 0, 0, "recv timed out"));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->generation, 2);
  EXPECT_EQ(core_->GetWorld().reforming_reason, "");
  EXPECT_EQ(core_->GetWorld().began_after,
            "rank 1's communicator broke: recv from rank 0 timed out");
  for (const char* worker : {"w0", "w1"}) {
    auto joined = Register(worker)->Get();
    ASSERT_TRUE(joined.ok()) << joined.status();
  }
  auto open = core_->ReserveSequence(2, "world", 1);
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->first, 2);
  // The old generation takes no ops either (its workers have left it): a
  // client still there is told it is over, and why the next one began.
  auto over = core_->ReserveSequence(1, "world", 1);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(over.status().message()),
              HasSubstr("generation 1 is over; the world is in generation 2 "
                        "(it began after rank 1's communicator broke"));
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
// Seqs reserved under a lease live no longer than the client holding it
// (issue 42): a worker asking about one waits while the lease is held and
// is told the whole range at once when it ends; a seq no lease holds is
// answered at once, not released (the gap timeout stays the judge), and so
// is one still held when the question's own timeout passes.
TEST_F(CoordinatorCoreTest,
       ALeaseEndingReleasesItsSeqsToTheWorkersWaitingOnThem) {
  Make(2);
  FormWorld(2);
  ASSERT_TRUE(core_->OpenLease("client-a", "ipv4:10.0.0.9:4000").ok());
  EXPECT_EQ(core_->OpenLease("client-a", "elsewhere").code(),
            absl::StatusCode::kAlreadyExists);
  auto leased = core_->ReserveSequence(1, "world", 8, "client-a");
  ASSERT_TRUE(leased.ok()) << leased.status();
  EXPECT_TRUE(leased->leased);
  auto unleased = core_->ReserveSequence(1, "world", 1, "");
  ASSERT_TRUE(unleased.ok());
  EXPECT_FALSE(unleased->leased);
  EXPECT_FALSE(core_->ReserveSequence(1, "world", 1, "never-opened")->leased);

  Result<SequenceHolder> unknown;
  core_->AwaitSequenceHolder(core_->NewWaitId(), 1, "world", unleased->first,
                             milliseconds(5000), unknown.callback());
  ASSERT_TRUE(unknown.ready());
  EXPECT_FALSE(unknown.Get()->released);
  EXPECT_THAT(unknown.Get()->reason, HasSubstr("under a lease"));

  Result<SequenceHolder> timed_out;
  core_->AwaitSequenceHolder(core_->NewWaitId(), 1, "world", leased->first + 3,
                             milliseconds(20), timed_out.callback());
  ASSERT_TRUE(timed_out.Get().ok());
  EXPECT_FALSE(timed_out.Get()->released);
  EXPECT_THAT(timed_out.Get()->reason, HasSubstr("still connected"));

  Result<SequenceHolder> parked;
  core_->AwaitSequenceHolder(core_->NewWaitId(), 1, "world", leased->first + 5,
                             milliseconds(60000), parked.callback());
  EXPECT_FALSE(parked.ready());
  core_->CloseLease("client-a");
  auto released = parked.Get();
  ASSERT_TRUE(released.ok()) << released.status();
  EXPECT_TRUE(released->released);
  EXPECT_EQ(released->begin, leased->first);
  EXPECT_EQ(released->end, leased->first + 8);
  EXPECT_THAT(released->reason, HasSubstr("10.0.0.9:4000"));
  // Asked after the lease ended: answered at once.
  Result<SequenceHolder> late;
  core_->AwaitSequenceHolder(core_->NewWaitId(), 1, "world", leased->first,
                             milliseconds(60000), late.callback());
  ASSERT_TRUE(late.ready());
  EXPECT_TRUE(late.Get()->released);
  // An ended lease holds nothing new.
  EXPECT_FALSE(core_->ReserveSequence(1, "world", 1, "client-a")->leased);
}

}  // namespace ccl::coordinator::core_testing
