// nccl-tests' view of each benchmarkable op: buffer sizes and the bus
// bandwidth factor. One table for `ccctl bench` and the experiments' bench
// step, so the two always print comparable figures.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "client/types.h"
#include "common/types.h"

namespace ccl::ctl {

struct BenchOp {
  const char* name;
  OpKind kind;
  // nccl-tests' bus bandwidth factor for n ranks.
  double (*bus_factor)(int n);
  // Elements of (input, output) per rank for `count` elements of the large
  // buffer, as nccl-tests sizes them.
  std::pair<int64_t, int64_t> (*buffers)(int64_t count, int n);
};

// By name ("all_reduce", also "allreduce", "all-gather", ...); null if none.
const BenchOp* FindBenchOp(const std::string& name);
// By kind (kSend stands for sendrecv); null if none.
const BenchOp* BenchOpFor(OpKind kind);

// Non-empty when two of `members` share one GPU as different hosts (each
// worker's host id set, as ccctl cluster up --device cuda:N does): the
// line that labels such a run's figures as a correctness run, not a speed
// figure.
std::string SharedGpuNote(const client::World& world,
                          const std::vector<int>& members);

}  // namespace ccl::ctl
