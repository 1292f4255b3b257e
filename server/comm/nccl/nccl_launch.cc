// NcclCommunicator's launches: ops on the data lane, host exchanges on the
// control and agreement lanes, batches and CUDA graphs, and the CommWork
// that polls them. Its lifecycle (lanes, split, shrink, abort) is in
// nccl_communicator.cc.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <span>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/element.h"
#include "common/status_macros.h"
#include "server/comm/nccl/nccl_communicator.h"
#include "server/comm/nccl/nccl_host.h"
#include "server/comm/nccl/nccl_poll.h"

namespace ccl {
namespace {

using nccl::Backoff;
using nccl::Clock;

class NcclWork final : public CommWork {
 public:
  // `launch`: its number on the data stream (CompletedThrough).
  NcclWork(NcclCommunicator* comm, cudaEvent_t start, cudaEvent_t stop,
           int64_t launch, NcclWorkLabel what)
      : comm_(comm),
        start_(start),
        stop_(stop),
        launch_(launch),
        what_(std::move(what)) {}
  ~NcclWork() override {
    // Done and OK only once the stop event was seen complete (IsCompleted).
    comm_->ReturnEvents(start_, stop_, done_ && status_.ok());
  }

  bool IsCompleted() override {
    if (done_) return true;
    if (launch_ <= comm_->CompletedThrough()) {
      Finish(absl::OkStatus());
      return true;
    }
    cudaSetDevice(comm_->device());
    const cudaError_t query = cudaEventQuery(stop_);
    if (query == cudaSuccess) {
      comm_->SawCompleted(launch_);
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
                             absl::StrCat(what_.Text(), ": ", async.message()));
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
        const absl::Status why = absl::DeadlineExceededError(absl::StrCat(
            what_.Text(), " did not complete within ", timeout.count(),
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
        absl::AbortedError(absl::StrCat(what_.Text(), " was aborted"));
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
  const int64_t launch_;
  const NcclWorkLabel what_;
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

absl::StatusOr<void*> NcclCommunicator::Scratch(size_t bytes) {
  if (bytes > scratch_bytes_) {
    // Ops already enqueued may still use the old buffer; it is retired, not
    // freed after a stream synchronize (see retired_device_). A sweep that
    // grows it keeps its earlier sizes until the communicator goes.
    void* p = nullptr;
    CCL_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    if (scratch_ != nullptr) retired_device_.push_back(scratch_);
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
  // Where this exchange's result lands, read once it completed.
  const void* result = nullptr;
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
      // The old pair may still be in use on a lane (an exchange that timed
      // out stays on the control lane until it is aborted); a device-wide
      // synchronize here waited for every kernel on the GPU, a stuck one
      // included, with comm_mutex_ held. They are retired instead (a few
      // hundred bytes; see retired_device_).
      void* device = nullptr;
      void* host = nullptr;
      CCL_CUDA_RETURN_IF_ERROR(cudaMalloc(&device, need));
      if (cudaError_t e = cudaMallocHost(&host, need); e != cudaSuccess) {
        retired_device_.push_back(device);  // cudaFree would synchronize
        return cuda::CudaErrorStatus(e, "cudaMallocHost(exchange)", __FILE__,
                                     __LINE__);
      }
      if (exchange_device_ != nullptr) {
        retired_device_.push_back(exchange_device_);
        retired_host_.push_back(exchange_host_);
      }
      exchange_device_ = device;
      exchange_host_ = host;
      exchange_bytes_ = need;
      if (exchange_done_ == nullptr) {
        CCL_CUDA_RETURN_IF_ERROR(
            cudaEventCreateWithFlags(&exchange_done_, cudaEventDisableTiming));
      }
    }
    auto* host = static_cast<std::byte*>(exchange_host_);
    auto* device = static_cast<std::byte*>(exchange_device_);
    result = host;
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
        r = nccl::CommState(lane.comm);
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
  std::memcpy(out, result, out_bytes);
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
        " did not take part in this op's exchange with this rank in time "
        "(it may have run a different op at this seq, or none, or be gone); "
        "the NCCL communicator was aborted"));
  }
  return s;
}

absl::Status NcclCommunicator::ReachPeersOf(std::span<const BoundOp> ops,
                                            Clock::time_point deadline) {
  std::set<int> peers;
  for (const BoundOp& op : ops) {
    if (op.count == 0) continue;
    switch (op.kind) {
      case OpKind::kSend:
      case OpKind::kRecv:
        peers.insert(op.peer);
        break;
      case OpKind::kGather:
      case OpKind::kScatter:
        if (rank_ != op.root) {
          peers.insert(op.root);
          break;
        }
        [[fallthrough]];
      case OpKind::kAllToAll:
        for (int peer = 0; peer < size_; ++peer) {
          if (peer != rank_) peers.insert(peer);
        }
        break;
      default:
        break;
    }
  }
  if (peers.empty()) return absl::OkStatus();
  {
    // Reached once per peer for the communicator's life: the common case
    // costs one look.
    std::lock_guard<std::mutex> lock(comm_mutex_);
    if (static_cast<int>(reached_peers_.size()) == size_ - 1) {
      return absl::OkStatus();
    }
  }
  // Ascending, whatever order the ops name them in: a batch's ring (send
  // to r+1, recv from r-1) taken op by op would wait in a cycle.
  for (int peer : peers) CCL_RETURN_IF_ERROR(ReachPeer(peer, deadline));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CommWork>> NcclCommunicator::Handle(
    NcclWorkLabel what, const std::function<absl::Status()>& enqueue) {
  auto start = TakeEvent();
  if (!start.ok()) return start.status();
  auto stop = TakeEvent();
  if (!stop.ok()) {
    ReturnEvent(*start);
    return stop.status();
  }
  absl::Status status;
  int64_t launch = 0;
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
        } else {
          launch = ++launches_;
        }
      }
    }
  }
  if (!status.ok()) {
    ReturnEvent(*start);
    ReturnEvent(*stop);
    const absl::Status why(status.code(),
                           absl::StrCat(what.Text(), ": ", status.message()));
    // Part of the op may be enqueued and peers may be inside it.
    if (status.code() != absl::StatusCode::kInvalidArgument &&
        status.code() != absl::StatusCode::kUnimplemented &&
        status.code() != absl::StatusCode::kResourceExhausted) {
      AbortComm(why);
    }
    return why;
  }
  return std::unique_ptr<CommWork>(
      new NcclWork(this, *start, *stop, launch, std::move(what)));
}

