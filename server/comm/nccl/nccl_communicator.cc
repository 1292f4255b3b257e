#include "server/comm/nccl/nccl_communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/element.h"
#include "server/comm/nccl/nccl_host.h"

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

// Polls: first by yielding for up to 10 ms, since a sleep costs at least the
// kernel's timer slack (50 us) and that lateness would land in every small
// op's latency and every benchmark's figure; then with a growing sleep
// (20 us to 1 ms) so that long ops do not burn a core. Runs on executor
// threads, never on a gRPC thread.
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

// A communicator's state: ncclSuccess, ncclInProgress while a non-blocking
// call is under way, or the error NCCL recorded for it.
ncclResult_t CommState(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  const ncclResult_t got = ncclCommGetAsyncError(comm, &async);
  return got != ncclSuccess ? got : async;
}

bool IsError(ncclResult_t result) {
  return result != ncclSuccess && result != ncclInProgress;
}

// Collectives must connect when a lane is made, not at their first use: on
// a blocking communicator a first use would wait on the host for peers that
// may be gone (see the header). Set once, before the first communicator
// reads it; an operator's own setting wins.
void ConnectCollectivesAtInit() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_RUNTIME_CONNECT", "0", 0); });
}

ncclConfig_t LaneConfig(bool blocking, bool small) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = blocking ? 1 : 0;
  if (small) {
    // Control and agreement traffic is a few bytes: one channel is plenty,
    // and every channel costs buffers per peer and algorithm.
    config.minCTAs = 1;
    config.maxCTAs = 1;
  }
  return config;
}

