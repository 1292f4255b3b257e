// Requests refused for what they say (issue 15): sequenced requests that
// disagree, name a generation that is not coming, are malformed, wait behind
// a seq nobody sends, or run past their call's deadline. Every rank answers
// with the reason, in bounded time; nothing moves, nobody dies, and the world
// goes on at the same generation. The same cases run on NCCL in
// failure_nccl_test.
#include <grpcpp/generic/generic_stub.h>

#include <future>
#include <map>
#include <thread>

#include "tests/integration/failure_fixture.h"

namespace ccl::failure_testing {
namespace {

// Each case starts with "y" = rank + 1 (64 elements) on every rank, a client
// and the world's generation, which every case ends at again.
class RefusalTest : public FailureTest {
 protected:
  void SetUp() override {
    FailureTest::SetUp();
    if (HasFatalFailure()) return;
    client_ = Client(seconds(20));
    ASSERT_NE(client_, nullptr);
    generation_ = client_->world().generation;
    everyone_ = client_->AllRanks();
    AllocEverywhere(*client_, "y", 64, FillKind::kRankPlusOne);
  }

  // Tells every rank that seqs [begin, end) carry no op (as the gap timeout
  // would, later), then passes a barrier: every executor got past them.
  void GiveUpSeqsThenBarrier(testing::ClientWire& wire, int64_t begin,
                             int64_t end) {
    for (const auto& r : wire.Release(everyone_, begin, end)) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
    client::Op barrier;
    barrier.kind = OpKind::kBarrier;
    for (const auto& r : client_->Collective(barrier)) {
      EXPECT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
  }

  std::unique_ptr<ClusterClient> client_;
  int64_t generation_ = 0;
  std::vector<int> everyone_;
};

// Two clients disagreeing on what seq 7 is (rank 0 all_reduce, the others
// broadcast): every rank refuses with the difference named; nothing hangs,
// nothing breaks, and the next collective needs no new generation.
TEST_F(RefusalTest, DifferentCollectivesAtTheSameSeqFailEverywhere) {
  auto seq = testing::ClientWire(*client_).ReserveSeq(1);
  ASSERT_TRUE(seq.ok()) << seq.status();
  const auto results = Submit(*client_, client_->AllRanks(), [&](int rank) {
    v1::OpRequest op = WireAllReduce("y", false);
    if (rank != 0) {
      op.set_kind(v1::OP_KIND_BROADCAST);
      op.set_root(0);
    }
    op.set_seq(*seq);
    op.set_generation(generation_);
    return op;
  });
  for (const auto& r : results) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kInvalidArgument)
        << "rank " << r.rank << ": " << r.result.status();
    EXPECT_THAT(r.result.status().message(), HasSubstr("all_reduce"));
    EXPECT_THAT(r.result.status().message(), HasSubstr("broadcast"));
  }
  // Nothing moved: "y" still holds rank + 1, and a run without the check
  // (what a benchmark loop may ask for) reduces it correctly.
  client::Op unchecked = AllReduce("y");
  unchecked.skip_agreement = true;
  for (const auto& r : client_->Collective(unchecked)) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  ExpectFirstElements(
      *client_, "y", [](int) { return kWorkers * (kWorkers + 1) / 2.0; },
      "the unchecked all_reduce");
  ExpectTheWorldGoesOnAt(generation_);
}

// Requests refused for what they say still take their seq on every rank
// (issue 15, item 3): a generation that is not coming, an unknown op kind,
// a negative generation and a premul_sum without a scale each fail at once
// with their reason, and the next op runs at once instead of waiting out the
// 30 s gap the refused seq would otherwise leave. A seq far past the group's
// next is refused and not queued, so the group never skips ahead to it.
TEST_F(RefusalTest, RefusedRequestsTakeTheirSeqOnEveryRank) {
  testing::ClientWire wire(*client_);
  struct Refused {
    std::function<void(v1::OpRequest&)> spoil;
    absl::StatusCode code;
    std::string says;
  };
  const std::vector<Refused> cases = {
      {[](v1::OpRequest& op) { op.set_generation(999); },
       absl::StatusCode::kFailedPrecondition, "generation 999 is not coming"},
      {[](v1::OpRequest& op) { op.set_generation(-1); },
       absl::StatusCode::kInvalidArgument, "generation is negative"},
      {[](v1::OpRequest& op) { op.set_kind(static_cast<v1::OpKind>(99)); },
       absl::StatusCode::kInvalidArgument, "unknown op kind 99"},
      {[](v1::OpRequest& op) {
         op.set_reduce_op(v1::REDUCE_OP_PREMUL_SUM);
         op.set_premul_scale(0);
       },
       absl::StatusCode::kInvalidArgument, "premul_scale"},
  };
  client::Op barrier;
  barrier.kind = OpKind::kBarrier;
  for (const Refused& refused : cases) {
    auto seq = wire.ReserveSeq(1);
    ASSERT_TRUE(seq.ok()) << seq.status();
    for (const auto& r : Submit(*client_, everyone_, [&](int) {
           v1::OpRequest op = WireAllReduce("y", false);
           op.set_seq(*seq);
           op.set_generation(generation_);
           refused.spoil(op);
           return op;
         })) {
      EXPECT_EQ(r.result.status().code(), refused.code)
          << "rank " << r.rank << ": " << r.result.status();
      EXPECT_THAT(r.result.status().message(), HasSubstr(refused.says));
    }
    const auto start = Clock::now();
    for (const auto& r : client_->Collective(barrier)) {
      EXPECT_TRUE(r.result.ok())
          << refused.says << ": rank " << r.rank << ": " << r.result.status();
    }
    EXPECT_LT(Clock::now() - start, seconds(10))
        << "the refused seq was not taken: " << refused.says;
  }

  auto next = wire.ReserveSeq(1);
  ASSERT_TRUE(next.ok()) << next.status();
  for (const auto& r : Submit(*client_, everyone_, [&](int) {
         v1::OpRequest far;
         far.set_kind(v1::OP_KIND_NOP);
         far.set_seq(*next + 1000000);
         far.set_generation(generation_);
         return far;
       })) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kOutOfRange)
        << "rank " << r.rank << ": " << r.result.status();
    EXPECT_THAT(r.result.status().message(),
                HasSubstr("past the group's next"));
  }
  // The seq reserved above, unused, is released so the group does not wait.
  for (const auto& r : wire.Release(everyone_, *next, *next + 1)) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  for (int r = 0; r < kWorkers; ++r) {
    EXPECT_TRUE(cluster_->worker(r).running()) << "rank " << r << " died";
  }
  ExpectFirstElements(
      *client_, "y", [](int rank) { return rank + 1; },
      "refused ops moved data");
  ExpectTheWorldGoesOnAt(generation_);
}

