// nccl_peer_bench: bare NCCL, timed the way nccl-tests times it, so that
// `ccctl bench` has a peer measured in the same run on the same GPUs. One
// process drives every GPU with one thread each (nccl-tests' `-t N -g 1`).
//
// Per op and size, for out of place and then in place (nccl-tests 2.19's
// method, reimplemented from its documented behaviour):
//   - before the sweep, `-w` warm-up ops at every size from -b to -e doubling;
//   - one op to settle, then a barrier between the rank threads;
//   - `-n` ops enqueued back to back on one stream per GPU (each iteration
//     at the next slot of the buffers), or with -G N the same ops captured
//     in a CUDA graph that is launched N times after a second barrier;
//   - one wait for the stream; time = elapsed / ops, combined over ranks
//     as -a says (nccl-tests' default: the mean); algbw and busbw from
//     nccl-tests' definitions (core.h);
//   - with -c, the input refilled with a pattern, one op, and the output
//     checked on the device (kernels.h).
//
//   nccl_peer_bench [ops] [-b 8 -e 2G -f 4 -n 20 -w 5 ...] [--csv F_{op}.csv]
//   nccl_peer_bench --launch-latency [-n 2000]
//
// --launch-latency keeps what bench/nccl_launch_latency measured: the host
// cost of enqueuing an 8-byte all_reduce on blocking vs non-blocking
// communicators (it sets the floor of the worker's small-op latency), and
// that the mode leaves a 2 GiB reduce_scatter's bandwidth alone.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/nccl_peer/core.h"
#include "bench/nccl_peer/kernels.h"

// NCCL 2.28 brought ncclAlltoAll, ncclGather and ncclScatter; nccl-tests
// 2.19 calls them when present, and so does the worker.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
#define CCL_PEER_NCCL_2_28 1
#else
#define CCL_PEER_NCCL_2_28 0
#endif

namespace ccl::peer {
namespace {

static_assert(static_cast<int>(DType::kInt8) == ncclInt8);
static_assert(static_cast<int>(DType::kUInt8) == ncclUint8);
static_assert(static_cast<int>(DType::kInt32) == ncclInt32);
static_assert(static_cast<int>(DType::kUInt32) == ncclUint32);
static_assert(static_cast<int>(DType::kInt64) == ncclInt64);
static_assert(static_cast<int>(DType::kUInt64) == ncclUint64);
static_assert(static_cast<int>(DType::kFloat16) == ncclFloat16);
static_assert(static_cast<int>(DType::kFloat32) == ncclFloat32);
static_assert(static_cast<int>(DType::kFloat64) == ncclFloat64);
static_assert(static_cast<int>(DType::kBFloat16) == ncclBfloat16);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
static_assert(static_cast<int>(DType::kFp8E4M3) == ncclFloat8e4m3);
static_assert(static_cast<int>(DType::kFp8E5M2) == ncclFloat8e5m2);
#endif
static_assert(static_cast<int>(RedOp::kSum) == ncclSum);
static_assert(static_cast<int>(RedOp::kProd) == ncclProd);
static_assert(static_cast<int>(RedOp::kMax) == ncclMax);
static_assert(static_cast<int>(RedOp::kMin) == ncclMin);
static_assert(static_cast<int>(RedOp::kAvg) == ncclAvg);

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// A failed call leaves the other ranks waiting in NCCL or at a barrier;
// ending the process is the only clean way out of a benchmark.
[[noreturn]] void Die(int rank, const char* what, const char* why) {
  std::fflush(stdout);
  std::fprintf(stderr, "nccl_peer_bench: rank %d: %s: %s\n", rank, what, why);
  std::fflush(stderr);
  std::_Exit(1);
}

#define CCL_CUDA(rank, call)                         \
  do {                                               \
    const cudaError_t ccl_e = (call);                \
    if (ccl_e != cudaSuccess) {                      \
      Die((rank), #call, cudaGetErrorString(ccl_e)); \
    }                                                \
  } while (0)

// Rank threads meet here before each timed loop. It spins (yielding)
// rather than sleeping so that every thread leaves within a scheduler
// slice of the last arrival: a thread woken late would add its wake-up time
// to the other ranks' first op.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void Wait() {
    const unsigned generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(generation + 1, std::memory_order_release);
      return;
    }
    while (generation_.load(std::memory_order_acquire) == generation) {
      std::this_thread::yield();
    }
  }