class NcclWork final : public CommWork {
 public:
  NcclWork(NcclCommunicator* comm, cudaEvent_t start, cudaEvent_t stop,
           std::string what)
      : comm_(comm), start_(start), stop_(stop), what_(std::move(what)) {}
  ~NcclWork() override {
    comm_->ReturnEvent(start_);
    comm_->ReturnEvent(stop_);
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
      Finish(cuda::CudaErrorStatus(query, "cudaEventQuery(stop)", __FILE__,
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

// Launches of a graph that captured a batch of ops: the graph is kept until
// the launches are done with it.
struct GraphHolder {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphHolder() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
  }
};

class GraphWork final : public CommWork {
 public:
  GraphWork(std::unique_ptr<CommWork> inner, std::unique_ptr<GraphHolder> graph)
      : inner_(std::move(inner)), graph_(std::move(graph)) {}
  bool IsCompleted() override { return inner_->IsCompleted(); }
  absl::Status Wait(std::chrono::milliseconds timeout) override {
    return inner_->Wait(timeout);
  }
  void Abort() override { inner_->Abort(); }
  double DeviceMicros() const override { return inner_->DeviceMicros(); }

 private:
  std::unique_ptr<CommWork> inner_;
  std::unique_ptr<GraphHolder> graph_;
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
  ConnectCollectivesAtInit();
  const Clock::time_point deadline = Clock::now() + timeout;
  auto init = [&]() -> absl::StatusOr<ncclComm_t> {
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
    ncclConfig_t config = LaneConfig(/*blocking=*/false, /*small=*/true);
    ncclComm_t comm = nullptr;
    // Several ids: each bootstrap root serves one block of ranks, instead
    // of one root accepting a connection from every rank of a large world.
    const char* what = ids->size() == 1 ? "ncclCommInitRankConfig"
                                        : "ncclCommInitRankScalable";
    ncclResult_t result =
        ids->size() == 1
            ? ncclCommInitRankConfig(&comm, size, ids->front(), rank, &config)
            : ncclCommInitRankScalable(&comm, size, rank,
                                       static_cast<int>(ids->size()),
                                       ids->data(), &config);
    Backoff backoff;
    while (result == ncclInProgress) {
      if (Clock::now() >= deadline) {
        if (comm != nullptr) ncclCommAbort(comm);
        return absl::DeadlineExceededError(absl::StrCat(
            "not every rank joined within ", timeout.count(), " ms"));
      }
      backoff.Pause();
      result = CommState(comm);
    }
    if (result != ncclSuccess) {
      absl::Status s = nccl::NcclErrorStatus(result, what, __FILE__, __LINE__,
                                             ncclGetLastError(comm));
      if (comm != nullptr) ncclCommAbort(comm);
      return s;
    }
    return comm;
  };
  auto control = init();
  if (!control.ok()) return annotate(control.status());
  auto made = FromControl(rank, size, device, *control,
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - Clock::now()));
  if (!made.ok()) return annotate(made.status());
  return made;
}

absl::StatusOr<ncclComm_t> NcclCommunicator::SplitComm(
    ncclComm_t parent, int color, int key, ncclConfig_t config,
    Clock::time_point deadline) {
  return ChildComm(
      parent, "ncclCommSplit",
      [&](ncclComm_t* slot) {
        return ncclCommSplit(parent, color, key, slot, &config);
      },
      color == NCCL_SPLIT_NOCOLOR, deadline);
}

absl::StatusOr<ncclComm_t> NcclCommunicator::ChildComm(
    ncclComm_t parent, const char* what,
    const std::function<ncclResult_t(ncclComm_t*)>& make, bool none_expected,
    Clock::time_point deadline) {
  // The parent is non-blocking, so the call runs on NCCL's own thread and
  // ends when the parent's state leaves ncclInProgress. NCCL writes the
  // child's handle into the slot from that thread, after the call returned
  // (seen with 2.28), and freeing the slot once the split looked complete
  // still corrupted the heap; so the slot is never freed: 8 bytes a child.
  auto* slot = new ncclComm_t(nullptr);
  auto child_of = [slot] { return __atomic_load_n(slot, __ATOMIC_ACQUIRE); };
  ncclResult_t result = make(slot);
  Backoff backoff;
  while (result == ncclSuccess || result == ncclInProgress) {
    const ncclResult_t state = CommState(parent);
    if (IsError(state)) {
      result = state;
      break;
    }
    if (state == ncclSuccess) {
      result = ncclSuccess;
      break;
    }
    if (Clock::now() >= deadline) {
      if (ncclComm_t child = child_of(); child != nullptr) {
        ncclCommAbort(child);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("not every rank of the parent communicator joined ",
                       what, " in time"));
    }
    backoff.Pause();
  }
  ncclComm_t child = child_of();
  if (result == ncclSuccess && child != nullptr) result = CommState(child);
  if (result != ncclSuccess) {
    absl::Status s =
        nccl::NcclErrorStatus(result, what, __FILE__, __LINE__,
                              ncclGetLastError(child ? child : parent));
    if (child != nullptr) ncclCommAbort(child);
    return s;
  }
  if (child == nullptr && !none_expected) {
    return absl::InternalError(absl::StrCat(what, " returned no communicator"));
  }
  return child;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::FromControl(
    int rank, int size, int device, ncclComm_t control,
    std::chrono::milliseconds timeout) {
  const Clock::time_point deadline =
      Clock::now() + std::max(timeout, std::chrono::milliseconds(1));
  Lane lanes[3];
  lanes[0].comm = control;
  void* barrier = nullptr;
  auto cleanup = [&] {
    for (Lane& lane : lanes) {
      if (lane.stream != nullptr) cudaStreamDestroy(lane.stream);
    }
    if (barrier != nullptr) cudaFree(barrier);
    // Children before their parent.
    for (int i = 2; i >= 0; --i) {
      if (lanes[i].comm != nullptr) ncclCommAbort(lanes[i].comm);
    }
  };
  auto fail = [&](absl::Status s) {
    cleanup();
    return s;
  };
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return fail(cuda::CudaErrorStatus(e, "cudaSetDevice", __FILE__, __LINE__));
  }
  auto data =
      SplitComm(control, 0, rank,
                LaneConfig(/*blocking=*/true, /*small=*/false), deadline);
  if (!data.ok()) {
    return fail(absl::Status(
        data.status().code(),
        absl::StrCat("making the data lane: ", data.status().message())));
  }
  lanes[1].comm = *data;
  auto agree =
      SplitComm(control, 0, rank, LaneConfig(/*blocking=*/true, /*small=*/true),
                deadline);
  if (!agree.ok()) {
    return fail(absl::Status(
        agree.status().code(),
        absl::StrCat("making the agreement lane: ", agree.status().message())));
  }
  lanes[2].comm = *agree;
  // Streams that do not synchronise with the legacy default stream: the
  // host-side copies and fills there are complete before they return (and
  // an op waits for host accesses of its tensors), and a CUDA graph can only
  // be captured on a stream that other threads' legacy-stream work cannot
  // join.
  for (Lane& lane : lanes) {
    if (cudaError_t e =
            cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking);
        e != cudaSuccess) {
      lane.stream = nullptr;
      return fail(
          cuda::CudaErrorStatus(e, "cudaStreamCreate", __FILE__, __LINE__));
    }
  }
  if (cudaError_t e = cudaMalloc(&barrier, 64); e != cudaSuccess) {
    barrier = nullptr;
    return fail(
        cuda::CudaErrorStatus(e, "cudaMalloc(barrier)", __FILE__, __LINE__));
  }
  if (cudaError_t e = cudaMemset(barrier, 0, 64); e != cudaSuccess) {
    return fail(
        cuda::CudaErrorStatus(e, "cudaMemset(barrier)", __FILE__, __LINE__));
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(
      rank, size, device, lanes[0], lanes[1], lanes[2], barrier));
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Split(
    const std::vector<int>& members, const std::string& /*name*/,
    std::chrono::milliseconds timeout) {
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  auto it = std::find(members.begin(), members.end(), rank_);
  const bool member = it != members.end();
  const int key = member ? static_cast<int>(it - members.begin()) : 0;
  const std::string where = absl::StrCat(
      "ncclCommSplit of rank ", rank_, "/", size_, " (",
      member ? absl::StrCat("group rank ", key) : "not a member", ")");
  const Clock::time_point deadline = Clock::now() + timeout;
  absl::StatusOr<ncclComm_t> child;
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": the parent communicator was aborted"));
    }
    child = SplitComm(control_.comm, member ? 0 : NCCL_SPLIT_NOCOLOR, key,
                      LaneConfig(/*blocking=*/false, /*small=*/true), deadline);
  }
  if (!child.ok()) {
    const absl::Status why(child.status().code(),
                           absl::StrCat(where, ": ", child.status().message()));
    // A split that timed out left the parent mid-collective with peers that
    // never came: unusable.
    if (absl::IsDeadlineExceeded(child.status())) AbortComm(why);
    return why;
  }
  if (*child == nullptr) return std::unique_ptr<Communicator>();
  int child_rank = -1;
  int child_size = 0;
  if (ncclCommUserRank(*child, &child_rank) != ncclSuccess ||
      ncclCommCount(*child, &child_size) != ncclSuccess) {
    ncclCommAbort(*child);
    return absl::InternalError(
        absl::StrCat(where, ": cannot read the child's rank and size"));
  }
  auto made = FromControl(child_rank, child_size, device_, *child,
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - Clock::now()));
  if (!made.ok()) {
    return absl::Status(made.status().code(),
                        absl::StrCat(where, ": ", made.status().message()));
  }
  return std::unique_ptr<Communicator>(*std::move(made));
}

