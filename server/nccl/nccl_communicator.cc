#include "server/nccl/nccl_communicator.h"

#include <algorithm>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/element.h"
#include "server/nccl/nccl_host.h"
#include "server/op_fingerprint.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

// Polls an op: first by yielding for up to 10 ms, since a sleep costs at
// least the kernel's timer slack (50 us) and that lateness would land in
// every small op's latency and every benchmark's figure; then with a growing
// sleep (20 us to 1 ms) so that long ops do not burn a core. Runs on
// executor threads, never on a gRPC thread.
class Backoff {
 public:
  void Pause() {
    if (Clock::now() - start_ < std::chrono::milliseconds(10)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds(1000));
  }

 private:
  const Clock::time_point start_ = Clock::now();
  std::chrono::microseconds delay_{20};
};

class NcclWork final : public CommWork {
 public:
  NcclWork(NcclCommunicator* comm, cudaEvent_t start, cudaEvent_t stop,
           std::string what)
      : comm_(comm), start_(start), stop_(stop), what_(std::move(what)) {}
  ~NcclWork() override {
    cudaSetDevice(comm_->device());
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }

  bool IsCompleted() override {
    if (done_) return true;
    cudaSetDevice(comm_->device());
    const cudaError_t query = cudaEventQuery(stop_);
    if (query == cudaSuccess) {
      Finish(absl::OkStatus());
      return true;
    }
    if (query != cudaErrorNotReady) {
      Finish(nccl::CudaErrorStatus(query, "cudaEventQuery(stop)", __FILE__,
                                   __LINE__));
      return true;
    }
    if (absl::Status async = comm_->AsyncError(); !async.ok()) {
      const absl::Status why(async.code(),
                             absl::StrCat(what_, ": ", async.message()));
      comm_->AbortComm(why);
      Finish(why);
      return true;
    }
    return false;
  }

  absl::Status Wait(std::chrono::milliseconds timeout) override {
    const Clock::time_point deadline = Clock::now() + timeout;
    Backoff backoff;
    while (!IsCompleted()) {
      if (Clock::now() >= deadline) {
        const absl::Status why = absl::DeadlineExceededError(
            absl::StrCat(what_, " did not complete within ", timeout.count(),
                         " ms; the NCCL communicator was aborted"));
        comm_->AbortComm(why);
        Finish(why);
        return why;
      }
      backoff.Pause();
    }
    return status_;
  }

  void Abort() override {
    if (done_) return;
    const absl::Status why =
        absl::AbortedError(absl::StrCat(what_, " was aborted"));
    comm_->AbortComm(why);
    Finish(why);
  }

  double DeviceMicros() const override {
    if (!done_ || !status_.ok()) return 0;
    float ms = 0;
    cudaSetDevice(comm_->device());
    if (cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess) return 0;
    return static_cast<double>(ms) * 1000.0;
  }

 private:
  void Finish(absl::Status status) {
    status_ = std::move(status);
    done_ = true;
  }