 private:
  const int n_;
  std::atomic<int> arrived_{0};
  std::atomic<unsigned> generation_{0};
};

// What the rank threads share.
struct World {
  World(const Options& options, int ranks, std::vector<Op> op_list)
      : opt(options),
        n(ranks),
        ops(std::move(op_list)),
        barrier(ranks),
        doubles(ranks),
        counts(ranks) {}

  // Every rank passes its value; every rank gets the combination.
  double Combine(int rank, double value, Average how) {
    doubles[rank] = value;
    barrier.Wait();
    const double result = ccl::peer::Combine(doubles, how);
    barrier.Wait();  // nobody overwrites a slot before all have read
    return result;
  }
  long long Sum(int rank, long long value) {
    counts[rank] = value;
    barrier.Wait();
    long long total = 0;
    for (long long c : counts) total += c;
    barrier.Wait();
    return total;
  }

  const Options opt;
  const int n;
  const std::vector<Op> ops;
  ncclUniqueId id{};
  SpinBarrier barrier;
  std::vector<double> doubles;
  std::vector<long long> counts;
  std::vector<Row> rows;  // rank 0's thread appends, main reads after join
};

struct LatencyResult {
  double launch_us = 0;  // mean host time of one enqueue (settled)
  double wall_us = 0;    // mean wall time per op, back to back, one sync
  double sync_us = 0;    // mean time of one op with a sync after each
  double polls = 0;      // mean ncclInProgress polls per enqueue
  double rs_busbw = 0;   // reduce_scatter of 2 GiB, back to back
};

class RankRunner {
 public:
  RankRunner(World& world, int rank)
      : w_(world),
        opt_(world.opt),
        rank_(rank),
        elem_(Info(world.opt.dtype).size) {}

  void Run() {
    CCL_CUDA(rank_, cudaSetDevice(rank_));
    Init(opt_.comm_blocking);
    // Both buffers hold the largest size of any op: a row is at most the
    // requested bytes, and IterShift keeps every slot inside max_bytes.
    const size_t bytes =
        (std::max<size_t>(opt_.max_bytes, 1) + 4095) / 4096 * 4096;
    CCL_CUDA(rank_, cudaMalloc(&send_, bytes));
    CCL_CUDA(rank_, cudaMalloc(&recv_, bytes));
    CCL_CUDA(rank_, cudaMalloc(&wrong_d_, sizeof(unsigned long long)));
    CCL_CUDA(rank_, cudaMemsetAsync(send_, 0, bytes, stream_));
    CCL_CUDA(rank_, cudaMemsetAsync(recv_, 0, bytes, stream_));
    CCL_CUDA(rank_, cudaStreamSynchronize(stream_));
    for (Op op : w_.ops) Sweep(op);
    Teardown();
    CCL_CUDA(rank_, cudaFree(send_));
    CCL_CUDA(rank_, cudaFree(recv_));
    CCL_CUDA(rank_, cudaFree(wrong_d_));
  }