// An op queued behind a seq its client never sent (a dead client's): the
// call hears, before its deadline, which seq it waited behind, and the op is
// withdrawn on every rank, so when the gap closes nothing runs that no
// caller waits for, and the group goes on at once. Its tensor is free for
// the caller from the answer on.
TEST_F(RefusalTest, AnOpStuckBehindAMissingSeqIsAnsweredAndWithdrawn) {
  testing::ClientWire wire(*client_);
  auto seq = wire.ReserveSeq(2);
  ASSERT_TRUE(seq.ok()) << seq.status();
  const auto start = Clock::now();
  for (const auto& r : wire.Submit(
           everyone_,
           [&](int) {
             v1::OpRequest op = WireAllReduce("y", false);
             op.set_seq(*seq + 1);
             op.set_generation(generation_);
             return op;
           },
           seconds(3))) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r.rank << ": " << r.result.status();
    EXPECT_THAT(r.result.status().message(),
                HasSubstr(absl::StrCat("waits behind seq ", *seq)))
        << "rank " << r.rank;
    EXPECT_THAT(r.result.status().message(), HasSubstr("withdrawn"));
  }
  EXPECT_LT(Clock::now() - start, seconds(5));
  // Withdrawn, the op holds "y" no more, though it still waits in its
  // queue: its caller can free the tensor and make it again at once.
  for (const auto& r : client_->Free(everyone_, "y")) {
    EXPECT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  AllocEverywhere(*client_, "y", 64, FillKind::kRankPlusOne);
  // The missing seq is given up (as the gap timeout would, later): the
  // withdrawn op behind it fails everywhere without moving data.
  const auto next = Clock::now();
  GiveUpSeqsThenBarrier(wire, *seq, *seq + 1);
  if (HasFatalFailure()) return;
  EXPECT_LT(Clock::now() - next, seconds(5));
  ExpectFirstElements(
      *client_, "y", [](int rank) { return rank + 1; }, "the withdrawn op ran");
  ExpectTheWorldGoesOnAt(generation_);
}