  NcclCommunicator* const comm_;
  cudaEvent_t start_;
  cudaEvent_t stop_;
  const std::string what_;
  bool done_ = false;
  absl::Status status_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    int rank, int size, int device, const std::string& prefix, KvStore& store,
    std::chrono::milliseconds timeout) {
  const std::string where =
      absl::StrCat("nccl init of rank ", rank, "/", size, " on cuda:", device,
                   " under '", prefix, "'");
  auto annotate = [&](const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
  };
  auto init = [&]() -> absl::StatusOr<std::unique_ptr<NcclCommunicator>> {
    CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    absl::StatusOr<int> ranks_per_root = nccl::RanksPerRootFromEnv();
    if (!ranks_per_root.ok()) return ranks_per_root.status();
    absl::StatusOr<std::vector<ncclUniqueId>> ids = nccl::ExchangeUniqueIds(
        rank, size, *ranks_per_root, prefix, store, timeout,
        []() -> absl::StatusOr<ncclUniqueId> {
          ncclUniqueId id;
          CCL_NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
          return id;
        });
    if (!ids.ok()) return ids.status();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    const Clock::time_point deadline = Clock::now() + timeout;
    // Several ids: each bootstrap root serves one block of ranks, instead
    // of one root accepting a connection from every rank of a large world.
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
    const char* what = ids->size() == 1 ? "ncclCommInitRankConfig"
                                        : "ncclCommInitRankScalable";
    ncclResult_t result =
        ids->size() == 1
            ? ncclCommInitRankConfig(&comm, size, ids->front(), rank, &config)
            : ncclCommInitRankScalable(&comm, size, rank,
                                       static_cast<int>(ids->size()),
                                       ids->data(), &config);
#else
    const char* what = "ncclCommInitRankConfig";
    ncclResult_t result =
        ncclCommInitRankConfig(&comm, size, ids->front(), rank, &config);
#endif
    Backoff backoff;
    while (result == ncclInProgress) {
      if (Clock::now() >= deadline) {
        if (comm != nullptr) ncclCommAbort(comm);
        return absl::DeadlineExceededError(absl::StrCat(
            "not every rank joined within ", timeout.count(), " ms"));
      }
      backoff.Pause();
      ncclResult_t async = ncclSuccess;
      const ncclResult_t got = ncclCommGetAsyncError(comm, &async);
      result = got != ncclSuccess ? got : async;
    }
    if (result != ncclSuccess) {
      absl::Status s = nccl::NcclErrorStatus(result, what, __FILE__, __LINE__,
                                             ncclGetLastError(comm));
      if (comm != nullptr) ncclCommAbort(comm);
      return s;
    }
    return Wrap(rank, size, device, comm);
  };
  auto made = init();
  if (!made.ok()) return annotate(made.status());
  return made;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Wrap(
    int rank, int size, int device, ncclComm_t comm) {
  cudaStream_t stream = nullptr;
  void* barrier = nullptr;
  auto cleanup = [&] {
    if (barrier != nullptr) cudaFree(barrier);
    if (stream != nullptr) cudaStreamDestroy(stream);
    ncclCommAbort(comm);
  };
  // A blocking stream on purpose: it orders after host-side copies and
  // fills on the legacy default stream.
  if (cudaError_t e = cudaStreamCreate(&stream); e != cudaSuccess) {
    cleanup();
    return nccl::CudaErrorStatus(e, "cudaStreamCreate", __FILE__, __LINE__);
  }
  if (cudaError_t e = cudaMalloc(&barrier, 64); e != cudaSuccess) {
    barrier = nullptr;
    cleanup();
    return nccl::CudaErrorStatus(e, "cudaMalloc(barrier)", __FILE__, __LINE__);
  }
  if (cudaError_t e = cudaMemset(barrier, 0, 64); e != cudaSuccess) {
    cleanup();
    return nccl::CudaErrorStatus(e, "cudaMemset(barrier)", __FILE__, __LINE__);
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(rank, size, device, comm, stream, barrier));
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Split(
    int color, int key, std::chrono::milliseconds timeout) {
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const std::string where =
      absl::StrCat("ncclCommSplit of rank ", rank_, "/", size_, " (color ",
                   color, ", key ", key, ")");
  std::lock_guard<std::mutex> lock(comm_mutex_);
  if (aborted_) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": the parent communicator was aborted"));
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // Non-blocking: NCCL's init thread writes the child's handle into the
  // slot after ncclCommSplit returned (seen with NCCL 2.28), and freeing the
  // slot once the split looked complete still corrupted the heap. So the
  // slot is never freed: 8 bytes per split. The split is done once the
  // parent (every rank) and the child (members) are past ncclInProgress.
  auto* slot = new ncclComm_t(nullptr);
  auto child_of = [slot] { return __atomic_load_n(slot, __ATOMIC_ACQUIRE); };
  const bool member = color != NCCL_SPLIT_NOCOLOR;
  const Clock::time_point deadline = Clock::now() + timeout;
  auto state = [](ncclComm_t c) {
    ncclResult_t async = ncclSuccess;
    const ncclResult_t got = ncclCommGetAsyncError(c, &async);
    return got != ncclSuccess ? got : async;
  };
  ncclResult_t result = ncclCommSplit(comm_, color, key, slot, &config);
  Backoff backoff;
  while (result == ncclSuccess || result == ncclInProgress) {
    const ncclResult_t parent = state(comm_);
    ncclComm_t child = child_of();
    const ncclResult_t own =
        !member ? ncclSuccess
                : (child != nullptr ? state(child) : ncclInProgress);
    if (parent != ncclSuccess && parent != ncclInProgress) {
      result = parent;
      break;
    }
    if (own != ncclSuccess && own != ncclInProgress) {
      result = own;
      break;
    }
    if (parent == ncclSuccess && own == ncclSuccess) {
      result = ncclSuccess;
      break;
    }
    if (Clock::now() >= deadline) {
      if (child != nullptr) ncclCommAbort(child);
      absl::Status why = absl::DeadlineExceededError(
          absl::StrCat(where, ": not every rank of the parent joined within ",
                       timeout.count(), " ms; the parent was aborted"));
      // The parent is mid-collective with peers that never came: unusable.
      Poison(why);
      aborted_ = true;
      ncclCommAbort(comm_);
      return why;
    }
    backoff.Pause();
  }
  ncclComm_t child = child_of();
  if (result != ncclSuccess) {
    absl::Status s = nccl::NcclErrorStatus(
        result, "ncclCommSplit", __FILE__, __LINE__,
        ncclGetLastError(child != nullptr ? child : comm_));
    if (child != nullptr) ncclCommAbort(child);
    return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
  }
  if (child == nullptr) {
    if (member) {
      return absl::InternalError(
          absl::StrCat(where, ": NCCL returned no communicator"));
    }
    return std::unique_ptr<NcclCommunicator>();
  }
  int child_rank = -1;
  int child_size = 0;
  if (ncclCommUserRank(child, &child_rank) != ncclSuccess ||
      ncclCommCount(child, &child_size) != ncclSuccess) {
    ncclCommAbort(child);
    return absl::InternalError(
        absl::StrCat(where, ": cannot read the child's rank and size"));
  }
  auto made = Wrap(child_rank, child_size, device_, child);
  if (!made.ok()) {
    return absl::Status(made.status().code(),
                        absl::StrCat(where, ": ", made.status().message()));
  }
  return made;
}