NcclCommunicator::NcclCommunicator(int rank, int size, int device, Lane control,
                                   Lane data, Lane agree, void* barrier_buf)
    : rank_(rank),
      size_(size),
      device_(device),
      control_(control),
      data_(data),
      agree_(agree),
      barrier_buf_(barrier_buf) {}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    // Abort rather than destroy: destroy waits for peers, which may be gone
    // when a generation replaces this one. Let queued work drain first when
    // the communicator is healthy.
    if (!aborted_ && Health().ok()) DrainStream(std::chrono::seconds(10));
    AbortLanesLocked();
    if (!control_released_) ncclCommAbort(control_.comm);
    control_released_ = true;
  }
  DrainStream(std::chrono::seconds(10));
  for (Lane* lane : {&control_, &data_, &agree_}) {
    cudaStreamDestroy(lane->stream);
  }
  cudaFree(barrier_buf_);
  if (scratch_ != nullptr) cudaFree(scratch_);
  if (exchange_device_ != nullptr) cudaFree(exchange_device_);
  if (exchange_host_ != nullptr) cudaFreeHost(exchange_host_);
  if (exchange_done_ != nullptr) cudaEventDestroy(exchange_done_);
  std::lock_guard<std::mutex> lock(events_mutex_);
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
}

void NcclCommunicator::DrainStream(std::chrono::milliseconds limit) {
  const Clock::time_point deadline = Clock::now() + limit;
  Backoff backoff;
  while (cudaStreamQuery(data_.stream) == cudaErrorNotReady &&
         Clock::now() < deadline) {
    backoff.Pause();
  }
}