// A bench queued behind a missing seq is withdrawn at its call's deadline
// as an op is, and lets go of its tensors with the answer: `ccctl bench`
// frees its temporaries right after, and a bench that still held them left
// them behind until the gap closed.
TEST_F(RefusalTest, ABenchStuckBehindAMissingSeqLetsGoOfItsTensors) {
  testing::ClientWire wire(*client_);
  AllocEverywhere(*client_, "b", 1 << 10, FillKind::kOnes);
  if (HasFatalFailure()) return;
  auto seq = wire.ReserveSeq(2);
  ASSERT_TRUE(seq.ok()) << seq.status();
  for (const auto& r : wire.Bench(
           everyone_,
           [&](int) {
             v1::BenchRequest bench;
             *bench.mutable_op() = WireAllReduce("b", false);
             bench.mutable_op()->set_seq(*seq + 1);
             bench.mutable_op()->set_generation(generation_);
             bench.set_iters(100);
             return bench;
           },
           seconds(3))) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r.rank << ": " << r.result.status();
    EXPECT_THAT(r.result.status().message(), HasSubstr("withdrawn"));
  }
  for (const auto& r : client_->Free(everyone_, "b")) {
    EXPECT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  // When the gap closes, the withdrawn bench stops at its first checkpoint
  // on every rank and the group goes on.
  for (const auto& r : wire.Release(everyone_, *seq, *seq + 1)) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  ExpectCorrectAllReduce("check");
  ExpectTheWorldGoesOnAt(generation_);
}