NcclCommunicator::NcclCommunicator(int rank, int size, int device,
                                   ncclComm_t comm, cudaStream_t stream,
                                   void* barrier_buf)
    : rank_(rank),
      size_(size),
      device_(device),
      comm_(comm),
      stream_(stream),
      barrier_buf_(barrier_buf) {}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (!aborted_.exchange(true)) {
      // Abort rather than destroy: destroy waits for peers, which may be
      // gone when a generation replaces this one. Let queued work drain
      // first when the communicator is healthy.
      if (Health().ok()) DrainStream(std::chrono::seconds(10));
      ncclCommAbort(comm_);
    }
  }
  DrainStream(std::chrono::seconds(10));
  cudaStreamDestroy(stream_);
  cudaFree(barrier_buf_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (agree_device_ != nullptr) cudaFree(agree_device_);
  if (agree_host_ != nullptr) cudaFreeHost(agree_host_);
  if (agree_done_ != nullptr) cudaEventDestroy(agree_done_);
}

void NcclCommunicator::DrainStream(std::chrono::milliseconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  Backoff backoff;
  while (cudaStreamQuery(stream_) == cudaErrorNotReady &&
         Clock::now() < deadline) {
    backoff.Pause();
  }
}

absl::Status NcclCommunicator::Supports(OpKind kind, DType dtype,
                                        ReduceOp reduce_op) const {
  auto type = nccl::ToNcclDataType(dtype);
  if (!type.ok()) {
    return absl::UnimplementedError(absl::StrCat(
        std::string(OpKindName(kind)), ": ", type.status().message()));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Health() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return broken_;
}

void NcclCommunicator::Poison(absl::Status why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_.ok()) broken_ = std::move(why);
}