absl::StatusOr<cudaEvent_t> NcclCommunicator::TakeEvent() {
  {
    std::lock_guard<std::mutex> lock(events_mutex_);
    if (!free_events_.empty()) {
      cudaEvent_t event = free_events_.back();
      free_events_.pop_back();
      return event;
    }
  }
  cudaEvent_t event = nullptr;
  CCL_CUDA_RETURN_IF_ERROR(cudaEventCreate(&event));
  return event;
}

void NcclCommunicator::ReturnEvent(cudaEvent_t event) {
  // A handle may outlive an op that never completed (an abort): its events
  // may still be pending on a dead stream, so they are destroyed instead of
  // reused.
  cudaSetDevice(device_);
  if (cudaEventQuery(event) != cudaSuccess) {
    cudaEventDestroy(event);
    return;
  }
  std::lock_guard<std::mutex> lock(events_mutex_);
  free_events_.push_back(event);
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
  for (const Lane* lane : {&data_, &agree_, &control_}) {
    const ncclResult_t state = CommState(lane->comm);
    if (IsError(state)) {
      return nccl::NcclErrorStatus(state, "ncclCommGetAsyncError", __FILE__,
                                   __LINE__, ncclGetLastError(lane->comm));
    }
  }
  return absl::OkStatus();
}

// The lanes with the user's work go; the control lane stays until this
// communicator does, so that the survivors of a lost rank can shrink it
// (Shrink) rather than build a world from nothing. Nothing of the user's
// runs on it, and NCCL_SHRINK_ABORT ends what may still wait there.
void NcclCommunicator::AbortComm(absl::Status why) {
  Poison(why);
  std::lock_guard<std::mutex> lock(comm_mutex_);
  AbortLanesLocked();
}

void NcclCommunicator::AbortLanesLocked() {
  if (aborted_.exchange(true)) return;
  cudaSetDevice(device_);
  ncclCommAbort(agree_.comm);
  ncclCommAbort(data_.comm);
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::Shrink(
    const std::vector<int>& excluded, std::chrono::milliseconds timeout) {
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const std::string where =
      absl::StrCat("ncclCommShrink of rank ", rank_, "/", size_, " without ",
                   excluded.size(), " rank(s)");
  const Clock::time_point deadline = Clock::now() + timeout;
  absl::StatusOr<ncclComm_t> child;
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (control_released_) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": the control communicator is gone"));
    }
    Poison(absl::AbortedError("the world shrank; this communicator is done"));
    AbortLanesLocked();
    std::vector<int> ranks = excluded;
    ncclConfig_t config = LaneConfig(/*blocking=*/false, /*small=*/true);
    child = ChildComm(
        control_.comm, "ncclCommShrink",
        [&](ncclComm_t* slot) {
          return ncclCommShrink(control_.comm, ranks.data(),
                                static_cast<int>(ranks.size()), slot, &config,
                                NCCL_SHRINK_ABORT);
        },
        /*none_expected=*/false, deadline);
    // The parent is spent either way: its survivors live on in the child.
    ncclCommAbort(control_.comm);
    control_released_ = true;
  }
  if (!child.ok()) {
    return absl::Status(child.status().code(),
                        absl::StrCat(where, ": ", child.status().message()));
  }
  int child_rank = -1;
  int child_size = 0;
  if (ncclCommUserRank(*child, &child_rank) != ncclSuccess ||
      ncclCommCount(*child, &child_size) != ncclSuccess) {
    ncclCommAbort(*child);
    return absl::InternalError(
        absl::StrCat(where, ": cannot read the new rank and size"));
  }
  auto made = FromControl(child_rank, child_size, device_, *child,
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              deadline - Clock::now()));
  if (!made.ok()) {
    return absl::Status(made.status().code(),
                        absl::StrCat(where, ": ", made.status().message()));
  }
  return std::unique_ptr<Communicator>(*std::move(made));
}