// A client that cancels its call (or dies) while its op still waits behind
// a seq nobody sends: every rank withdraws the op then and lets go of its
// tensors, so the tensor can be freed at once, not after the gap timeout
// (30 s) that lets the op's turn come. Before, the op held "y" until then.
TEST_F(RefusalTest, AnOpWhoseCallIsCancelledLetsGoOfItsTensorsAtOnce) {
  testing::ClientWire wire(*client_);
  auto seq = wire.ReserveSeq(2);
  ASSERT_TRUE(seq.ok()) << seq.status();
  struct Pending {
    std::unique_ptr<grpc::ClientContext> context;
    v1::OpRequest request;
    v1::OpResponse response;
    std::promise<grpc::Status> done;
  };
  std::vector<std::unique_ptr<Pending>> calls;
  for (int rank : everyone_) {
    auto stub = wire.Worker(rank);
    ASSERT_TRUE(stub.ok()) << stub.status();
    auto call = std::make_unique<Pending>();
    call->context = wire.Context();
    call->request = WireAllReduce("y", false);
    call->request.set_seq(*seq + 1);
    call->request.set_generation(generation_);
    (*stub)->async()->Submit(
        call->context.get(), &call->request, &call->response,
        [p = call.get()](grpc::Status s) { p->done.set_value(s); });
    calls.push_back(std::move(call));
  }
  // Cancelled only once every rank has the op in its queue.
  const auto queued_by = Clock::now() + seconds(10);
  for (int rank : everyone_) {
    auto stub = wire.Worker(rank);
    ASSERT_TRUE(stub.ok()) << stub.status();
    bool queued = false;
    while (!queued && Clock::now() < queued_by) {
      v1::GetOpLogRequest request;
      v1::OpLog log;
      grpc::ClientContext context;
      ASSERT_TRUE((*stub)->GetOpLog(&context, request, &log).ok());
      for (const v1::OpRecord& record : log.records()) {
        queued = queued || (record.seq() == *seq + 1 &&
                            record.state() == v1::WORK_STATE_QUEUED);
      }
      if (!queued) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(queued) << "rank " << rank << " never queued the op";
  }
  for (auto& call : calls) call->context->TryCancel();
  for (auto& call : calls) {
    EXPECT_EQ(call->done.get_future().get().error_code(),
              grpc::StatusCode::CANCELLED);
  }
  // The cancel reaches each worker a moment after the client's; until it
  // has, freeing "y" is refused (in use) and changes nothing.
  const auto start = Clock::now();
  for (int rank : everyone_) {
    absl::Status freed;
    do {
      freed = client_->Free(rank, "y").status();
      if (freed.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } while (Clock::now() - start < seconds(10));
    EXPECT_TRUE(freed.ok()) << "rank " << rank << ": " << freed;
  }
  EXPECT_LT(Clock::now() - start, seconds(10));
  AllocEverywhere(*client_, "y", 64, FillKind::kRankPlusOne);
  // The missing seq given up, the withdrawn op fails everywhere without
  // moving data, and the group goes on.
  GiveUpSeqsThenBarrier(wire, *seq, *seq + 1);
  if (HasFatalFailure()) return;
  ExpectFirstElements(
      *client_, "y", [](int rank) { return rank + 1; }, "the withdrawn op ran");
  ExpectTheWorldGoesOnAt(generation_);
}

// A bench far longer than its call (issue 15, item 4): every rank stops it
// at the same instance a little before the call's deadline and says so with
// DEADLINE_EXCEEDED, and the group is free at once for the next op.
TEST_F(RefusalTest, ABenchStopsOnEveryRankAtItsCallsDeadline) {
  testing::ClientWire wire(*client_);
  AllocEverywhere(*client_, "b", 1 << 16, FillKind::kOnes);
  if (HasFatalFailure()) return;
  auto seq = wire.ReserveSeq(1);
  ASSERT_TRUE(seq.ok()) << seq.status();
  const auto start = Clock::now();
  const auto results = wire.Bench(
      client_->AllRanks(),
      [&](int) {
        v1::BenchRequest bench;
        *bench.mutable_op() = WireAllReduce("b", false);
        bench.mutable_op()->set_seq(*seq);
        bench.mutable_op()->set_generation(generation_);
        bench.set_iters(1000000);
        return bench;
      },
      seconds(6));
  for (const auto& r : results) {
    EXPECT_EQ(r.result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << "rank " << r.rank << ": " << r.result.status();
    // The worker's own answer, not gRPC's bare one.
    EXPECT_THAT(r.result.status().message(),
                HasSubstr("every rank stopped at the same instance"))
        << "rank " << r.rank;
  }
  EXPECT_LT(Clock::now() - start, seconds(8));
  const auto next = Clock::now();
  ExpectCorrectAllReduce("check");
  EXPECT_LT(Clock::now() - next, seconds(5)) << "the bench held the group";
  for (int r = 0; r < kWorkers; ++r) {
    EXPECT_TRUE(cluster_->worker(r).running()) << "rank " << r << " died";
  }
  EXPECT_EQ(Client()->world().generation, generation_);
}

// A new_group whose world seq waits behind another (chaos seed 353322721:
// seq 175 held by a SIGSTOPped rank for 2 s) is answered by every rank
// before its call's deadline, with the rank's own reason, not gRPC's bare
// "Deadline Exceeded": still queued at the deadline, it is withdrawn; let
// through late, its split may not spend a whole timeout of its own waiting
// for a member that never comes (here rank 0, which a dead client never
// told). Before the fix the split took its timeout afresh when it started.
TEST_F(RefusalTest, ASplitQueuedBehindAnotherSeqIsAnsweredBeforeItsDeadline) {
  testing::ClientWire wire(*client_);
  const int64_t generation = generation_;
  const std::vector<int>& everyone = everyone_;
  // Ranks 1 and 2 get the split; rank 0 (a member) never does.
  const std::vector<int> told = {1, 2};
  constexpr auto kCall = milliseconds(4000);
  // Sends the split to `told` at once; each thread writes its answer and
  // how long it took.
  std::vector<grpc::Status> answers(told.size());
  std::vector<Clock::duration> took(told.size());
  // `name` and `seq` by value: the threads outlive the call's arguments
  // (ASan saw a temporary name read after its scope).
  auto create = [&](std::string name, int64_t seq) {
    std::vector<std::thread> calls;
    for (size_t i = 0; i < told.size(); ++i) {
      calls.emplace_back([&, i, name, seq] {
        auto stub = wire.Worker(told[i]);
        ASSERT_TRUE(stub.ok()) << stub.status();
        v1::CreateGroupRequest request;
        request.set_name(name);
        request.add_ranks(0);
        request.add_ranks(1);
        request.set_seq(seq);
        request.set_generation(generation);
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + kCall);
        v1::GroupInfo reply;
        const auto start = Clock::now();
        answers[i] = (*stub)->CreateGroup(&context, request, &reply);
        took[i] = Clock::now() - start;
      });
    }
    return calls;
  };

  // Queued past its deadline: withdrawn, saying what it waited behind.
  {
    auto seq = wire.ReserveSeq(2);
    ASSERT_TRUE(seq.ok()) << seq.status();
    for (auto& call : create("queued", *seq + 1)) call.join();
    for (size_t i = 0; i < told.size(); ++i) {
      EXPECT_EQ(answers[i].error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
          << "rank " << told[i] << ": " << answers[i].error_message();
      EXPECT_THAT(answers[i].error_message(),
                  HasSubstr(absl::StrCat("waits behind seq ", *seq)))
          << "rank " << told[i];
      EXPECT_THAT(answers[i].error_message(), HasSubstr("withdrawn"));
      EXPECT_LT(took[i], kCall) << "rank " << told[i];
    }
    for (const auto& r : wire.Release(everyone, *seq, *seq + 1)) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
    for (const auto& r : wire.Release({0}, *seq + 1, *seq + 2)) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
  }

  // Let through 1.5 s into its call: rank 1 splits, waits for rank 0 only
  // until the call's deadline, and says why; rank 2 (no member) is done on
  // Gloo, and waits as rank 1 does on NCCL.
  {
    auto seq = wire.ReserveSeq(2);
    ASSERT_TRUE(seq.ok()) << seq.status();
    std::vector<std::thread> calls = create("late", *seq + 1);
    std::this_thread::sleep_for(milliseconds(1500));
    for (const auto& r : wire.Release(everyone, *seq, *seq + 1)) {
      EXPECT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
    for (auto& call : calls) call.join();
    // On NCCL every rank of the world takes part in ncclCommSplit, members
    // or not, so rank 2 waits for ranks 0 and 3 as rank 1 does. Gloo's
    // non-member has nothing to wait for.
    const std::vector<size_t> waiting =
        kCuda ? std::vector<size_t>{0, 1} : std::vector<size_t>{0};
    if (!kCuda) {
      EXPECT_TRUE(answers[1].ok()) << "rank 2: " << answers[1].error_message();
    }
    for (size_t i : waiting) {
      EXPECT_EQ(answers[i].error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
          << "rank " << told[i] << ": " << answers[i].error_message();
      // The worker's own answer, not gRPC's bare one.
      EXPECT_THAT(answers[i].error_message(),
                  HasSubstr("creating group 'late'"))
          << "rank " << told[i];
      EXPECT_LT(took[i], kCall)
          << "rank " << told[i] << " answered after its call's deadline";
    }
    if (kCuda) {
      // NCCL's split stopped mid-rendezvous on the world's control
      // communicator, which is then unusable: the world re-forms, and the
      // next op runs in the new generation.
      auto ready = cluster_->WaitUntilReady(kRecovery, generation_ + 1);
      ASSERT_TRUE(ready.ok()) << ready.status();
      ExpectCorrectAllReduce("check");
      for (int r = 0; r < kWorkers; ++r) {
        EXPECT_TRUE(cluster_->worker(r).running()) << "rank " << r << " died";
      }
      EXPECT_EQ(Client()->world().generation, generation_ + 1);
      return;
    }
    for (const auto& r : wire.Release({0}, *seq + 1, *seq + 2)) {
      ASSERT_TRUE(r.result.ok())
          << "rank " << r.rank << ": " << r.result.status();
    }
  }
  ExpectCorrectAllReduce("check");
  EXPECT_EQ(Client()->world().generation, generation_);
}

// Bytes that are no request, and methods nobody serves, sent straight to
// each daemon: each is answered with what was wrong (the message a request
// should have been, or what the server serves), not gRPC's bare INTERNAL or
// an empty UNIMPLEMENTED; every daemon lives on and the world goes on.
TEST_F(RefusalTest, UnparseableRequestsAndUnknownMethodsAreNamed) {
  // What one raw call needs: a stub, a context with a deadline, a completion
  // queue (drained when it goes), and `body` as one message.
  struct RawCall {
    RawCall(const std::string& address, const std::string& body)
        : stub(
              grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
          slice(body.data(), body.size()),
          message(&slice, 1) {
      context.set_deadline(std::chrono::system_clock::now() + seconds(10));
    }
    ~RawCall() {
      queue.Shutdown();
      void* tag = nullptr;
      bool ok = false;
      while (queue.Next(&tag, &ok)) {
      }
    }
    grpc::GenericStub stub;
    grpc::ClientContext context;
    grpc::CompletionQueue queue;
    grpc::Slice slice;
    grpc::ByteBuffer message;
  };
  // One unary call of `method` with `body` as its request bytes.
  auto call = [](const std::string& address, const std::string& method,
                 const std::string& body) {
    RawCall raw(address, body);
    auto rpc = raw.stub.PrepareUnaryCall(&raw.context, method, raw.message,
                                         &raw.queue);
    rpc->StartCall();
    grpc::ByteBuffer response;
    grpc::Status status;
    rpc->Finish(&response, &status, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(raw.queue.Next(&tag, &ok));
    return status;
  };
  // One bidirectional stream of `method` that writes `body` as its one
  // message, reads until the server ends it, and returns how it ended.
  auto stream_call = [](const std::string& address, const std::string& method,
                        const std::string& body) {
    RawCall raw(address, body);
    // Each step's tag comes back before the next starts: one at a time.
    auto step = [&raw](auto start) {
      start(reinterpret_cast<void*>(1));
      void* tag = nullptr;
      bool ok = false;
      EXPECT_TRUE(raw.queue.Next(&tag, &ok));
      return ok;
    };
    auto rpc = raw.stub.PrepareCall(&raw.context, method, &raw.queue);
    EXPECT_TRUE(step([&](void* tag) { rpc->StartCall(tag); }));
    step([&](void* tag) { rpc->Write(raw.message, tag); });
    step([&](void* tag) { rpc->WritesDone(tag); });
    grpc::ByteBuffer response;
    // No answer comes for a message that never parsed: the first read sees
    // the end of the stream.
    EXPECT_FALSE(step([&](void* tag) { rpc->Read(&response, tag); }));
    grpc::Status status;
    step([&](void* tag) { rpc->Finish(&status, tag); });
    return status;
  };
  // Field 1 as a length-delimited string longer than the body: no message.
  const std::string garbage("\x0a\x7f\x01\x02", 4);
  const std::string worker = client_->world().members.at(0).address;
  const std::string coordinator = cluster_->coordinator_address();

  grpc::Status status = call(worker, "/ccl.v1.Worker/Submit", garbage);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("/ccl.v1.Worker/Submit does not parse as a "
                        "ccl.v1.OpRequest message"));
  status = call(worker, "/ccl.v1.Worker/NoSuchMethod", "");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("no method /ccl.v1.Worker/NoSuchMethod here; this "
                        "server serves ccl.v1.Worker"));
  status = call(coordinator, "/ccl.v1.Coordinator/Register", garbage);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("does not parse as a ccl.v1.RegisterRequest message"));
  status = call(coordinator, "/ccl.v1.Coordinator/NoSuchMethod", "");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(status.error_message(), HasSubstr("this server serves "
                                                "ccl.v1.Coordinator"));
  // The op stream: a message that does not parse ends that stream with the
  // same naming, and nothing else.
  status = stream_call(worker, "/ccl.v1.Worker/SubmitStream", garbage);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("/ccl.v1.Worker/SubmitStream does not parse as a "
                        "ccl.v1.OpStreamRequest message"));
  // A request that parses still works on the same server.
  status = call(worker, "/ccl.v1.Worker/GetInfo", "");
  EXPECT_TRUE(status.ok()) << status.error_message();
  ExpectTheWorldGoesOnAt(generation_);
}

// The op stream (SubmitStream) answers each op once, with its request's id,
// in the order ops end rather than the order they came (11 before 10); an op
// refused on a stream takes its seq as a unary one does; and one still queued
// as its deadline_ms nears is withdrawn and answered DEADLINE_EXCEEDED, as a
// unary call's is at its call deadline. The stream then closes OK.
TEST_F(RefusalTest, AnOpStreamAnswersEachIdInTheOrderOpsEnd) {
  testing::ClientWire wire(*client_);
  auto seq = wire.ReserveSeq(4);
  ASSERT_TRUE(seq.ok()) << seq.status();
  struct Open {
    grpc::ClientContext context;
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::OpStreamRequest, v1::OpStreamResponse>>
        stream;
  };
  std::vector<std::unique_ptr<Open>> streams;
  for (int rank : everyone_) {
    auto stub = wire.Worker(rank);
    ASSERT_TRUE(stub.ok()) << stub.status();
    auto& open = streams.emplace_back(std::make_unique<Open>());
    open->context.set_deadline(std::chrono::system_clock::now() + seconds(60));
    open->stream = (*stub)->SubmitStream(&open->context);
  }
  auto request = [&](uint64_t id, int64_t at, const std::string& tensor,
                     int64_t deadline_ms) {
    v1::OpStreamRequest request;
    request.set_id(id);
    *request.mutable_op() = WireAllReduce(tensor, false);
    request.mutable_op()->set_seq(at);
    request.mutable_op()->set_generation(generation_);
    request.set_deadline_ms(deadline_ms);
    return request;
  };
  for (auto& open : streams) {
    // 10 waits behind seq + 0, which 11 takes (refused: no such tensor);
    // 12 waits behind seq + 2, which nobody sends.
    ASSERT_TRUE(open->stream->Write(request(10, *seq + 1, "y", 60000)));
    ASSERT_TRUE(open->stream->Write(request(11, *seq, "no_such", 60000)));
    ASSERT_TRUE(open->stream->Write(request(12, *seq + 3, "y", 1500)));
  }
  for (size_t i = 0; i < streams.size(); ++i) {
    auto& stream = *streams[i]->stream;
    // By id, with the order they came in: 11 before 10, which waited for
    // it. 12's answer comes when its withdrawal does, before or after 10's
    // (on a loaded machine 10 may take longer than 12's deadline).
    std::map<uint64_t, std::pair<int, v1::OpStreamResponse>> answers;
    for (int k = 0; k < 3; ++k) {
      v1::OpStreamResponse answer;
      ASSERT_TRUE(stream.Read(&answer)) << "rank " << i;
      answers[answer.id()] = {k, answer};
    }
    ASSERT_EQ(answers.size(), 3u) << "rank " << i;
    ASSERT_EQ(answers.count(10) + answers.count(11) + answers.count(12), 3u);
    EXPECT_LT(answers[11].first, answers[10].first) << "rank " << i;
    const v1::OpStreamResponse& refused = answers[11].second;
    EXPECT_EQ(refused.error_code(),
              static_cast<int>(absl::StatusCode::kNotFound))
        << refused.error_message();
    EXPECT_THAT(refused.error_message(), HasSubstr("no_such"));
    const v1::OpStreamResponse& ran = answers[10].second;
    EXPECT_EQ(ran.error_code(), 0) << ran.error_message();
    EXPECT_EQ(ran.response().seq(), *seq + 1);
    const v1::OpStreamResponse& withdrawn = answers[12].second;
    EXPECT_EQ(withdrawn.error_code(),
              static_cast<int>(absl::StatusCode::kDeadlineExceeded))
        << withdrawn.error_message();
    EXPECT_THAT(withdrawn.error_message(),
                HasSubstr(absl::StrCat("waits behind seq ", *seq + 2)));
    EXPECT_THAT(withdrawn.error_message(), HasSubstr("withdrawn"));
  }
  for (auto& open : streams) {
    ASSERT_TRUE(open->stream->WritesDone());
    const grpc::Status ended = open->stream->Finish();
    EXPECT_TRUE(ended.ok()) << ended.error_message();
  }
  // The withdrawn op leaves its queue once the released seq before it is
  // passed; a barrier after it says the executors got there.
  GiveUpSeqsThenBarrier(wire, *seq + 2, *seq + 3);
  if (HasFatalFailure()) return;
  // Only op 10 moved data: rank + 1 summed over the world.
  const int sum = static_cast<int>(everyone_.size()) *
                  (static_cast<int>(everyone_.size()) + 1) / 2;
  ExpectFirstElements(
      *client_, "y", [sum](int) { return sum; }, "op 10 did not run once");
  ExpectTheWorldGoesOnAt(generation_);
}

}  // namespace
}  // namespace ccl::failure_testing
