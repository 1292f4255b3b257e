// Host cost of enqueuing a small NCCL all_reduce, blocking vs non-blocking
// communicators, two GPUs driven by two threads of one process. Answers
// "what does config.blocking = 0 cost per op", which sets the floor of the
// service's small-message latency.
//
//   nccl_launch_latency [iters]
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

#define CHECK_CUDA(x)                                              \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(1);                                                \
    }                                                              \
  } while (0)

// Polls a non-blocking comm until the last call is no longer in progress.
ncclResult_t Settle(ncclComm_t comm, ncclResult_t r, int* polls) {
  while (r == ncclInProgress) {
    ++*polls;
    std::this_thread::yield();
    ncclResult_t async = ncclSuccess;
    ncclResult_t got = ncclCommGetAsyncError(comm, &async);
    r = got != ncclSuccess ? got : async;
  }
  return r;
}

struct Result {
  double launch_us = 0;  // mean host time of one enqueue (settled)
  double wall_us = 0;    // mean wall time per op, back to back, one sync
  double sync_us = 0;    // mean time of one op with a sync after each
  double polls = 0;      // mean ncclInProgress polls per enqueue
  double rs_busbw = 0;   // reduce_scatter of 2 GiB, back to back
};

// mode 1: blocking; 0: non-blocking. Also times a large reduce_scatter, to
// see whether the mode changes the data plane.
void Run(int rank, int mode, ncclUniqueId id, int iters, Result* out) {
  CHECK_CUDA(cudaSetDevice(rank));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = mode == 1 ? 1 : 0;
  ncclComm_t comm = nullptr;
  int polls = 0;
  ncclResult_t r = ncclCommInitRankConfig(&comm, 2, id, rank, &config);
  if (Settle(comm, r, &polls) != ncclSuccess) {
    std::fprintf(stderr, "init failed\n");
    std::exit(1);
  }
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  float* buf;
  CHECK_CUDA(cudaMalloc(&buf, 1024));
  auto op = [&] {
    const ncclResult_t result = Settle(
        comm, ncclAllReduce(buf, buf, 2, ncclFloat, ncclSum, comm, stream),
        &polls);
    if (result != ncclSuccess) {
      std::fprintf(stderr, "all_reduce failed (mode %d): %s\n", mode,
                   ncclGetErrorString(result));
      std::exit(1);
    }
  };
  for (int i = 0; i < 50; ++i) op();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  polls = 0;
  double launch = 0;
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    const auto a = Clock::now();
    op();
    launch +=
        std::chrono::duration<double, std::micro>(Clock::now() - a).count();
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const double wall =
      std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  const auto t1 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    op();
    CHECK_CUDA(cudaStreamSynchronize(stream));
  }
  const double synced =
      std::chrono::duration<double, std::micro>(Clock::now() - t1).count();
  out->launch_us = launch / iters;
  out->wall_us = wall / iters;
  out->sync_us = synced / iters;
  out->polls = static_cast<double>(polls) / iters;
  cudaFree(buf);
  // Data plane: 20 reduce_scatters of 2 GiB (input), timed like nccl-tests.
  const size_t total = size_t{1} << 31;
  float *big_in, *big_out;
  CHECK_CUDA(cudaMalloc(&big_in, total));
  CHECK_CUDA(cudaMalloc(&big_out, total / 2));
  auto rs = [&] {
    const ncclResult_t result =
        Settle(comm,
               ncclReduceScatter(big_in, big_out, total / 8, ncclFloat, ncclSum,
                                 comm, stream),
               &polls);
    if (result != ncclSuccess) std::exit(1);
  };
  for (int i = 0; i < 5; ++i) rs();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const auto t2 = Clock::now();
  for (int i = 0; i < 20; ++i) rs();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  const double rs_us =
      std::chrono::duration<double, std::micro>(Clock::now() - t2).count() / 20;
  out->rs_busbw = static_cast<double>(total) / rs_us / 1e3 * 0.5;
  cudaFree(big_in);
  cudaFree(big_out);
  ncclCommDestroy(comm);
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  std::printf("# 8-byte all_reduce on 2 GPUs, %d iters\n", iters);
  std::printf(
      "# mode 1: blocking, 0: non-blocking; rs_busbw: reduce_scatter "
      "of 2 GiB, GB/s\n");
  std::printf("#%9s %12s %12s %12s %8s %9s\n", "mode", "enqueue(us)",
              "b2b(us/op)", "synced(us)", "polls", "rs_busbw");
  for (int blocking : {1, 0, 1, 0}) {
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    Result results[2];
    std::thread a(Run, 0, blocking, id, iters, &results[0]);
    std::thread b(Run, 1, blocking, id, iters, &results[1]);
    a.join();
    b.join();
    std::printf("%10d %12.2f %12.2f %12.2f %8.2f %9.1f\n", blocking,
                results[0].launch_us, results[0].wall_us, results[0].sync_us,
                results[0].polls, results[0].rs_busbw);
  }
  return 0;
}