absl::Status NcclCommunicator::AsyncError() {
  if (aborted_) {
    absl::Status health = Health();
    return health.ok() ? absl::AbortedError("the NCCL communicator was aborted")
                       : health;
  }
  // Never block a poller behind a launch (or race an abort): if the comm
  // is busy, its error is simply not known yet.
  std::unique_lock<std::mutex> lock(comm_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || aborted_) return absl::OkStatus();
  ncclResult_t async = ncclSuccess;
  const ncclResult_t got = ncclCommGetAsyncError(comm_, &async);
  const ncclResult_t result = got != ncclSuccess ? got : async;
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  return nccl::NcclErrorStatus(result, "ncclCommGetAsyncError", __FILE__,
                               __LINE__, ncclGetLastError(comm_));
}

void NcclCommunicator::AbortComm(absl::Status why) {
  Poison(why);
  std::lock_guard<std::mutex> lock(comm_mutex_);
  if (aborted_.exchange(true)) return;
  cudaSetDevice(device_);
  ncclCommAbort(comm_);
}

absl::Status NcclCommunicator::Settle(ncclResult_t result, const char* what,
                                      Clock::time_point deadline) {
  Backoff backoff;
  while (result == ncclInProgress) {
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " stayed in progress past the op's timeout"));
    }
    backoff.Pause();
    ncclResult_t async = ncclSuccess;
    const ncclResult_t got = ncclCommGetAsyncError(comm_, &async);
    result = got != ncclSuccess ? got : async;
  }
  if (result == ncclSuccess) return absl::OkStatus();
  return nccl::NcclErrorStatus(result, what, __FILE__, __LINE__,
                               ncclGetLastError(comm_));
}

absl::StatusOr<void*> NcclCommunicator::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    // Ops already enqueued may still use the old buffer.
    CCL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    void* p = nullptr;
    CCL_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    scratch_ = p;
    scratch_bytes_ = bytes;
  }
  return scratch_;
}

