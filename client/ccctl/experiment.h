// The model of `ccctl run EXPERIMENT.yaml`: the parsed and validated steps
// of an experiment (their expressions in expression.h), and the pure checks
// (assert, write values) the runner applies to what the workers return.
// Plain C++ apart from yaml-cpp, so that tests reach it without a cluster.
// Parsing lives in experiment_parse.cc, resolution in experiment_resolve.cc,
// descriptions and checks in experiment_check.cc.
//
// Validation happens in two passes, both before any request reaches a worker:
// ParseExperiment checks the document (structure, step kinds, keys, types,
// expression syntax and the variables each expression may use) and reports
// "line N: ..."; ResolveExperiment evaluates what depends only on the world
// size (vars, ranks, roots, shapes, repeat counts) and checks ranges.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "client/ccctl/expression.h"
#include "common/types.h"

namespace ccl::ctl {

enum class StepKind {
  kAlloc,
  kWrite,
  kOp,  // a collective or barrier
  kSend,
  kRecv,
  kWait,
  kRead,
  kAssert,
  kFree,
  kSleep,
  kBench,
  kRepeat,
};

// A list of ranks: absent means every rank.
struct RankList {
  std::optional<std::vector<Expression>> exprs;
  std::vector<int> resolved;
};

struct Step {
  StepKind kind = StepKind::kAlloc;
  std::string kind_name;  // as written ("allreduce", "all_reduce", ...)
  int line = 0;           // 1-based line of the step in the file

  // Tensor names: alloc/write/read/assert/free/recv name `tensor`; ops use
  // `tensor` (in place) or `input`/`output`; send's receiver writes `output`
  // when given.
  std::string tensor, input, output;
  RankList ranks;

  // alloc
  std::vector<Expression> shape;
  std::vector<int64_t> shape_resolved;
  std::string dtype = "float32";
  std::string fill = "zeros";  // a fill name, "constant" or "affine"
  Expression fill_value, fill_rank_scale, fill_step;
  uint64_t seed = 0;

  // write (and alloc with `values`): per-element values in rank, i, ...
  std::vector<Expression> values;
  std::optional<Expression> values_all;  // one expression for every element
  int64_t offset = 0;

  // ops
  OpKind op = OpKind::kAllReduce;
  ReduceOp reduce = ReduceOp::kSum;
  Expression scale = Expression::Constant(1);  // premul_sum's factor
  double scale_resolved = 1.0;
  Expression root;  // src/dst/root; also send's `from` and recv's `rank`
  Expression peer;  // send's `to` and recv's `from`
  int root_resolved = 0, peer_resolved = 0;
  bool async = false;
  std::string as;      // names the async works for a later `wait`
  bool paired = true;  // send: also post the matching recv

  // wait: work names (empty: every outstanding work); free: tensor names
  std::vector<std::string> names;

  // read/assert
  int64_t limit = 16;
  std::vector<Expression> expected;  // leading elements
  std::optional<Expression> expected_all;
  std::optional<double> tol;  // absent: exact comparison

  // sleep
  std::chrono::milliseconds duration{0};

  // bench
  std::string bench_op = "all_reduce";  // as written; `op` holds the kind
                                        // (kSend for "sendrecv")
  int64_t min_bytes = 1 << 20, max_bytes = 1 << 20;
  int iters = 20, warmup = 5;
  bool check = false;

  // repeat
  Expression times;
  int times_resolved = 0;
  std::vector<Step> steps;
};

struct Experiment {
  std::string file;
  std::string name, description;
  // In document order; each a number or an expression in world_size and the
  // vars before it.
  std::vector<std::pair<std::string, Expression>> vars;
  std::vector<Step> steps;
  // Set by ResolveExperiment: world_size and every var.
  Vars resolved_vars;
};

// INVALID_ARGUMENT "FILE:LINE: message" for anything wrong in the document.
absl::StatusOr<Experiment> ParseExperiment(const std::string& yaml_text,
                                           const std::string& file = "");
absl::StatusOr<Experiment> LoadExperiment(const std::string& path);

// Evaluates the world-level values for `world_size` ranks, `overrides`
// replacing vars of the same name (INVALID_ARGUMENT for an unknown one).
absl::Status ResolveExperiment(Experiment& experiment, int world_size,
                               const Vars& overrides = {});

// One line describing a step ("allreduce sum x", "assert y == [...]").
std::string DescribeStep(const Step& step);

// The names of the step kinds, for help and error messages.
std::string StepKindList();

// Compares the leading `got` values of a tensor of `numel` elements with an
// assert step's expectation, `vars` holding rank, world_size and the vars.
// OK, or FAILED_PRECONDITION "expected E at [i], got G" for the first
// mismatch (and how many mismatched).
absl::Status CheckValues(const Step& step, const std::vector<Number>& got,
                         int64_t numel, const Vars& vars);
// The same for the doubles a tensor's summary carries (exact for every dtype
// but int64, whose values are read back as Numbers instead).
absl::Status CheckValues(const Step& step, const std::vector<double>& got,
                         int64_t numel, const Vars& vars);

// The values a write step (or an alloc with values) stores into a tensor of
// `numel` elements: its `values` list, or `all` for every element; integers
// exact (EncodeNumbers stores them, refusing what the dtype cannot hold).
absl::StatusOr<std::vector<Number>> ValuesToWrite(const Step& step,
                                                  int64_t numel,
                                                  const Vars& vars);

}  // namespace ccl::ctl