absl::StatusOr<void*> NcclCommunicator::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    // Ops already enqueued may still use the old buffer.
    CCL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(data_.stream));
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

// Enqueues `op` on the data lane, a blocking communicator: every call
// returns once the work is on the stream. Caller holds comm_mutex_.
absl::Status NcclCommunicator::Enqueue(const BoundOp& op,
                                       ncclDataType_t dtype) {
  const size_t n = static_cast<size_t>(op.count);
  const size_t bytes = n * DTypeSize(op.dtype);
  const size_t world = static_cast<size_t>(size_);
  ncclComm_t comm = data_.comm;
  cudaStream_t stream = data_.stream;
#define CCL_NCCL_CALL(call)                                       \
  do {                                                            \
    if (ncclResult_t _r = (call); _r != ncclSuccess) {            \
      return nccl::NcclErrorStatus(_r, #call, __FILE__, __LINE__, \
                                   ncclGetLastError(comm));       \
    }                                                             \
  } while (0)

  if (op.kind == OpKind::kNop) return absl::OkStatus();
  if (op.kind == OpKind::kBarrier) {
    CCL_NCCL_CALL(ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32,
                                ncclSum, comm, stream));
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
                                               ncclScalarHostImmediate, comm));
        premul = true;
      } else {
        auto mapped = nccl::ToNcclRedOp(op.reduce_op);
        if (!mapped.ok()) return mapped.status();
        red = *mapped;
      }
      ncclResult_t r;
      const char* call;
      if (op.kind == OpKind::kAllReduce) {
        r = ncclAllReduce(op.input, op.output, n, dtype, red, comm, stream);
        call = "ncclAllReduce";
      } else if (op.kind == OpKind::kReduce) {
        r = ncclReduce(op.input, op.output, n, dtype, red, op.root, comm,
                       stream);
        call = "ncclReduce";
      } else {
        r = ncclReduceScatter(op.input, op.output, n, dtype, red, comm, stream);
        call = "ncclReduceScatter";
      }
      // Allowed right after the last enqueue that uses it.
      if (premul) ncclRedOpDestroy(red, comm);
      if (r != ncclSuccess) {
        return nccl::NcclErrorStatus(r, call, __FILE__, __LINE__,
                                     ncclGetLastError(comm));
      }
      return absl::OkStatus();
    }
    case OpKind::kBroadcast:
      CCL_NCCL_CALL(
          ncclBroadcast(op.input, op.output, n, dtype, op.root, comm, stream));
      return absl::OkStatus();
    case OpKind::kAllGather:
      CCL_NCCL_CALL(ncclAllGather(op.input, op.output, n, dtype, comm, stream));
      return absl::OkStatus();
    case OpKind::kGather:
      CCL_NCCL_CALL(
          ncclGather(op.input, op.output, n, dtype, op.root, comm, stream));
      return absl::OkStatus();
    case OpKind::kScatter:
      CCL_NCCL_CALL(
          ncclScatter(op.input, op.output, n, dtype, op.root, comm, stream));
      return absl::OkStatus();
    case OpKind::kAllToAll: {
      // In place goes through a staged copy of the input.
      const void* in = op.input;
      if (op.input == op.output) {
        auto scratch = Scratch(world * bytes);
        if (!scratch.ok()) return scratch.status();
        CCL_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(*scratch, op.input, world * bytes,
                            cudaMemcpyDeviceToDevice, stream));
        in = *scratch;
      }
      CCL_NCCL_CALL(ncclAlltoAll(in, op.output, n, dtype, comm, stream));
      return absl::OkStatus();
    }
    case OpKind::kSend:
      CCL_NCCL_CALL(ncclSend(op.input, n, dtype, op.peer, comm, stream));
      return absl::OkStatus();
    case OpKind::kRecv:
      CCL_NCCL_CALL(ncclRecv(op.output, n, dtype, op.peer, comm, stream));
      return absl::OkStatus();
    case OpKind::kBarrier:
    case OpKind::kNop:
      break;
  }
