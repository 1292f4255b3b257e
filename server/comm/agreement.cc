#include "server/comm/agreement.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/comm/op_fingerprint.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

class AgreeingCommunicator final : public Communicator {
 public:
  explicit AgreeingCommunicator(std::unique_ptr<Communicator> inner)
      : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  absl::Status Supports(OpKind kind, DType dtype,
                        ReduceOp reduce_op) const override {
    return inner_->Supports(kind, dtype, reduce_op);
  }
  absl::Status Health() const override { return inner_->Health(); }
  void Abort(const absl::Status& why) override { inner_->Abort(why); }

  absl::StatusOr<std::unique_ptr<CommWork>> Launch(const BoundOp& op) override {
    if (op.agreement != Agreement::kCheck) return inner_->Launch(op);
    if (absl::Status s = Exchange({op}); !s.ok()) return s;
    BoundOp agreed = op;
    agreed.agreement = Agreement::kAgreed;
    return inner_->Launch(agreed);
  }

  absl::Status Agree(const std::vector<BoundOp>& ops) override {
    return Exchange(ops);
  }

  absl::StatusOr<std::unique_ptr<CommWork>> LaunchBatch(
      const std::vector<BoundOp>& ops, const BatchOptions& options) override {
    if (absl::Status s = Exchange(ops); !s.ok()) return s;
    std::vector<BoundOp> agreed = ops;
    for (BoundOp& op : agreed) {
      if (op.agreement == Agreement::kCheck) op.agreement = Agreement::kAgreed;
    }
    return inner_->LaunchBatch(agreed, options);
  }

  absl::Status AllGatherHost(const void* mine, void* all, size_t bytes,
                             Clock::time_point deadline) override {
    return inner_->AllGatherHost(mine, all, bytes, deadline);
  }
  absl::Status ExchangeHost(int peer, const void* mine, void* theirs,
                            size_t bytes, Clock::time_point deadline) override {
    return inner_->ExchangeHost(peer, mine, theirs, bytes, deadline);
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Shrink(
      const std::vector<int>& excluded,
      std::chrono::milliseconds timeout) override {
    auto child = inner_->Shrink(excluded, timeout);
    if (!child.ok()) return child.status();
    return WithAgreement(*std::move(child));
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Split(
      const std::vector<int>& members, const std::string& name,
      std::chrono::milliseconds timeout) override {
    auto child = inner_->Split(members, name, timeout);
    if (!child.ok() || *child == nullptr) return child;
    return WithAgreement(*std::move(child));
  }

 private:
  // The ops of `ops` that ask for the check (kCheck) are compared: those
  // that involve every rank across all of them, send and recv only between
  // the two ranks. A batch is one exchange: point to point ops in it are
  // agreed with their peers one after the other. A plan's thousands of ops
  // pass through here, so nothing is copied op by op.
  absl::Status Exchange(const std::vector<BoundOp>& ops) {
    std::vector<const BoundOp*> collectives;
    collectives.reserve(ops.size());
    for (const BoundOp& op : ops) {
      if (op.agreement != Agreement::kCheck || op.kind == OpKind::kNop) {
        continue;
      }
      if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
        if (absl::Status s = AgreePointToPoint(op); !s.ok()) return s;
        continue;
      }
      collectives.push_back(&op);
    }
    if (collectives.empty()) return absl::OkStatus();
    const size_t n = collectives.size();
    const size_t world = static_cast<size_t>(size());
    std::vector<OpFingerprint> mine(n);
    std::vector<OpFingerprint> all(n * world);
    std::chrono::milliseconds timeout{0};
    for (size_t i = 0; i < n; ++i) {
      mine[i] = FingerprintOf(*collectives[i], rank());
      timeout = std::max(timeout, collectives[i]->timeout);
    }
    const BoundOp& first = *collectives.front();
    absl::Status exchanged = inner_->AllGatherHost(
        mine.data(), all.data(), n * sizeof(mine[0]), Deadline(timeout));
    if (absl::IsDeadlineExceeded(exchanged)) {
      return absl::DeadlineExceededError(
          absl::StrCat("the ranks' agreement on seq ", first.seq,
                       " did not complete within ", timeout.count(),
                       " ms; the ", name(), " communicator was aborted"));
    }
    if (!exchanged.ok()) return exchanged;
    std::vector<OpFingerprint> of_op(world);
    for (size_t i = 0; i < n; ++i) {
      for (size_t r = 0; r < world; ++r) of_op[r] = all[r * n + i];
      CCL_RETURN_IF_ERROR(JudgeCollective(*inner_, collectives[i]->seq, of_op,
                                          Withdrawals::kOfAnOp));
    }
    return absl::OkStatus();
  }

  absl::Status AgreePointToPoint(const BoundOp& op) {
    const OpFingerprint mine = FingerprintOf(op, rank());
    OpFingerprint theirs{};
    absl::Status exchanged = inner_->ExchangeHost(
        op.peer, &mine, &theirs, sizeof(mine), Deadline(op.timeout));
    if (absl::IsDeadlineExceeded(exchanged)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", op.peer, " posted no matching ",
          op.kind == OpKind::kSend ? "recv" : "send", " within ",
          op.timeout.count(),
          " ms (it may have run a different op at this seq, or none); the ",
          name(), " communicator was aborted"));
    }
    if (!exchanged.ok()) return exchanged;
    return JudgePointToPoint(*inner_, op.seq, mine, theirs,
                             Withdrawals::kOfAnOp);
  }

  static Clock::time_point Deadline(std::chrono::milliseconds timeout) {
    return Clock::now() + std::max(timeout, std::chrono::milliseconds(1));
  }

  const std::unique_ptr<Communicator> inner_;
};

}  // namespace

std::unique_ptr<Communicator> WithAgreement(
    std::unique_ptr<Communicator> inner) {
  return std::make_unique<AgreeingCommunicator>(std::move(inner));
}

}  // namespace ccl
