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
#include "server/comm/nccl/nccl_poll.h"

namespace ccl {
namespace {

using nccl::Backoff;
using nccl::Clock;
using nccl::CommState;
using nccl::IsError;

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
    // A non-member takes a color of its own, not NCCL_SPLIT_NOCOLOR: in
    // NCCL 2.28 a NOCOLOR split whose rendezvous fails (a peer that never
    // joins, then the parent's abort at the re-form) ends in
    // ncclCommInitRankFunc writing its result through a null communicator,
    // and the worker died of SIGSEGV (GPU failure suite, simulated hosts).
    // Its own color makes it a communicator of one, let go of at once.
    const int color = member ? 0 : 1 + rank_;
    child = SplitComm(control_.comm, color, key,
                      LaneConfig(/*blocking=*/false, /*small=*/true), deadline);
  }
  if (!child.ok()) {
    const absl::Status why(child.status().code(),
                           absl::StrCat(where, ": ", child.status().message()));
    // A split that timed out left the control lane mid-rendezvous with
    // peers that never came: unusable, and the world re-forms. It is only
    // marked broken here; its lanes are aborted with the generation, so
    // that the answer (and its diagnosis) is not held up by the aborts.
    if (absl::IsDeadlineExceeded(child.status())) Poison(why);
    return why;
  }
  if (!member) {
    cudaSetDevice(device_);
    ncclCommAbort(*child);
    return std::unique_ptr<Communicator>();
  }
  return AdoptChild(*child, device_, where, deadline);
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicator::AdoptChild(
    ncclComm_t child, int device, const std::string& where,
    Clock::time_point deadline) {
  int child_rank = -1;
  int child_size = 0;
  if (ncclCommUserRank(child, &child_rank) != ncclSuccess ||
      ncclCommCount(child, &child_size) != ncclSuccess) {
    ncclCommAbort(child);
    return absl::InternalError(
        absl::StrCat(where, ": cannot read the new rank and size"));
  }
  auto made = FromControl(child_rank, child_size, device, child,
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
  for (void* p : retired_device_) cudaFree(p);
  for (void* p : retired_host_) cudaFreeHost(p);
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

void NcclCommunicator::ReturnEvents(cudaEvent_t start, cudaEvent_t stop,
                                    bool completed) {
  if (!completed) {
    ReturnEvent(start);
    ReturnEvent(stop);
    return;
  }
  std::lock_guard<std::mutex> lock(events_mutex_);
  free_events_.push_back(start);
  free_events_.push_back(stop);
}

void NcclCommunicator::SawCompleted(int64_t launch) {
  int64_t seen = completed_through_.load();
  while (seen < launch &&
         !completed_through_.compare_exchange_weak(seen, launch)) {
  }
}

std::string NcclWorkLabel::Text() const {
  if (!op_) return text_;
  return absl::StrCat("nccl ", std::string(OpKindName(kind_)), " seq ", seq_,
                      " at rank ", rank_, "/", size_);
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

void NcclCommunicator::Abort(const absl::Status& why) {
  // A control lane left running past its generation kept a kernel waiting
  // for a peer that was gone or had moved on; the next generation's split
  // then stalled behind it on the device (the GPU failure suite's re-forms
  // failed once each). A replaced communicator therefore lets go of it.
  Poison(why);
  std::lock_guard<std::mutex> lock(comm_mutex_);
  AbortLanesLocked();
  if (!control_released_) {
    cudaSetDevice(device_);
    ncclCommAbort(control_.comm);
    control_released_ = true;
  }
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
  return AdoptChild(*child, device_, where, deadline);
}

}  // namespace ccl