#undef CCL_NCCL_CALL
  return absl::OkStatus();
}

absl::Status NcclCommunicator::ExchangeOn(Lane& lane, bool p2p, int peer,
                                          const void* mine, void* out,
                                          size_t bytes,
                                          Clock::time_point deadline) {
  const size_t out_bytes = p2p ? bytes : bytes * static_cast<size_t>(size_);
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) {
      return absl::FailedPreconditionError(
          "the NCCL communicator was aborted by an earlier error");
    }
    CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    // Device: [everyone's (or the peer's) | mine]; host (pinned): the same.
    const size_t need = out_bytes + bytes;
    if (need > exchange_bytes_) {
      if (exchange_device_ != nullptr) {
        CCL_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
        cudaFree(exchange_device_);
        cudaFreeHost(exchange_host_);
        exchange_device_ = nullptr;
        exchange_host_ = nullptr;
        exchange_bytes_ = 0;
      }
      CCL_CUDA_RETURN_IF_ERROR(cudaMalloc(&exchange_device_, need));
      CCL_CUDA_RETURN_IF_ERROR(cudaMallocHost(&exchange_host_, need));
      exchange_bytes_ = need;
      if (exchange_done_ == nullptr) {
        CCL_CUDA_RETURN_IF_ERROR(
            cudaEventCreateWithFlags(&exchange_done_, cudaEventDisableTiming));
      }
    }
    auto* host = static_cast<std::byte*>(exchange_host_);
    auto* device = static_cast<std::byte*>(exchange_device_);
    std::memcpy(host + out_bytes, mine, bytes);
    CCL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(device + out_bytes, host + out_bytes, bytes,
                        cudaMemcpyHostToDevice, lane.stream));
    ncclResult_t r;
    if (p2p) {
      // The control lane is non-blocking: a first exchange with this peer
      // connects them on NCCL's thread, which the loop below waits out.
      r = ncclGroupStart();
      if (r == ncclSuccess) {
        r = ncclSend(device + out_bytes, bytes, ncclUint8, peer, lane.comm,
                     lane.stream);
      }
      if (r == ncclSuccess || r == ncclInProgress) {
        r = ncclRecv(device, bytes, ncclUint8, peer, lane.comm, lane.stream);
      }
      const ncclResult_t end = ncclGroupEnd();
      if (r == ncclSuccess || r == ncclInProgress) r = end;
      Backoff backoff;
      while (r == ncclInProgress && Clock::now() < deadline) {
        backoff.Pause();
        r = CommState(lane.comm);
      }
    } else {
      r = ncclAllGather(device + out_bytes, device, bytes, ncclUint8, lane.comm,
                        lane.stream);
    }
    if (r == ncclInProgress) {
      return absl::DeadlineExceededError("the exchange's enqueue timed out");
    }
    if (r != ncclSuccess) {
      return nccl::NcclErrorStatus(
          r, p2p ? "ncclSend/ncclRecv (exchange)" : "ncclAllGather (exchange)",
          __FILE__, __LINE__, ncclGetLastError(lane.comm));
    }
    CCL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        host, device, out_bytes, cudaMemcpyDeviceToHost, lane.stream));
    CCL_CUDA_RETURN_IF_ERROR(cudaEventRecord(exchange_done_, lane.stream));
  }
  // Waited for without the lock, so that an abort can interrupt it.
  Backoff backoff;
  while (true) {
    const cudaError_t query = cudaEventQuery(exchange_done_);
    if (query == cudaSuccess) break;
    if (query != cudaErrorNotReady) {
      return cuda::CudaErrorStatus(query, "cudaEventQuery(exchange)", __FILE__,
                                   __LINE__);
    }
    if (absl::Status async = AsyncError(); !async.ok()) return async;
    if (Clock::now() >= deadline) {
      return absl::DeadlineExceededError("the exchange did not complete");
    }
    backoff.Pause();
  }
  std::memcpy(out, exchange_host_, out_bytes);
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AllGatherHost(const void* mine, void* all,
                                             size_t bytes,
                                             Clock::time_point deadline) {
  absl::Status s =
      ExchangeOn(agree_, /*p2p=*/false, 0, mine, all, bytes, deadline);
  // A stalled exchange may be half done on some rank.
  if (!s.ok()) AbortComm(s);
  return s;
}