  void LaunchLatency(bool blocking, int iters, LatencyResult* out) {
    CCL_CUDA(rank_, cudaSetDevice(rank_));
    Init(blocking);
    float* small = nullptr;
    CCL_CUDA(rank_, cudaMalloc(&small, 1024));
    auto op = [&] {
      Settle(
          ncclAllReduce(small, small, 2, ncclFloat32, ncclSum, comm_, stream_),
          "ncclAllReduce");
    };
    for (int i = 0; i < 50; ++i) op();
    CCL_CUDA(rank_, cudaStreamSynchronize(stream_));
    w_.barrier.Wait();
    polls_ = 0;
    double launch = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      const auto a = Clock::now();
      op();
      launch += Seconds(a);
    }
    CCL_CUDA(rank_, cudaStreamSynchronize(stream_));
    const double wall = Seconds(t0);
    w_.barrier.Wait();
    const auto t1 = Clock::now();
    for (int i = 0; i < iters; ++i) {
      op();
      CCL_CUDA(rank_, cudaStreamSynchronize(stream_));
    }
    const double synced = Seconds(t1);
    out->launch_us = launch * 1e6 / iters;
    out->wall_us = wall * 1e6 / iters;
    out->sync_us = synced * 1e6 / iters;
    out->polls = static_cast<double>(polls_) / iters;
    CCL_CUDA(rank_, cudaFree(small));