absl::StatusOr<std::unique_ptr<CommWork>> NcclCommunicator::Launch(
    const BoundOp& op) {
  if (absl::Status health = Health(); !health.ok()) {
    return absl::UnavailableError(
        absl::StrCat("nccl communicator is broken by an earlier error: ",
                     health.ToString()));
  }
  auto dtype = nccl::ToNcclDataType(op.dtype);
  if (!dtype.ok()) return dtype.status();
  const NcclWorkLabel what(op.kind, op.seq, rank_, size_);
  CCL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const Clock::time_point deadline =
      Clock::now() + std::max(op.timeout, std::chrono::milliseconds(1));
  if (absl::Status s = ReachPeersOf({&op, 1}, deadline); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(what.Text(), ": ", s.message()));
  }
  return Handle(what, [&] { return Enqueue(op, *dtype); });
}

absl::StatusOr<std::unique_ptr<CommWork>> NcclCommunicator::LaunchBatch(
    const std::vector<BoundOp>& ops, const BatchOptions& options) {
  // Without options the ops go on the stream back to back between one pair
  // of events: per op only its NCCL call, as nccl-tests times them.
  if (absl::Status health = Health(); !health.ok()) {
    return absl::UnavailableError(
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
  CCL_RETURN_IF_ERROR(ReachPeersOf(ops, deadline));
  const NcclWorkLabel what(absl::StrCat("nccl batch of ", ops.size(),
                                        " ops from seq ", ops.front().seq,
                                        " at rank ", rank_, "/", size_));
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
    return absl::Status(captured.code(),
                        absl::StrCat(what.Text(), ": capturing a CUDA graph: ",
                                     captured.message()));
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