absl::Status NcclCommunicator::ExchangeHost(int peer, const void* mine,
                                            void* theirs, size_t bytes,
                                            Clock::time_point deadline) {
  absl::Status s =
      ExchangeOn(control_, /*p2p=*/true, peer, mine, theirs, bytes, deadline);
  if (!s.ok()) {
    AbortComm(s);
    return s;
  }
  std::lock_guard<std::mutex> lock(comm_mutex_);
  reached_peers_.insert(peer);
  return absl::OkStatus();
}

absl::Status NcclCommunicator::ReachPeer(int peer, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (reached_peers_.count(peer) > 0) return absl::OkStatus();
  }
  const int32_t token = rank_;
  int32_t theirs = -1;
  absl::Status s = ExchangeHost(peer, &token, &theirs, sizeof(token), deadline);
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "rank ", peer,
        " did not take part in a send/recv with this rank in time (it may "
        "have run a different op at this seq, or none); the NCCL "
        "communicator was aborted"));
  }
  return s;
}

absl::StatusOr<std::unique_ptr<CommWork>> NcclCommunicator::Handle(
    const std::string& what, const std::function<absl::Status()>& enqueue) {
  auto start = TakeEvent();
  if (!start.ok()) return start.status();
  auto stop = TakeEvent();
  if (!stop.ok()) {
    ReturnEvent(*start);
    return stop.status();
  }
  absl::Status status;
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) {
      status = absl::FailedPreconditionError(
          "the NCCL communicator was aborted by an earlier error");
    } else if (cudaError_t e = cudaEventRecord(*start, data_.stream);
               e != cudaSuccess) {
      status = cuda::CudaErrorStatus(e, "cudaEventRecord(start)", __FILE__,
                                     __LINE__);
    } else {
      status = enqueue();
      if (status.ok()) {
        if (cudaError_t e = cudaEventRecord(*stop, data_.stream);
            e != cudaSuccess) {
          status = cuda::CudaErrorStatus(e, "cudaEventRecord(stop)", __FILE__,
                                         __LINE__);
        }
      }
    }
  }
  if (!status.ok()) {
    ReturnEvent(*start);
    ReturnEvent(*stop);
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
  return std::unique_ptr<CommWork>(new NcclWork(this, *start, *stop, what));
}

absl::StatusOr<std::unique_ptr<CommWork>> NcclCommunicator::Launch(
    const BoundOp& op) {
  if (absl::Status health = Health(); !health.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl communicator is broken by an earlier error: ",
                     health.ToString()));
  }
  auto dtype = nccl::ToNcclDataType(op.dtype);
  if (!dtype.ok()) return dtype.status();
  const std::string what =
      absl::StrCat("nccl ", std::string(OpKindName(op.kind)), " seq ", op.seq,
                   " at rank ", rank_, "/", size_);
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  if ((op.kind == OpKind::kSend || op.kind == OpKind::kRecv) && op.count > 0) {
    const Clock::time_point deadline =
        Clock::now() + std::max(op.timeout, std::chrono::milliseconds(1));
    if (absl::Status s = ReachPeer(op.peer, deadline); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
  }
  return Handle(what, [&] { return Enqueue(op, *dtype); });
}