    // Data plane: 20 reduce_scatters of 2 GiB of input, back to back.
    const size_t total = size_t{1} << 31;
    const size_t part = total / sizeof(float) / w_.n;
    float* in = nullptr;
    float* outbuf = nullptr;
    CCL_CUDA(rank_, cudaMalloc(&in, total));
    CCL_CUDA(rank_, cudaMalloc(&outbuf, part * sizeof(float)));
    auto rs = [&] {
      Settle(ncclReduceScatter(in, outbuf, part, ncclFloat32, ncclSum, comm_,
                               stream_),
             "ncclReduceScatter");
    };
    for (int i = 0; i < 5; ++i) rs();
    CCL_CUDA(rank_, cudaStreamSynchronize(stream_));
    w_.barrier.Wait();
    const auto t2 = Clock::now();
    for (int i = 0; i < 20; ++i) rs();
    CCL_CUDA(rank_, cudaStreamSynchronize(stream_));
    const double rs_sec = Seconds(t2) / 20;
    const double bytes = static_cast<double>(part * sizeof(float)) * w_.n;
    out->rs_busbw = bytes / rs_sec / 1e9 * (w_.n - 1) / w_.n;
    CCL_CUDA(rank_, cudaFree(in));
    CCL_CUDA(rank_, cudaFree(outbuf));
    Teardown();
  }

 private:
  void Init(bool blocking) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    const ncclResult_t r =
        ncclCommInitRankConfig(&comm_, w_.n, w_.id, rank_, &config);
    if (comm_ == nullptr) {
      Die(rank_, "ncclCommInitRankConfig", ncclGetErrorString(r));
    }
    Settle(r, "ncclCommInitRankConfig");
    CCL_CUDA(rank_, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }

  void Teardown() {
    CCL_CUDA(rank_, cudaStreamSynchronize(stream_));
    Settle(ncclCommFinalize(comm_), "ncclCommFinalize");
    ncclCommDestroy(comm_);
    comm_ = nullptr;
    CCL_CUDA(rank_, cudaStreamDestroy(stream_));
    stream_ = nullptr;
  }

  // A non-blocking communicator answers ncclInProgress until the call has
  // been enqueued; poll it as the worker does (nccl-tests cannot run this
  // mode at all). A blocking one returns the final result at once.
  void Settle(ncclResult_t r, const char* what) {
    while (r == ncclInProgress) {
      ++polls_;
      std::this_thread::yield();
      ncclResult_t async = ncclSuccess;
      const ncclResult_t got = ncclCommGetAsyncError(comm_, &async);
      r = got != ncclSuccess ? got : async;
    }
    if (r != ncclSuccess) {
      const char* last = ncclGetLastError(comm_);
      Die(rank_, what,
          last != nullptr && *last != '\0' ? last : ncclGetErrorString(r));
    }
  }

  // Waits for the stream, watching for NCCL's asynchronous errors so that a
  // failed peer ends the run instead of hanging it.
  void Complete() {
    while (true) {
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady)
        Die(rank_, "cudaStreamQuery", cudaGetErrorString(e));
      ncclResult_t async = ncclSuccess;
      const ncclResult_t got = ncclCommGetAsyncError(comm_, &async);
      if (got != ncclSuccess)
        Die(rank_, "ncclCommGetAsyncError", ncclGetErrorString(got));
      if (async != ncclSuccess && async != ncclInProgress) {
        Die(rank_, "NCCL", ncclGetErrorString(async));
      }
      std::this_thread::yield();
    }
  }

  // Iteration `iter` of `op`: nccl-tests' pointers (in place, the input and
  // output are the receive buffer at the rank's in-place offsets) at the
  // iteration's slot of the buffers.
  void Enqueue(Op op, const Counts& c, int iter, bool in_place) {
    const size_t shift = IterShift(RowBytes(c, elem_), opt_.max_bytes, iter);
    char* const send = send_ + shift;
    char* const recv = recv_ + shift;
    const size_t r = static_cast<size_t>(rank_);
    const void* in = in_place ? recv + r * c.send_inplace_offset * elem_
                              : static_cast<const void*>(send);
    void* out = in_place ? recv + r * c.recv_inplace_offset * elem_ : recv;
    const auto type = static_cast<ncclDataType_t>(opt_.dtype);
    const auto red = static_cast<ncclRedOp_t>(opt_.redop);
    const int root = opt_.root;
    switch (op) {
      case Op::kAllReduce:
        Settle(ncclAllReduce(in, out, c.param, type, red, comm_, stream_),
               "ncclAllReduce");
        break;
      case Op::kAllGather:
        Settle(ncclAllGather(in, out, c.param, type, comm_, stream_),
               "ncclAllGather");
        break;
      case Op::kReduceScatter:
        Settle(ncclReduceScatter(in, out, c.param, type, red, comm_, stream_),
               "ncclReduceScatter");
        break;
      case Op::kBroadcast:
        Settle(ncclBroadcast(in, out, c.param, type, root, comm_, stream_),
               "ncclBroadcast");
        break;
      case Op::kReduce:
        Settle(ncclReduce(in, out, c.param, type, red, root, comm_, stream_),
               "ncclReduce");
        break;
      case Op::kAllToAll:
#if CCL_PEER_NCCL_2_28
        Settle(ncclAlltoAll(in, out, c.param, type, comm_, stream_),
               "ncclAlltoAll");
#else
        Settle(ncclGroupStart(), "ncclGroupStart");
        for (int peer = 0; peer < w_.n; ++peer) {
          const size_t at = static_cast<size_t>(peer) * c.param * elem_;
          Settle(ncclSend(static_cast<const char*>(in) + at, c.param, type,
                          peer, comm_, stream_),
                 "ncclSend");
          Settle(ncclRecv(static_cast<char*>(out) + at, c.param, type, peer,
                          comm_, stream_),
                 "ncclRecv");
        }
        Settle(ncclGroupEnd(), "ncclGroupEnd");
#endif
        break;
      case Op::kSendRecv: {
        // nccl-tests' sendrecv: every rank sends to the next and receives
        // from the previous one, in one group.
        const int next = (rank_ + 1) % w_.n;
        const int prev = (rank_ - 1 + w_.n) % w_.n;
        Settle(ncclGroupStart(), "ncclGroupStart");
        Settle(ncclSend(in, c.param, type, next, comm_, stream_), "ncclSend");
        Settle(ncclRecv(out, c.param, type, prev, comm_, stream_), "ncclRecv");
        Settle(ncclGroupEnd(), "ncclGroupEnd");
        break;
      }
      case Op::kGather:
#if CCL_PEER_NCCL_2_28
        Settle(ncclGather(in, out, c.param, type, root, comm_, stream_),
               "ncclGather");
#endif
        break;
      case Op::kScatter:
#if CCL_PEER_NCCL_2_28
        Settle(ncclScatter(in, out, c.param, type, root, comm_, stream_),
               "ncclScatter");
#endif
        break;
    }
  }

  // One op (iteration 0), in a CUDA graph of its own under -G so that the
  // check sees what the timed graphs ran.
  void RunOnce(Op op, const Counts& c, bool in_place) {
    if (opt_.graph_launches <= 0) {
      Enqueue(op, c, 0, in_place);
      Complete();
      return;
    }
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CCL_CUDA(rank_,
             cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Enqueue(op, c, 0, in_place);
    CCL_CUDA(rank_, cudaStreamEndCapture(stream_, &graph));
    CCL_CUDA(rank_, cudaGraphInstantiate(&exec, graph, 0));
    CCL_CUDA(rank_, cudaGraphLaunch(exec, stream_));
    Complete();
    CCL_CUDA(rank_, cudaGraphExecDestroy(exec));
    CCL_CUDA(rank_, cudaGraphDestroy(graph));
  }

  // Seconds per op, combined over ranks as -a says.
  double Time(Op op, const Counts& c, bool in_place) {
    Enqueue(op, c, 0, in_place);
    Complete();
    w_.barrier.Wait();
    const int launches = opt_.graph_launches;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (launches > 0) {
      // Thread-local: the other rank threads capture at the same time.
      CCL_CUDA(rank_, cudaStreamBeginCapture(stream_,
                                             cudaStreamCaptureModeThreadLocal));
    }
    auto start = Clock::now();
    for (int i = 0; i < opt_.iters; ++i) Enqueue(op, c, i, in_place);
    if (launches > 0) {
      CCL_CUDA(rank_, cudaStreamEndCapture(stream_, &graph));
      CCL_CUDA(rank_, cudaGraphInstantiate(&exec, graph, 0));
      // Capture and instantiation are not timed; line up again.
      w_.barrier.Wait();
      start = Clock::now();
      for (int l = 0; l < launches; ++l) {
        CCL_CUDA(rank_, cudaGraphLaunch(exec, stream_));
      }
    }
    Complete();
    const double ops = static_cast<double>(opt_.iters) * std::max(launches, 1);
    const double mine = Seconds(start) / ops;
    const double seconds = w_.Combine(rank_, mine, opt_.average);
    if (launches > 0) {
      CCL_CUDA(rank_, cudaGraphExecDestroy(exec));
      CCL_CUDA(rank_, cudaGraphDestroy(graph));
    }
    w_.barrier.Wait();
    return seconds;
  }

  // What this rank's output window must hold after `op`; none where the op
  // leaves it undefined (a non-root's output of reduce and gather).
  std::optional<Expectation> ExpectFor(Op op, const Counts& c) const {
    Expectation e;
    const size_t mine = static_cast<size_t>(rank_) * c.param;
    switch (op) {
      case Op::kAllReduce:
        e.kind = Expectation::kReduced;
        return e;
      case Op::kReduce:
        if (rank_ != opt_.root) return std::nullopt;
        e.kind = Expectation::kReduced;
        return e;
      case Op::kReduceScatter:
        e.kind = Expectation::kReduced;
        e.offset = mine;
        return e;
      case Op::kBroadcast:
        e.kind = Expectation::kFrom;
        e.source = opt_.root;
        return e;
      case Op::kSendRecv:
        e.kind = Expectation::kFrom;
        e.source = (rank_ - 1 + w_.n) % w_.n;
        return e;
      case Op::kScatter:
        e.kind = Expectation::kFrom;
        e.source = opt_.root;
        e.offset = mine;
        return e;
      case Op::kAllGather:
        e.kind = Expectation::kBlocks;
        e.block = c.param;
        return e;
      case Op::kGather:
        if (rank_ != opt_.root) return std::nullopt;
        e.kind = Expectation::kBlocks;
        e.block = c.param;
        return e;
      case Op::kAllToAll:
        e.kind = Expectation::kBlocks;
        e.block = c.param;
        e.offset = mine;
        return e;
    }
    return std::nullopt;
  }

  // Wrong elements over every rank; stops at the first pass with any, as
  // nccl-tests does.
  long long Check(Op op, const Counts& c, bool in_place) {
    long long wrong = 0;
    for (int pass = 0; pass < opt_.check && wrong == 0; ++pass) {
      ++seed_;  // the same on every rank: each rank's check needs the others'
      Pattern pattern;
      pattern.dtype = static_cast<int>(opt_.dtype);
      pattern.redop = IsReduction(op) ? static_cast<int>(opt_.redop) : kMove;
      pattern.nranks = w_.n;
      pattern.seed = seed_;
      const size_t r = static_cast<size_t>(rank_);
      char* const in =
          in_place ? recv_ + r * c.send_inplace_offset * elem_ : send_;
      char* const out =
          in_place ? recv_ + r * c.recv_inplace_offset * elem_ : recv_;
      // A value no pattern produces (0x7f bytes: NaN in the small floats,
      // huge elsewhere) where results land, so an op that writes nothing
      // fails; then the input, which in place lies inside that region.
      CCL_CUDA(rank_,
               cudaMemsetAsync(recv_, 0x7f, RowBytes(c, elem_), stream_));
      CCL_CUDA(rank_, LaunchFill(in, c.send, 0, rank_, pattern, stream_));
      RunOnce(op, c, in_place);
      unsigned long long mine = 0;
      if (const auto expect = ExpectFor(op, c)) {
        CCL_CUDA(rank_,
                 cudaMemsetAsync(wrong_d_, 0, sizeof(*wrong_d_), stream_));
        CCL_CUDA(rank_,
                 LaunchCheck(out, c.recv, pattern, *expect, wrong_d_, stream_));
        CCL_CUDA(rank_, cudaMemcpyAsync(&mine, wrong_d_, sizeof(mine),
                                        cudaMemcpyDeviceToHost, stream_));
        CCL_CUDA(rank_, cudaStreamSynchronize(stream_));
      }
      wrong = w_.Sum(rank_, static_cast<long long>(mine));
    }
    return wrong;
  }

  void Sweep(Op op) {
    // nccl-tests' warm-up: every size from -b to -e doubling, out of place.
    for (size_t size : WarmupSizes(opt_.min_bytes, opt_.max_bytes)) {
      const Counts c = CountsFor(op, size, elem_, w_.n);
      if (c.param == 0) continue;
      for (int i = 0; i < opt_.warmup; ++i) Enqueue(op, c, i, false);
      Complete();
    }
    if (rank_ == 0) {
      std::printf("#\n# %s\n%s", std::string(OpName(op)).c_str(),
                  TableHeader().c_str());
      std::fflush(stdout);
    }
    std::vector<Row> rows;
    for (size_t size : SweepSizes(opt_.min_bytes, opt_.max_bytes,
                                  opt_.step_factor, opt_.step_bytes)) {
      const Counts c = CountsFor(op, size, elem_, w_.n);
      // Too small for one element per rank: nothing to time (ccctl bench
      // skips these sizes too).
      if (c.param == 0) continue;
      Row row;
      row.op = op;
      row.bytes = RowBytes(c, elem_);
      row.count = c.param;
      row.dtype = opt_.dtype;
      row.redop = opt_.redop;
      row.root = opt_.root;
      for (int v = 0; v < 2; ++v) {
        const bool in_place = v == 1;
        const double seconds = Time(op, c, in_place);
        row.time_us[v] = seconds * 1e6;
        row.algbw[v] = AlgBw(op, c, elem_, w_.n, seconds);
        row.busbw[v] = row.algbw[v] * BusFactor(op, w_.n);
        // NCCL defines no in-place alltoall or send/recv (nccl.h names an
        // in-place form for every other op): nccl-tests times them on one
        // buffer, and so does this, but what they leave there is
        // unspecified.
        const bool defined =
            !(in_place && (op == Op::kAllToAll || op == Op::kSendRecv));
        row.checked[v] = opt_.check > 0 && defined;
        if (row.checked[v]) row.wrong[v] = Check(op, c, in_place);
      }
      if (rank_ == 0) {
        std::fputs(TableLine(row).c_str(), stdout);
        std::fflush(stdout);
        rows.push_back(row);
      }
    }
    if (rank_ == 0) {
      long long wrong = 0;
      for (const Row& row : rows) wrong += row.wrong[0] + row.wrong[1];
      std::printf("# Out of bounds values : %lld %s\n", wrong,
                  wrong == 0 ? "OK" : "FAILED");
      std::printf("# Avg bus bandwidth    : %g\n", AvgBusBw(rows));
      std::fflush(stdout);
      w_.rows.insert(w_.rows.end(), rows.begin(), rows.end());
    }
  }

  World& w_;
  const Options& opt_;
  const int rank_;
  const size_t elem_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  char* send_ = nullptr;
  char* recv_ = nullptr;
  unsigned long long* wrong_d_ = nullptr;
  uint32_t seed_ = 0;
  long long polls_ = 0;
};

