// The in-process conformance suite's world and references: N WorkerCores
// (one per rank) form a world through one in-memory KV store, on the
// backend this binary was built for (CCL_CONFORMANCE_DEVICE: "cpu" is Gloo,
// "cuda" is NCCL with rank r on cuda:r), and every op kind is checked
// against references computed here on the host. The same cases run on every
// backend; where a backend cannot host a case (more ranks than GPUs) the
// case says so and skips.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/core/worker_core.h"
#include "tests/testing/in_memory_kv_store.h"

namespace ccl::conformance {

using std::chrono::milliseconds;

inline constexpr bool kCuda =
    std::string_view(CCL_CONFORMANCE_DEVICE) == "cuda";
inline constexpr milliseconds kWait{30000};
inline constexpr double kSentinel = 42;

WorkerConfig DefaultConfig();

// Ranks one world of this backend can have here: NCCL takes one GPU per
// rank; Gloo has no limit that matters to these cases.
int MaxRanks();

// Skips the current test, saying why, when the backend here cannot host
// `ranks` ranks.
#define CCL_REQUIRE_RANKS(ranks)                           \
  do {                                                     \
    if ((ranks) > ::ccl::conformance::MaxRanks()) {        \
      GTEST_SKIP() << (ranks) << " ranks need " << (ranks) \
                   << " GPUs; this machine has "           \
                   << ::ccl::conformance::MaxRanks();      \
    }                                                      \
  } while (0)

class World {
 public:
  explicit World(int size, WorkerConfig config = DefaultConfig(),
                 int64_t generation = 1);

  int size() const { return size_; }
  WorkerCore& operator[](int r) { return *cores_[r]; }
  int64_t NextSeq() { return seq_++; }
  // Every rank forms `generation` at once, as after a coordinator's
  // re-form; each rank's result. World seqs start again at 0.
  std::vector<absl::Status> Reform(int64_t generation);

 private:
  int size_;
  testing::InMemoryKvStore kv_;  // outlives the cores
  std::vector<std::unique_ptr<WorkerCore>> cores_;
  int64_t seq_ = 0;
};

bool Close(DType dtype, double got, double want);
// A 1-d tensor of `numel` on the core's own device.
absl::StatusOr<TensorMeta> Alloc(WorkerCore& core, const std::string& name,
                                 DType dtype, int64_t numel,
                                 const Fill& fill = {});
void AllocWith(WorkerCore& core, const std::string& name, DType dtype,
               const std::vector<double>& values);
std::vector<double> ReadAll(WorkerCore& core, const std::string& name);

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

inline constexpr OpKind kCollectives[] = {
    OpKind::kAllReduce, OpKind::kBroadcast,     OpKind::kReduce,
    OpKind::kAllGather, OpKind::kReduceScatter, OpKind::kGather,
    OpKind::kScatter,   OpKind::kAllToAll};
// Every dtype: both backends reduce them all.
inline constexpr DType kReducible[] = {
    DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
    DType::kFp8E4M3, DType::kFp8E5M2, DType::kInt32,   DType::kInt64,
    DType::kInt8,    DType::kUInt8};
inline constexpr ReduceOp kReduceOps[] = {ReduceOp::kSum, ReduceOp::kProd,
                                          ReduceOp::kMin, ReduceOp::kMax,
                                          ReduceOp::kAvg, ReduceOp::kPremulSum};

std::string Describe(const Case& c);
// Small values keep every reduction exact in every dtype for 4 ranks.
double Input(const Case& c, int rank, int64_t i);
double Reduced(const Case& c, int world, int64_t i);
void RunCase(World& w, const Case& c);

std::shared_ptr<Work> SubmitOk(WorkerCore& core, const OpSpec& spec);
OpSpec Op(OpKind kind, int64_t seq, std::string input = "",
          std::string output = "");
// Submits one op per rank at `seq` and returns each rank's status.
std::vector<absl::Status> RunPerRank(World& w,
                                     const std::vector<OpSpec>& specs);

}  // namespace ccl::conformance