// Enqueues `op` on stream_. Caller holds comm_mutex_.
absl::Status NcclCommunicator::Enqueue(const BoundOp& op, ncclDataType_t dtype,
                                       Clock::time_point deadline) {
  const size_t n = static_cast<size_t>(op.count);
  const size_t bytes = n * DTypeSize(op.dtype);
  const size_t world = static_cast<size_t>(size_);
  auto* in_bytes = static_cast<const std::byte*>(op.input);
  auto* out_bytes = static_cast<std::byte*>(op.output);
#define CCL_NCCL_CALL(call)                                            \
  do {                                                                 \
    if (absl::Status _s = Settle((call), #call, deadline); !_s.ok()) { \
      return _s;                                                       \
    }                                                                  \
  } while (0)

  if (op.kind == OpKind::kNop) return absl::OkStatus();
  if (op.kind == OpKind::kBarrier) {
    CCL_NCCL_CALL(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32,
                                ncclSum, comm_, stream_));
    return absl::OkStatus();
  }
  // Empty tensors move nothing; every rank agrees on that without talking.
  if (n == 0) return absl::OkStatus();

  switch (op.kind) {
    case OpKind::kAllReduce:
    case OpKind::kReduce:
    case OpKind::kReduceScatter: {
      ncclRedOp_t red = ncclSum;
      bool premul = false;
      if (op.reduce_op == ReduceOp::kPremulSum) {
        alignas(8) unsigned char scalar[8] = {};
        StoreElement(op.dtype, scalar, 0, op.premul_scale);
        CCL_NCCL_CALL(ncclRedOpCreatePreMulSum(&red, scalar, dtype,
                                               ncclScalarHostImmediate, comm_));
        premul = true;
      } else {
        auto mapped = nccl::ToNcclRedOp(op.reduce_op);
        if (!mapped.ok()) return mapped.status();
        red = *mapped;
      }
      absl::Status status;
      if (op.kind == OpKind::kAllReduce) {
        status = Settle(
            ncclAllReduce(op.input, op.output, n, dtype, red, comm_, stream_),
            "ncclAllReduce", deadline);
      } else if (op.kind == OpKind::kReduce) {
        status = Settle(ncclReduce(op.input, op.output, n, dtype, red, op.root,
                                   comm_, stream_),
                        "ncclReduce", deadline);
      } else {
        status = Settle(ncclReduceScatter(op.input, op.output, n, dtype, red,
                                          comm_, stream_),
                        "ncclReduceScatter", deadline);
      }
      // Allowed right after the last enqueue that uses it.
      if (premul) ncclRedOpDestroy(red, comm_);
      return status;
    }
    case OpKind::kBroadcast:
      CCL_NCCL_CALL(ncclBroadcast(op.input, op.output, n, dtype, op.root, comm_,
                                  stream_));
      return absl::OkStatus();
    case OpKind::kAllGather:
      CCL_NCCL_CALL(
          ncclAllGather(op.input, op.output, n, dtype, comm_, stream_));
      return absl::OkStatus();
    case OpKind::kGather: {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
      CCL_NCCL_CALL(
          ncclGather(op.input, op.output, n, dtype, op.root, comm_, stream_));
#else
      CCL_NCCL_CALL(ncclGroupStart());
      if (rank_ == op.root) {
        for (size_t j = 0; j < world; ++j) {
          if (static_cast<int>(j) == rank_) continue;
          CCL_NCCL_CALL(ncclRecv(out_bytes + j * bytes, n, dtype,
                                 static_cast<int>(j), comm_, stream_));
        }
      } else {
        CCL_NCCL_CALL(ncclSend(op.input, n, dtype, op.root, comm_, stream_));
      }
      CCL_NCCL_CALL(ncclGroupEnd());
      if (rank_ == op.root && in_bytes != out_bytes + rank_ * bytes) {
        CCL_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(out_bytes + rank_ * bytes, op.input, bytes,
                            cudaMemcpyDeviceToDevice, stream_));
      }
#endif
      return absl::OkStatus();
    }
    case OpKind::kScatter: {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
      CCL_NCCL_CALL(
          ncclScatter(op.input, op.output, n, dtype, op.root, comm_, stream_));
#else
      CCL_NCCL_CALL(ncclGroupStart());
      if (rank_ == op.root) {
        for (size_t j = 0; j < world; ++j) {
          if (static_cast<int>(j) == rank_) continue;
          CCL_NCCL_CALL(ncclSend(in_bytes + j * bytes, n, dtype,
                                 static_cast<int>(j), comm_, stream_));
        }
      } else {
        CCL_NCCL_CALL(ncclRecv(op.output, n, dtype, op.root, comm_, stream_));
      }
      CCL_NCCL_CALL(ncclGroupEnd());
      if (rank_ == op.root && out_bytes != in_bytes + rank_ * bytes) {
        CCL_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(op.output, in_bytes + rank_ * bytes, bytes,
                            cudaMemcpyDeviceToDevice, stream_));
      }
#endif
      return absl::OkStatus();
    }
    case OpKind::kAllToAll: {
      // In place goes through a staged copy of the input.
      const void* in = op.input;
      if (op.input == op.output) {
        auto scratch = Scratch(world * bytes);
        if (!scratch.ok()) return scratch.status();
        CCL_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(*scratch, op.input, world * bytes,
                            cudaMemcpyDeviceToDevice, stream_));
        in = *scratch;
      }
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
      CCL_NCCL_CALL(ncclAlltoAll(in, op.output, n, dtype, comm_, stream_));