void PrintPreamble(const Options& opt, int n) {
  int nccl = 0;
  ncclGetVersion(&nccl);
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  std::printf(
      "# nccl_peer_bench: NCCL %d.%d.%d (built with %d.%d.%d), CUDA runtime "
      "%d.%d, driver %d.%d\n",
      nccl / 10000, nccl / 100 % 100, nccl % 100, NCCL_MAJOR, NCCL_MINOR,
      NCCL_PATCH, runtime / 1000, runtime % 1000 / 10, driver / 1000,
      driver % 1000 / 10);
  std::printf(
      "# %d ranks, one thread per GPU; %s, %s, root %d; %d iters, %d warmup "
      "per size; check %d; cudagraph %d; %s communicator; time per op: %s\n",
      n, std::string(Info(opt.dtype).name).c_str(),
      std::string(RedOpName(opt.redop)).c_str(), opt.root, opt.iters,
      opt.warmup, opt.check, opt.graph_launches,
      opt.comm_blocking ? "blocking" : "non-blocking",
      std::string(AverageName(opt.average)).c_str());
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
    std::printf("#  rank %2d: device %2d [%04x:%02x:%02x.0] %s\n", d, d,
                prop.pciDomainID, prop.pciBusID, prop.pciDeviceID, prop.name);
  }
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  std::printf("# NCCL_NVLS_ENABLE=%s\n", nvls != nullptr ? nvls : "(unset)");
  std::fflush(stdout);
}