absl::StatusOr<std::unique_ptr<CommWork>> NcclCommunicator::LaunchBatch(
    const std::vector<BoundOp>& ops, const BatchOptions& options) {
  // Without options the ops go on the stream back to back between one pair
  // of events: per op only its NCCL call, as nccl-tests times them.
  if (absl::Status health = Health(); !health.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl communicator is broken by an earlier error: ",
                     health.ToString()));
  }
  if (ops.empty()) {
    return absl::InvalidArgumentError("an empty batch has nothing to launch");
  }
  std::vector<ncclDataType_t> dtypes;
  for (const BoundOp& op : ops) {
    auto dtype = nccl::ToNcclDataType(op.dtype);
    if (!dtype.ok()) return dtype.status();
    dtypes.push_back(*dtype);
  }
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const Clock::time_point deadline =
      Clock::now() +
      std::max(ops.front().timeout, std::chrono::milliseconds(1));
  for (const BoundOp& op : ops) {
    if ((op.kind == OpKind::kSend || op.kind == OpKind::kRecv) &&
        op.count > 0) {
      if (absl::Status s = ReachPeer(op.peer, deadline); !s.ok()) return s;
    }
  }
  const std::string what =
      absl::StrCat("nccl batch of ", ops.size(), " ops from seq ",
                   ops.front().seq, " at rank ", rank_, "/", size_);
  auto enqueue_all = [&]() -> absl::Status {
    if (options.aggregate) {
      if (ncclResult_t r = ncclGroupStart(); r != ncclSuccess) {
        return nccl::NcclErrorStatus(r, "ncclGroupStart", __FILE__, __LINE__,
                                     nullptr);
      }
    }
    absl::Status status;
    for (size_t i = 0; i < ops.size() && status.ok(); ++i) {
      status = Enqueue(ops[i], dtypes[i]);
    }
    if (options.aggregate) {
      const ncclResult_t r = ncclGroupEnd();
      if (status.ok() && r != ncclSuccess) {
        status = nccl::NcclErrorStatus(r, "ncclGroupEnd", __FILE__, __LINE__,
                                       ncclGetLastError(data_.comm));
      }
    }
    return status;
  };
  if (options.graph_launches <= 0) return Handle(what, enqueue_all);

  // Captured once, then launched `graph_launches` times between the
  // handle's events, as nccl-tests' -G does.
  auto graph = std::make_unique<GraphHolder>();
  absl::Status captured;
  {
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (aborted_) {
      return absl::FailedPreconditionError(
          "the NCCL communicator was aborted by an earlier error");
    }
    CCL_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(data_.stream, cudaStreamCaptureModeThreadLocal));
    captured = enqueue_all();
    const cudaError_t end = cudaStreamEndCapture(data_.stream, &graph->graph);
    if (captured.ok() && end != cudaSuccess) {
      captured = cuda::CudaErrorStatus(end, "cudaStreamEndCapture", __FILE__,
                                       __LINE__);
    }
    if (captured.ok()) {
      if (cudaError_t e = cudaGraphInstantiate(&graph->exec, graph->graph, 0);
          e != cudaSuccess) {
        captured = cuda::CudaErrorStatus(e, "cudaGraphInstantiate", __FILE__,
                                         __LINE__);
      }
    }
  }
  if (!captured.ok()) {
    return absl::Status(
        captured.code(),
        absl::StrCat(what, ": capturing a CUDA graph: ", captured.message()));
  }
  cudaGraphExec_t exec = graph->exec;
  auto launched = Handle(what, [&]() -> absl::Status {
    for (int i = 0; i < options.graph_launches; ++i) {
      CCL_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec, data_.stream));
    }
    return absl::OkStatus();
  });
  if (!launched.ok()) return launched.status();
  return std::unique_ptr<CommWork>(
      new GraphWork(*std::move(launched), std::move(graph)));
}

}  // namespace ccl