#else
      CCL_NCCL_CALL(ncclGroupStart());
      for (size_t j = 0; j < world; ++j) {
        CCL_NCCL_CALL(ncclSend(static_cast<const std::byte*>(in) + j * bytes, n,
                               dtype, static_cast<int>(j), comm_, stream_));
        CCL_NCCL_CALL(ncclRecv(out_bytes + j * bytes, n, dtype,
                               static_cast<int>(j), comm_, stream_));
      }
      CCL_NCCL_CALL(ncclGroupEnd());
#endif
      return absl::OkStatus();
    }
    case OpKind::kSend:
      CCL_NCCL_CALL(ncclSend(op.input, n, dtype, op.peer, comm_, stream_));
      return absl::OkStatus();
    case OpKind::kRecv:
      CCL_NCCL_CALL(ncclRecv(op.output, n, dtype, op.peer, comm_, stream_));
      return absl::OkStatus();
    case OpKind::kBarrier:
    case OpKind::kNop:
      break;
  }
#undef CCL_NCCL_CALL
  (void)in_bytes;
  (void)out_bytes;
  (void)world;
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Agree(const BoundOp& op,
                                     Clock::time_point deadline) {
  const bool p2p = op.kind == OpKind::kSend || op.kind == OpKind::kRecv;
  const size_t slots = static_cast<size_t>(size_) + 1;
  constexpr size_t kPrint = sizeof(OpFingerprint);
  // Whether the exchange stalls in its enqueue or on the device, the cause
  // is the same: a peer that never joined it.
  auto never_arrived = [&] {
    return absl::DeadlineExceededError(
        p2p ? absl::StrCat("rank ", op.peer, " posted no matching ",
                           op.kind == OpKind::kSend ? "recv" : "send",
                           " within ", op.timeout.count(),
                           " ms (it may have run a different op at this "
                           "seq, or none); the NCCL communicator was aborted")
            : absl::StrCat("not every rank reached seq ", op.seq, " within ",
                           op.timeout.count(),
                           " ms; the NCCL communicator was aborted"));
  };
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) {
      return absl::FailedPreconditionError(
          "the NCCL communicator was aborted by an earlier error");
    }
    if (agree_device_ == nullptr) {
      CCL_CUDA_RETURN_IF_ERROR(cudaMalloc(&agree_device_, slots * kPrint));
      CCL_CUDA_RETURN_IF_ERROR(cudaMallocHost(&agree_host_, slots * kPrint));
      CCL_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&agree_done_, cudaEventDisableTiming));
    }
    auto* host = static_cast<OpFingerprint*>(agree_host_);
    auto* device = static_cast<std::byte*>(agree_device_);
    host[size_] = FingerprintOf(op, rank_);
    std::byte* mine = device + size_ * kPrint;
    CCL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(mine, &host[size_], kPrint,
                                             cudaMemcpyHostToDevice, stream_));
    absl::Status enqueued;
    if (p2p) {
      ncclResult_t r = ncclGroupStart();
      if (r == ncclSuccess) {
        r = ncclSend(mine, kPrint, ncclUint8, op.peer, comm_, stream_);
      }
      if (r == ncclSuccess || r == ncclInProgress) {
        r = ncclRecv(device, kPrint, ncclUint8, op.peer, comm_, stream_);
      }
      enqueued = Settle(ncclGroupEnd(), "ncclGroupEnd (agreement)", deadline);
      if (enqueued.ok() && r != ncclSuccess && r != ncclInProgress) {
        enqueued =
            nccl::NcclErrorStatus(r, "ncclSend/ncclRecv (agreement)", __FILE__,
                                  __LINE__, ncclGetLastError(comm_));
      }
    } else {
      enqueued =
          Settle(ncclAllGather(mine, device, kPrint, ncclUint8, comm_, stream_),
                 "ncclAllGather (agreement)", deadline);
    }
    if (absl::IsDeadlineExceeded(enqueued)) return never_arrived();
    if (!enqueued.ok()) return enqueued;
    CCL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host, device,
                                             (p2p ? 1 : size_) * kPrint,
                                             cudaMemcpyDeviceToHost, stream_));
    CCL_CUDA_RETURN_IF_ERROR(cudaEventRecord(agree_done_, stream_));
  }
  // Waited for without the lock, so that an abort can interrupt it.
  Backoff backoff;
  while (true) {
    const cudaError_t query = cudaEventQuery(agree_done_);
    if (query == cudaSuccess) break;
    if (query != cudaErrorNotReady) {
      return nccl::CudaErrorStatus(query, "cudaEventQuery(agreement)", __FILE__,
                                   __LINE__);
    }
    if (absl::Status async = AsyncError(); !async.ok()) return async;
    if (Clock::now() >= deadline) {
      absl::Status why = never_arrived();
      AbortComm(why);
      return why;
    }
    backoff.Pause();
  }
  const auto* host = static_cast<const OpFingerprint*>(agree_host_);
  if (p2p) return ComparePointToPoint(op.seq, host[size_], host[0]);
  return CompareCollective(op.seq,
                           std::vector<OpFingerprint>(host, host + size_));
}