bool WriteCsv(const Options& opt, const std::vector<Row>& rows) {
  if (opt.csv.empty()) return true;
  std::vector<std::pair<std::string, std::string>> files;  // path, text
  for (const Row& row : rows) {
    const std::string path = CsvPath(opt.csv, row.op);
    auto it = std::find_if(files.begin(), files.end(),
                           [&](const auto& f) { return f.first == path; });
    if (it == files.end()) {
      files.emplace_back(path, CsvHeader());
      it = files.end() - 1;
    }
    it->second += CsvLine(row);
  }
  bool ok = true;
  for (const auto& [path, text] : files) {
    std::ofstream file(path);
    file << text;
    if (!file.good()) {
      std::fprintf(stderr, "nccl_peer_bench: cannot write %s\n", path.c_str());
      ok = false;
    }
  }
  return ok;
}

int RunLaunchLatency(const Options& opt, int n) {
  const int iters = opt.iters_given ? opt.iters : 2000;
  std::printf("# 8-byte all_reduce on %d GPUs, %d iters\n", n, iters);
  std::printf(
      "# mode 1: blocking, 0: non-blocking; rs_busbw: reduce_scatter of 2 "
      "GiB, GB/s; rank 0's figures\n");
  std::printf("#%9s %12s %12s %12s %8s %9s\n", "mode", "enqueue(us)",
              "b2b(us/op)", "synced(us)", "polls", "rs_busbw");
  for (int blocking : {1, 0, 1, 0}) {
    World world(opt, n, {});
    if (ncclGetUniqueId(&world.id) != ncclSuccess) {
      std::fprintf(stderr, "nccl_peer_bench: ncclGetUniqueId failed\n");
      return 1;
    }
    std::vector<LatencyResult> results(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        RankRunner(world, r).LaunchLatency(blocking == 1, iters, &results[r]);
      });
    }
    for (auto& t : threads) t.join();
    std::printf("%10d %12.2f %12.2f %12.2f %8.2f %9.1f\n", blocking,
                results[0].launch_us, results[0].wall_us, results[0].sync_us,
                results[0].polls, results[0].rs_busbw);
    std::fflush(stdout);
  }
  return 0;
}