absl::StatusOr<std::unique_ptr<CommWork>> NcclCommunicator::Launch(
    const BoundOp& op) {
  if (absl::Status health = Health(); !health.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl communicator is broken by an earlier error: ",
                     health.ToString()));
  }
  if (absl::Status s = Supports(op.kind, op.dtype, op.reduce_op); !s.ok()) {
    return s;
  }
  auto dtype = nccl::ToNcclDataType(op.dtype);
  if (!dtype.ok()) return dtype.status();
  const std::string what =
      absl::StrCat("nccl ", std::string(OpKindName(op.kind)), " seq ", op.seq,
                   " at rank ", rank_, "/", size_);
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const Clock::time_point deadline =
      Clock::now() + std::max(op.timeout, std::chrono::milliseconds(1));
  if (op.agree_first && op.kind != OpKind::kNop &&
      op.kind != OpKind::kBarrier) {
    if (absl::Status agreed = Agree(op, deadline); !agreed.ok()) {
      const absl::Status why(agreed.code(),
                             absl::StrCat(what, ": ", agreed.message()));
      // A mismatch leaves the communicator clean; anything else may have
      // left the exchange half done on some rank.
      if (!absl::IsInvalidArgument(agreed)) AbortComm(why);
      return why;
    }
  }
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  CCL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  if (cudaError_t e = cudaEventCreate(&stop); e != cudaSuccess) {
    cudaEventDestroy(start);
    return nccl::CudaErrorStatus(e, "cudaEventCreate", __FILE__, __LINE__);
  }
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) {
      status = absl::FailedPreconditionError(
          "the NCCL communicator was aborted by an earlier error");
    } else if (cudaError_t e = cudaEventRecord(start, stream_);
               e != cudaSuccess) {
      status = nccl::CudaErrorStatus(e, "cudaEventRecord(start)", __FILE__,
                                     __LINE__);
    } else {
      status = Enqueue(op, *dtype, deadline);
      if (status.ok()) {
        if (cudaError_t e = cudaEventRecord(stop, stream_); e != cudaSuccess) {
          status = nccl::CudaErrorStatus(e, "cudaEventRecord(stop)", __FILE__,
                                         __LINE__);
        }
      }
    }
  }
  if (!status.ok()) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    const absl::Status why(status.code(),
                           absl::StrCat(what, ": ", status.message()));
    // Part of the op may be enqueued and peers may be inside it.
    if (status.code() != absl::StatusCode::kInvalidArgument &&
        status.code() != absl::StatusCode::kUnimplemented &&
        status.code() != absl::StatusCode::kResourceExhausted) {
      AbortComm(why);
    }
    return why;
  }
  return std::unique_ptr<CommWork>(new NcclWork(this, start, stop, what));
}

}  // namespace ccl