int Main(int argc, char** argv) {
  const ParsedArgs parsed =
      ParseArgs(std::vector<std::string>(argv + 1, argv + argc));
  if (parsed.help) {
    std::fputs(Usage(argv[0]).c_str(), stdout);
    return 0;
  }
  if (!parsed.error.empty()) {
    std::fprintf(stderr, "nccl_peer_bench: %s\n%s", parsed.error.c_str(),
                 Usage(argv[0]).c_str());
    return 2;
  }
  const Options& opt = parsed.options;
  int visible = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&visible); e != cudaSuccess) {
    std::fprintf(stderr, "nccl_peer_bench: no CUDA device: %s\n",
                 cudaGetErrorString(e));
    return 1;
  }
  const int n = opt.ngpus > 0 ? opt.ngpus : visible;
  if (n < 1 || n > visible) {
    std::fprintf(stderr, "nccl_peer_bench: -g %d but %d GPU(s) visible\n", n,
                 visible);
    return 2;
  }
  if (opt.root >= n) {
    std::fprintf(stderr, "nccl_peer_bench: root %d but %d ranks\n", opt.root,
                 n);
    return 2;
  }
  if (opt.launch_latency) return RunLaunchLatency(opt, n);

  std::vector<Op> ops = opt.ops;
  if (ops.empty()) ops.assign(std::begin(kAllOps), std::end(kAllOps));
  if (!CCL_PEER_NCCL_2_28) {
    const bool asked = std::any_of(opt.ops.begin(), opt.ops.end(), [](Op op) {
      return op == Op::kGather || op == Op::kScatter;
    });
    if (asked) {
      std::fprintf(stderr,
                   "nccl_peer_bench: gather and scatter need NCCL >= 2.28\n");
      return 2;
    }
    std::erase_if(
        ops, [](Op op) { return op == Op::kGather || op == Op::kScatter; });
  }

  PrintPreamble(opt, n);
  World world(opt, n, ops);
  if (const ncclResult_t r = ncclGetUniqueId(&world.id); r != ncclSuccess) {
    std::fprintf(stderr, "nccl_peer_bench: ncclGetUniqueId: %s\n",
                 ncclGetErrorString(r));
    return 1;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&world, r] { RankRunner(world, r).Run(); });
  }
  for (auto& t : threads) t.join();

  long long wrong = 0;
  for (const Row& row : world.rows) wrong += row.wrong[0] + row.wrong[1];
  std::printf("#\n# Out of bounds values : %lld %s (all ops)\n", wrong,
              wrong == 0 ? "OK" : "FAILED");
  std::fflush(stdout);
  const bool written = WriteCsv(opt, world.rows);
  return wrong == 0 && written ? 0 : 1;
}

}  // namespace
}  // namespace ccl::peer

int main(int argc, char** argv) { return ccl::peer::Main(argc, argv); }
