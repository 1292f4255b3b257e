// WorkerCore over a TensorStore, one world communicator (Gloo on cpu, NCCL on
// cuda) and its Executor. Submit validates and resolves everything on the
// caller's thread (never blocking), then hands a bound op to the executor.
#include "server/worker_core.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/element.h"
#include "common/status_macros.h"
#include "server/communicator.h"
#include "server/executor.h"
#include "server/gloo/gloo_communicator.h"
#include "server/tensor_store.h"
#if CCL_HAVE_CUDA
#include <cuda_runtime.h>

#include "server/cuda/check_kernels.h"
#include "server/cuda/device_memory.h"
#include "server/nccl/nccl_communicator.h"
#endif

namespace ccl {
namespace {

using Clock = std::chrono::steady_clock;

// Completed works beyond this many are dropped oldest first, so sync ops
// (whose callers never ForgetWork) cannot grow the table without bound.
constexpr size_t kMaxRememberedWorks = 1 << 16;
// Flight recorder entries kept per group.
constexpr size_t kFlightRecords = 256;

std::string Name(OpKind kind) { return std::string(OpKindName(kind)); }

struct Resolved {
  BoundOp op;
  std::vector<std::shared_ptr<Tensor>> tensors;
};

// ---------------------------------------------------------------------------
// Bench result check: inputs get a per-rank pattern whose reductions stay
// exact in every dtype for small worlds, and each rank recomputes what it
// should hold.

double PatternValue(ReduceOp reduce_op, int rank, int64_t index) {
  if (reduce_op == ReduceOp::kProd) {
    // Products of 1s and 2s stay exact up to 2^world.
    return 1 + ((rank + index) % 2);
  }
  return (rank + 1) + (index % 3);
}

double RoundTo(DType dtype, double value) {
  alignas(8) unsigned char buf[8] = {};
  StoreElement(dtype, buf, 0, value);
  return LoadElement(dtype, buf, 0);
}

// Rank r's contribution to element `index` of a reduction, as the backend
// sees it (premul_sum scales before summing, in the dtype).
double Contribution(const BoundOp& op, int rank, int64_t index) {
  const double v = PatternValue(op.reduce_op, rank, index);
  if (op.reduce_op == ReduceOp::kPremulSum) {
    return RoundTo(op.dtype, v * op.premul_scale);
  }
  return v;
}

double Reduced(const BoundOp& op, int world, int64_t index) {
  double acc = Contribution(op, 0, index);
  for (int r = 1; r < world; ++r) {
    const double v = Contribution(op, r, index);
    switch (op.reduce_op) {
      case ReduceOp::kProd:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
      default:
        acc += v;
        break;
    }
  }
  if (op.reduce_op == ReduceOp::kAvg) {
    acc = IsFloatingPoint(op.dtype) ? acc / world : std::trunc(acc / world);
  }
  return RoundTo(op.dtype, acc);
}

double Tolerance(DType dtype, double expected) {
  switch (dtype) {
    case DType::kFloat32:
      return 1e-5 * std::max(1.0, std::fabs(expected));
    case DType::kFloat64:
      return 1e-12 * std::max(1.0, std::fabs(expected));
    case DType::kFloat16:
    case DType::kBFloat16:
      return 1e-2 * std::max(1.0, std::fabs(expected));
    case DType::kFp8E4M3:
    case DType::kFp8E5M2:
      return 0.25 * std::max(1.0, std::fabs(expected));
    default:
      return 0;
  }
}

void FillPattern(const BoundOp& op, int rank, void* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    StoreElement(op.dtype, data, static_cast<size_t>(i),
                 PatternValue(op.reduce_op, rank, i));
  }
}

// Sets up the buffers for a checked run: outputs zeroed (no expected value
// is 0), then inputs patterned (in place, the input overrides). `zero(p, n)`
// and `fill(p, n)` do the work, on the host or on the device.
template <typename Zero, typename FillFn>
void PrepareCheckWith(const BoundOp& op, int rank, int world, Zero zero,
                      FillFn fill) {
  const int64_t n = op.count;
  const int64_t w = world;
  auto zero_if = [&](void* p, int64_t count) {
    if (p != nullptr && count > 0) zero(p, count);
  };
  void* in = const_cast<void*>(op.input);
  const bool root = rank == op.root;
  switch (op.kind) {
    case OpKind::kAllReduce:
      zero_if(op.output, n);
      fill(in, n);
      break;
    case OpKind::kReduce:
      if (root) zero_if(op.output, n);
      fill(in, n);
      break;
    case OpKind::kBroadcast:
      if (!root || op.input != op.output) zero_if(op.output, n);
      if (root) fill(in, n);
      break;
    case OpKind::kAllGather:
      zero_if(op.output, w * n);
      fill(in, n);
      break;
    case OpKind::kReduceScatter:
      zero_if(op.output, n);
      fill(in, w * n);
      break;
    case OpKind::kGather:
      if (root) zero_if(op.output, w * n);
      fill(in, n);
      break;
    case OpKind::kScatter:
      zero_if(op.output, n);
      if (root) fill(in, w * n);
      break;
    case OpKind::kAllToAll:
      zero_if(op.output, w * n);
      fill(in, w * n);
      break;
    case OpKind::kSend:
      fill(in, n);
      break;
    case OpKind::kRecv:
      zero_if(op.output, n);
      break;
    case OpKind::kBarrier:
    case OpKind::kNop:
      break;
  }
}

void PrepareCheck(const BoundOp& op, int rank, int world) {
  const size_t esize = DTypeSize(op.dtype);
  PrepareCheckWith(
      op, rank, world,
      [&](void* p, int64_t count) {
        std::memset(p, 0, static_cast<size_t>(count) * esize);
      },
      [&](void* p, int64_t count) { FillPattern(op, rank, p, count); });
}

// What output element k of this rank should hold (see cuda::CheckSpec):
// the reduction of element idx_base + k, rank k / chunk's pattern at
// idx_base + k % chunk (chunked), or rank src's at idx_base + k.
struct CheckPlan {
  int64_t count = 0;  // output elements to check; 0: nothing on this rank
  bool reduced = false;
  bool chunked = false;
  int src = 0;
  int64_t idx_base = 0;
  int64_t chunk = 1;
};

CheckPlan PlanCheck(const BoundOp& op, int rank, int world) {
  const int64_t n = op.count;
  const bool root = rank == op.root;
  CheckPlan plan;
  plan.chunk = std::max<int64_t>(n, 1);
  switch (op.kind) {
    case OpKind::kAllReduce:
      plan.count = n;
      plan.reduced = true;
      break;
    case OpKind::kReduce:
      plan.count = root ? n : 0;
      plan.reduced = true;
      break;
    case OpKind::kBroadcast:
      plan.count = n;
      plan.src = op.root;
      break;
    case OpKind::kAllGather:
      plan.count = world * n;
      plan.chunked = true;
      break;
    case OpKind::kReduceScatter:
      plan.count = n;
      plan.reduced = true;
      plan.idx_base = rank * n;
      break;
    case OpKind::kGather:
      plan.count = root ? world * n : 0;
      plan.chunked = true;
      break;
    case OpKind::kScatter:
      plan.count = n;
      plan.src = op.root;
      plan.idx_base = rank * n;
      break;
    case OpKind::kAllToAll:
      plan.count = world * n;
      plan.chunked = true;
      plan.idx_base = rank * n;
      break;
    case OpKind::kRecv:
      plan.count = n;
      plan.src = op.peer;
      break;
    default:
      break;
  }
  return plan;
}

int64_t CountWrong(const BoundOp& op, int rank, int world) {
  const CheckPlan plan = PlanCheck(op, rank, world);
  int64_t wrong = 0;
  for (int64_t k = 0; k < plan.count; ++k) {
    double want;
    if (plan.reduced) {
      want = Reduced(op, world, plan.idx_base + k);
    } else {
      const int src =
          plan.chunked ? static_cast<int>(k / plan.chunk) : plan.src;
      const int64_t idx = plan.idx_base + (plan.chunked ? k % plan.chunk : k);
      want = PatternValue(op.reduce_op, src, idx);
    }
    want = RoundTo(op.dtype, want);
    const double got = LoadElement(op.dtype, op.output, static_cast<size_t>(k));
    if (!(std::fabs(got - want) <= Tolerance(op.dtype, want))) ++wrong;
  }
  return wrong;
}

#if CCL_HAVE_CUDA
// The device-side check, for the dtypes the kernels cover.
std::optional<cuda::CheckType> DeviceCheckType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return cuda::CheckType::kFloat32;
    case DType::kFloat64:
      return cuda::CheckType::kFloat64;
    case DType::kFloat16:
      return cuda::CheckType::kFloat16;
    case DType::kBFloat16:
      return cuda::CheckType::kBFloat16;
    case DType::kInt8:
      return cuda::CheckType::kInt8;
    case DType::kUInt8:
      return cuda::CheckType::kUInt8;
    case DType::kInt32:
      return cuda::CheckType::kInt32;
    case DType::kInt64:
      return cuda::CheckType::kInt64;
    default:
      return std::nullopt;
  }
}

cuda::CheckReduce DeviceCheckReduce(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProd:
      return cuda::CheckReduce::kProd;
    case ReduceOp::kMin:
      return cuda::CheckReduce::kMin;
    case ReduceOp::kMax:
      return cuda::CheckReduce::kMax;
    case ReduceOp::kAvg:
      return cuda::CheckReduce::kAvg;
    case ReduceOp::kPremulSum:
      return cuda::CheckReduce::kPremulSum;
    default:
      return cuda::CheckReduce::kSum;
  }
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Fills and zeroes on the device (legacy default stream, which the
// communicator's blocking stream orders after).
absl::Status PrepareCheckOnDevice(const BoundOp& op, int device, int rank,
                                  int world, cuda::CheckType type) {
  CCL_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  const size_t esize = DTypeSize(op.dtype);
  absl::Status status;
  PrepareCheckWith(
      op, rank, world,
      [&](void* p, int64_t count) {
        if (status.ok()) {
          status =
              CudaStatus(cudaMemset(p, 0, static_cast<size_t>(count) * esize),
                         "cudaMemset");
        }
      },
      [&](void* p, int64_t count) {
        if (status.ok()) {
          status =
              CudaStatus(cuda::LaunchFillPattern(
                             p, count, type, op.reduce_op == ReduceOp::kProd,
                             rank, nullptr),
                         "fill pattern kernel");
        }
      });
  CCL_RETURN_IF_ERROR(status);
  return CudaStatus(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

absl::StatusOr<int64_t> CountWrongOnDevice(const BoundOp& op, int device,
                                           int rank, int world,
                                           cuda::CheckType type) {
  const CheckPlan plan = PlanCheck(op, rank, world);
  if (plan.count == 0) return 0;
  CCL_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  cuda::CheckSpec spec;
  spec.type = type;
  spec.reduce = DeviceCheckReduce(op.reduce_op);
  spec.premul_scale = op.premul_scale;
  spec.world = world;
  spec.count = plan.count;
  spec.reduced = plan.reduced;
  spec.chunked = plan.chunked;
  spec.src = plan.src;
  spec.idx_base = plan.idx_base;
  spec.chunk = plan.chunk;
  spec.floating = IsFloatingPoint(op.dtype);
  spec.tolerance = Tolerance(op.dtype, 1.0);
  unsigned long long* counter = nullptr;
  CCL_RETURN_IF_ERROR(CudaStatus(
      cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(*counter)),
      "cudaMalloc(check counter)"));
  unsigned long long wrong = 0;
  absl::Status status =
      CudaStatus(cudaMemset(counter, 0, sizeof(*counter)), "cudaMemset");
  if (status.ok()) {
    status =
        CudaStatus(cuda::LaunchCountWrong(op.output, spec, counter, nullptr),
                   "count-wrong kernel");
  }
  if (status.ok()) {
    status = CudaStatus(
        cudaMemcpy(&wrong, counter, sizeof(wrong), cudaMemcpyDeviceToHost),
        "cudaMemcpy(check counter)");
  }
  cudaFree(counter);
  CCL_RETURN_IF_ERROR(status);
  return static_cast<int64_t>(wrong);
}
#endif

// Runs warmup + iters instances of one op at one seq, back to back on the
// executor thread, each waited for before the next starts so per-instance
// times are meaningful.
// Holds the seq of an op this rank refused before launch, so that the
// group's later ops run at once instead of waiting out the gap timeout.
class RefusedTask final : public ExecutorTask {
 public:
  RefusedTask(int64_t seq, absl::Status reason)
      : seq_(seq), reason_(std::move(reason)) {}
  int64_t seq() const override { return seq_; }
  std::chrono::milliseconds timeout() const override {
    return std::chrono::milliseconds(0);
  }
  void Start() override {}
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(Communicator&) override {
    return reason_;
  }
  void Complete(absl::Status, double) override {}

 private:
  const int64_t seq_;
  const absl::Status reason_;
};

class BenchTask final : public ExecutorTask {
 public:
  BenchTask(int64_t id, OpSpec spec, Resolved resolved, int warmup, int iters,
            bool check, TensorStore* store,
            std::function<void(absl::StatusOr<BenchResult>)> done)
      : id_(id),
        spec_(std::move(spec)),
        op_(resolved.op),
        tensors_(std::move(resolved.tensors)),
        warmup_(warmup),
        iters_(iters),
        check_(check),
        store_(store),
        done_(std::move(done)) {}

  int64_t seq() const override { return spec_.seq; }
  std::chrono::milliseconds timeout() const override { return op_.timeout; }
  void Start() override { store_->WaitForHostAccess(tensors_); }

  absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      Communicator& comm) override {
    const Clock::time_point start = Clock::now();
    // Ranks agree on the op once; the timed instances are the op alone.
    for (int i = 0; i < warmup_; ++i) {
      CCL_RETURN_IF_ERROR(RunOnce(comm, /*agree_first=*/i == 0));
    }
    CCL_RETURN_IF_ERROR(RunTimed(comm));
    if (check_) {
      absl::Status status = RunChecked(comm);
      if (!status.ok()) return status;
    }
    return std::make_unique<CompletedWork>(
        absl::OkStatus(),
        std::chrono::duration<double, std::micro>(Clock::now() - start)
            .count());
  }

  void Complete(absl::Status status, double device_us) override {
    store_->Release(tensors_, id_);
    tensors_.clear();
    if (!status.ok()) {
      done_(absl::Status(status.code(),
                         absl::StrCat("bench of ", DescribeOp(spec_), ": ",
                                      std::string(status.message()))));
    } else {
      done_(result_);
    }
  }

 private:
  bool OnDevice() const {
    for (const auto& tensor : tensors_) {
      if (tensor->meta().device.kind == DeviceKind::kCuda) return true;
    }
    return false;
  }

  absl::Status RunChecked(Communicator& comm) {
    if (!OnDevice()) {
      PrepareCheck(op_, comm.rank(), comm.size());
      CCL_RETURN_IF_ERROR(RunOnce(comm, /*agree_first=*/true));
      result_.wrong = CountWrong(op_, comm.rank(), comm.size());
      return absl::OkStatus();
    }
#if CCL_HAVE_CUDA
    const int device = tensors_.front()->meta().device.index;
    if (auto type = DeviceCheckType(op_.dtype)) {
      // On the device, as nccl-tests does: only the count comes back.
      CCL_RETURN_IF_ERROR(
          PrepareCheckOnDevice(op_, device, comm.rank(), comm.size(), *type));
      CCL_RETURN_IF_ERROR(RunOnce(comm, /*agree_first=*/true));
      auto wrong =
          CountWrongOnDevice(op_, device, comm.rank(), comm.size(), *type);
      if (!wrong.ok()) return wrong.status();
      result_.wrong = *wrong;
      return absl::OkStatus();
    }
    // Other dtypes (fp8): prepare and check on host copies (slow, but only
    // for --check), with the op's pointers translated into them.
    std::vector<std::vector<std::byte>> host(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      host[i].resize(static_cast<size_t>(tensors_[i]->bytes()));
      CCL_RETURN_IF_ERROR(cuda::CopyToHost(tensors_[i]->meta().device.index,
                                           host[i].data(), tensors_[i]->data(),
                                           host[i].size()));
    }
    // Strictly inside a tensor: two tensors may be adjacent in device
    // memory, and the end of one (the start of the next) mapped into the
    // first one's host copy would write past it.
    auto to_host = [&](const void* p) -> void* {
      if (p == nullptr) return nullptr;
      const auto* b = static_cast<const std::byte*>(p);
      for (size_t i = 0; i < tensors_.size(); ++i) {
        const std::byte* base = tensors_[i]->data();
        if (b >= base && b < base + tensors_[i]->bytes()) {
          return host[i].data() + (b - base);
        }
      }
      return nullptr;
    };
    BoundOp host_op = op_;
    host_op.input = to_host(op_.input);
    host_op.output = to_host(op_.output);
    PrepareCheck(host_op, comm.rank(), comm.size());
    for (size_t i = 0; i < tensors_.size(); ++i) {
      CCL_RETURN_IF_ERROR(cuda::CopyToDevice(tensors_[i]->meta().device.index,
                                             tensors_[i]->data(),
                                             host[i].data(), host[i].size()));
    }
    CCL_RETURN_IF_ERROR(RunOnce(comm, /*agree_first=*/true));
    for (size_t i = 0; i < tensors_.size(); ++i) {
      CCL_RETURN_IF_ERROR(cuda::CopyToHost(tensors_[i]->meta().device.index,
                                           host[i].data(), tensors_[i]->data(),
                                           host[i].size()));
    }
    result_.wrong = CountWrong(host_op, comm.rank(), comm.size());
    return absl::OkStatus();
#else
    return absl::UnimplementedError("device tensors need a CUDA build");
#endif
  }

  // The timed instances go back to back, as nccl-tests runs them: a backend
  // that enqueues (NCCL) keeps up to kWindow in flight, so the average is
  // the op's time on the device rather than launch plus host sync; one that
  // runs the op inside Launch (Gloo) completes each there. min and max are
  // the backend's own per-op times.
  absl::Status RunTimed(Communicator& comm) {
    constexpr size_t kWindow = 64;
    std::deque<std::unique_ptr<CommWork>> in_flight;
    int completed = 0;
    auto retire = [&]() -> absl::Status {
      std::unique_ptr<CommWork> handle = std::move(in_flight.front());
      in_flight.pop_front();
      CCL_RETURN_IF_ERROR(handle->Wait(op_.timeout));
      const double us = handle->DeviceMicros();
      if (completed == 0 || us < result_.min_us) result_.min_us = us;
      if (completed == 0 || us > result_.max_us) result_.max_us = us;
      ++completed;
      return absl::OkStatus();
    };
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < iters_; ++i) {
      BoundOp op = op_;
      op.agree_first = warmup_ == 0 && i == 0;
      auto handle = comm.Launch(op);
      if (!handle.ok()) return handle.status();
      in_flight.push_back(*std::move(handle));
      if (in_flight.size() > kWindow) CCL_RETURN_IF_ERROR(retire());
    }
    while (!in_flight.empty()) CCL_RETURN_IF_ERROR(retire());
    if (iters_ > 0) {
      result_.avg_us =
          std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
          iters_;
    }
    return absl::OkStatus();
  }

  absl::Status RunOnce(Communicator& comm, bool agree_first) {
    BoundOp op = op_;
    op.agree_first = agree_first;
    auto handle = comm.Launch(op);
    if (!handle.ok()) return handle.status();
    return (*handle)->Wait(op_.timeout);
  }

  const int64_t id_;
  const OpSpec spec_;
  const BoundOp op_;
  std::vector<std::shared_ptr<Tensor>> tensors_;
  const int warmup_;
  const int iters_;
  const bool check_;
  TensorStore* const store_;
  std::function<void(absl::StatusOr<BenchResult>)> done_;
  BenchResult result_;
};

// ---------------------------------------------------------------------------
// CreateGroup runs on the world executor at a world seq, so every rank splits
// at the same point of the world's op sequence. `make` builds this rank's
// communicator of the group (null on a non-member) and `done` registers it,
// both on the world's launch thread.

class GroupTask final : public Work, public ExecutorTask {
 public:
  using Make = std::function<absl::StatusOr<std::shared_ptr<Communicator>>(
      Communicator& world)>;
  using Done = std::function<absl::Status(
      absl::StatusOr<std::shared_ptr<Communicator>>)>;

  GroupTask(int64_t id, std::string name, int64_t world_seq,
            std::chrono::milliseconds timeout, Make make, Done done)
      : id_(id),
        name_(std::move(name)),
        make_(std::move(make)),
        done_(std::move(done)) {
    spec_.group = kWorldGroup;
    spec_.seq = world_seq;
    spec_.kind = OpKind::kNop;
    spec_.timeout = timeout;
  }

  // Work.
  int64_t id() const override { return id_; }
  const OpSpec& spec() const override { return spec_; }
  WorkState state() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return state_;
  }
  absl::Status status() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return status_;
  }
  OpTiming timing() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return timing_;
  }
  absl::Status Wait(std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done_cv_.wait_for(lock, timeout, [&] {
          return state_ == WorkState::kCompleted ||
                 state_ == WorkState::kFailed;
        })) {
      return absl::DeadlineExceededError(
          absl::StrCat("creating group '", name_, "' is still running"));
    }
    return status_;
  }
  void OnDone(std::function<void()> callback) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (state_ != WorkState::kCompleted && state_ != WorkState::kFailed) {
        callbacks_.push_back(std::move(callback));
        return;
      }
    }
    callback();
  }

  // ExecutorTask.
  int64_t seq() const override { return spec_.seq; }
  std::chrono::milliseconds timeout() const override { return spec_.timeout; }
  void Start() override {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = WorkState::kRunning;
    timing_.queue_us =
        std::chrono::duration<double, std::micro>(Clock::now() - enqueued_)
            .count();
  }
  absl::StatusOr<std::unique_ptr<CommWork>> Launch(
      Communicator& world) override {
    const Clock::time_point start = Clock::now();
    absl::Status status = done_(make_(world));
    ran_ = true;
    return std::make_unique<CompletedWork>(
        std::move(status),
        std::chrono::duration<double, std::micro>(Clock::now() - start)
            .count());
  }
  void Complete(absl::Status status, double device_us) override {
    // Not launched (cancelled, or the world is broken): the name is freed.
    if (!ran_) (void)done_(status);
    std::vector<std::function<void()>> callbacks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!status.ok()) {
        status = absl::Status(
            status.code(),
            absl::StrCat("creating group '", name_, "' at world seq ",
                         spec_.seq, ": ", std::string(status.message())));
      }
      status_ = status;
      state_ = status.ok() ? WorkState::kCompleted : WorkState::kFailed;
      timing_.device_us = device_us;
      timing_.total_us =
          std::chrono::duration<double, std::micro>(Clock::now() - enqueued_)
              .count();
      callbacks.swap(callbacks_);
    }
    done_cv_.notify_all();
    for (auto& callback : callbacks) callback();
  }

 private:
  const int64_t id_;
  const std::string name_;
  OpSpec spec_;
  const Make make_;
  const Done done_;
  const Clock::time_point enqueued_ = Clock::now();
  // Launch thread only (Complete runs after Launch, or instead of it).
  std::atomic<bool> ran_{false};

  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  WorkState state_ = WorkState::kQueued;
  absl::Status status_;
  OpTiming timing_;
  std::vector<std::function<void()>> callbacks_;
};

// ---------------------------------------------------------------------------

// When an op of a group times out or loses a peer, each rank that got that
// far leaves a mark in the generation's KV store and looks for the others'
// marks for a moment: the ranks without one never reached the op (dead,
// stopped, or still behind on an earlier one), which is what a person
// debugging a hang wants named. Costs nothing until an op fails.
Executor::Diagnosis ArrivalCheck(KvStore* kv, std::string group, int group_rank,
                                 std::vector<int> world_ranks) {
  if (kv == nullptr) return nullptr;
  return [kv, group = std::move(group), group_rank,
          world_ranks = std::move(world_ranks)](int64_t seq) -> std::string {
    constexpr auto kWindow = std::chrono::seconds(1);
    constexpr size_t kMaxChecked = 64;
    const std::string base = absl::StrCat("reached/", group, "/", seq, "/");
    if (!kv->Set(absl::StrCat(base, group_rank), "1").ok()) return "";
    std::vector<std::string> others;
    for (size_t r = 0; r < world_ranks.size() && others.size() < kMaxChecked;
         ++r) {
      if (static_cast<int>(r) != group_rank) {
        others.push_back(absl::StrCat(base, r));
      }
    }
    if (others.empty()) return "";
    if (kv->Wait(others, kWindow).ok()) {
      return absl::StrCat("every rank of group ", group, " reached seq ", seq,
                          " and failed there");
    }
    std::vector<std::string> missing;
    for (size_t r = 0; r < world_ranks.size() && r < kMaxChecked + 1; ++r) {
      if (static_cast<int>(r) == group_rank) continue;
      if (kv->Get(absl::StrCat(base, r), std::chrono::milliseconds(1)).ok()) {
        continue;
      }
      missing.push_back(
          group == kWorldGroup
              ? absl::StrCat(r)
              : absl::StrCat(r, " (world rank ", world_ranks[r], ")"));
    }
    if (missing.empty()) return "";
    return absl::StrCat(
        missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "),
        " of group ", group, " never reached seq ", seq,
        " (no report within 1 s of this rank's failure: dead, stopped, or "
        "still on an earlier op; `ccctl debug ops` shows where each rank is)");
  };
}

class WorkerCoreImpl final : public WorkerCore {
 public:
  explicit WorkerCoreImpl(WorkerConfig config)
      : config_(std::move(config)),
        store_(config_.device, config_.tensor_quota_bytes) {}
  ~WorkerCoreImpl() override { Shutdown(); }

  absl::Status FormWorld(int rank, int world_size, int64_t generation,
                         KvStore& store) override {
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", rank, " is not in a world of size ", world_size));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (shutdown_) {
        return absl::FailedPreconditionError("the worker is shut down");
      }
    }
    {
      // The communicators of the generation being replaced go first: a NCCL
      // kernel still waiting for a dead peer would hold the device, and
      // their ranks are about to join the new one instead.
      std::vector<std::shared_ptr<Executor>> previous;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (world_) previous.push_back(world_);
        for (auto& [name, group] : groups_) {
          if (group.executor) previous.push_back(group.executor);
        }
      }
      const absl::Status replaced = absl::AbortedError(
          absl::StrCat("the world is re-forming into generation ", generation));
      for (auto& executor : previous) executor->communicator().Abort(replaced);
    }
    const std::string prefix =
        absl::StrCat("gen", generation, "/", kWorldGroup);
    std::shared_ptr<Communicator> comm;
#if CCL_HAVE_CUDA
    if (config_.device.kind == DeviceKind::kCuda) {
      auto nccl =
          NcclCommunicator::Create(rank, world_size, config_.device.index,
                                   prefix, store, config_.default_op_timeout);
      if (!nccl.ok()) return nccl.status();
      comm = std::shared_ptr<Communicator>(*std::move(nccl));
    }
#endif
    if (comm == nullptr) {
      auto gloo =
          GlooCommunicator::Create(rank, world_size, config_.data_host, prefix,
                                   store, config_.default_op_timeout);
      if (!gloo.ok()) return gloo.status();
      comm = std::shared_ptr<Communicator>(*std::move(gloo));
    }
    std::vector<int> world_ranks(static_cast<size_t>(world_size));
    std::iota(world_ranks.begin(), world_ranks.end(), 0);
    auto executor = std::make_shared<Executor>(
        kWorldGroup, rank, std::move(comm), config_.seq_gap_timeout,
        ArrivalCheck(&store, kWorldGroup, rank, std::move(world_ranks)));
    std::shared_ptr<Executor> old;
    std::map<std::string, GroupEntry> old_groups;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (shutdown_) {
        executor->Stop(absl::AbortedError("the worker is shut down"));
        return absl::FailedPreconditionError("the worker is shut down");
      }
      old = std::move(world_);
      world_ = std::move(executor);
      old_groups.swap(groups_);
      kv_ = &store;
      rank_ = rank;
      world_size_ = world_size;
      generation_ = generation;
    }
    const absl::Status replaced = absl::AbortedError(absl::StrCat(
        "generation ", generation, " replaced the world before the op ran"));
    // Stopping joins the old executors' threads, and a Gloo op inside its
    // transport ends only at its timeout: that wait must not hold up the
    // caller (the worker's membership loop), so it happens on the side.
    std::lock_guard<std::mutex> lock(mutex_);
    std::erase_if(reapers_, [](Reaper& reaper) {
      if (!reaper.done->load()) return false;
      reaper.thread.join();
      return true;
    });
    auto done = std::make_shared<std::atomic<bool>>(false);
    reapers_.push_back(
        {std::thread([old = std::move(old), old_groups = std::move(old_groups),
                      replaced, done]() mutable {
           // Subgroups first: their communicators may be children of the
           // world's.
           for (auto& [name, group] : old_groups) {
             if (group.executor) group.executor->Stop(replaced);
           }
           if (old) old->Stop(replaced);
           old_groups.clear();
           old.reset();
           done->store(true);
         }),
         done});
    return absl::OkStatus();
  }

  int rank() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return rank_;
  }
  int world_size() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return world_size_;
  }
  int64_t generation() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return generation_;
  }
  std::string backend() const override {
    return config_.device.kind == DeviceKind::kCuda ? "nccl" : "gloo";
  }
  const WorkerConfig& config() const override { return config_; }

  absl::StatusOr<TensorMeta> Alloc(const TensorMeta& spec,
                                   const Fill& fill) override {
    return store_.Alloc(spec, fill, rank());
  }
  absl::StatusOr<int64_t> Free(const std::string& name) override {
    return store_.Free(name);
  }
  std::vector<TensorMeta> List() const override { return store_.List(); }
  int64_t BytesInUse() const override { return store_.BytesInUse(); }
  absl::StatusOr<TensorMeta> Write(const std::string& name,
                                   int64_t offset_bytes,
                                   std::span<const std::byte> data) override {
    return store_.Write(name, offset_bytes, data);
  }
  absl::Status Read(
      const std::string& name, int64_t offset, int64_t count,
      int64_t chunk_bytes,
      const std::function<bool(int64_t, std::span<const std::byte>)>& sink)
      override {
    return store_.Read(name, offset, count, chunk_bytes, sink);
  }
  absl::StatusOr<TensorSummary> Summarize(const std::string& name,
                                          int64_t head) override {
    return store_.Summarize(name, head);
  }

  absl::StatusOr<std::shared_ptr<Work>> Submit(const OpSpec& spec) override {
    std::shared_ptr<Executor> executor;
    OpSpec normalized = spec;
    CCL_ASSIGN_OR_RETURN(executor, FindGroup(normalized));
    auto resolved = Resolve(normalized, *executor);
    if (!resolved.ok()) return Refuse(*executor, normalized, resolved.status());
    const int64_t id = next_work_id_.fetch_add(1);
    auto work = std::make_shared<OpWork>(id, normalized, resolved->op,
                                         resolved->tensors, &store_);
    if (absl::Status s = store_.Hold(resolved->tensors, id, work->Describe());
        !s.ok()) {
      return Refuse(*executor, normalized, s);
    }
    work->MarkHeld();
    if (absl::Status s = executor->Enqueue(work); !s.ok()) {
      store_.Release(resolved->tensors, id);
      Record(FlightEntry{normalized, work, s});
      return s;
    }
    Record(FlightEntry{normalized, work, absl::OkStatus()});
    Remember(work);
    if (config_.on_op_done) {
      // The work runs its own callback, so the raw pointer is alive then.
      OpWork* done = work.get();
      work->OnDone([this, done] { config_.on_op_done(ToRecord(*done)); });
    }
    return std::shared_ptr<Work>(work);
  }

  // A refused op still takes its seq on this rank (unless the seq itself is
  // what is wrong: a duplicate or one already declared lost).
  absl::Status Refuse(Executor& executor, const OpSpec& spec,
                      absl::Status reason) {
    (void)executor.Enqueue(std::make_shared<RefusedTask>(spec.seq, reason));
    Record(FlightEntry{spec, nullptr, reason});
    if (config_.on_op_done) {
      OpRecord record;
      record.spec = spec;
      record.state = WorkState::kFailed;
      record.status = reason;
      config_.on_op_done(record);
    }
    return reason;
  }

  static OpRecord ToRecord(const OpWork& work) {
    OpRecord record;
    record.spec = work.spec();
    record.dtype = work.bound().dtype;
    record.count = work.bound().count;
    record.work_id = work.id();
    record.state = work.state();
    record.status = work.status();
    record.timing = work.timing();
    return record;
  }

  absl::StatusOr<std::pair<int64_t, std::vector<OpRecord>>> OpLog(
      const std::string& group, int limit) const override {
    const std::string name = group.empty() ? kWorldGroup : group;
    int64_t next_seq = 0;
    bool known = false;
    for (const GroupInfo& info : Groups()) {
      if (info.name == name) {
        known = true;
        next_seq = info.next_seq;
      }
    }
    if (!known) {
      return absl::NotFoundError(absl::StrCat("no group '", name, "' on rank ",
                                              rank(), "; see ccctl group ls"));
    }
    std::vector<OpRecord> records;
    std::lock_guard<std::mutex> lock(flight_mutex_);
    auto it = flight_.find(name);
    if (it == flight_.end()) return std::make_pair(next_seq, records);
    const std::deque<FlightEntry>& entries = it->second;
    const size_t first =
        limit > 0 && entries.size() > static_cast<size_t>(limit)
            ? entries.size() - static_cast<size_t>(limit)
            : 0;
    for (size_t i = first; i < entries.size(); ++i) {
      const FlightEntry& entry = entries[i];
      OpRecord record;
      record.spec = entry.spec;
      if (entry.work) {
        record.dtype = entry.work->bound().dtype;
        record.count = entry.work->bound().count;
        record.work_id = entry.work->id();
        record.timing = entry.work->timing();
        if (entry.refused.ok()) {
          record.state = entry.work->state();
          record.status = entry.work->status();
        }
      }
      if (!entry.refused.ok()) {
        record.state = WorkState::kFailed;
        record.status = entry.refused;
      }
      records.push_back(std::move(record));
    }
    return std::make_pair(next_seq, std::move(records));
  }

  std::shared_ptr<Work> FindWork(int64_t id) override {
    std::lock_guard<std::mutex> lock(works_mutex_);
    auto it = works_.find(id);
    return it == works_.end() ? nullptr : it->second;
  }

  void ForgetWork(int64_t id) override {
    std::lock_guard<std::mutex> lock(works_mutex_);
    works_.erase(id);
  }

  absl::Status Bench(
      const OpSpec& spec, int warmup, int iters, bool check,
      std::function<void(absl::StatusOr<BenchResult>)> done) override {
    if (warmup < 0 || iters < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bench needs warmup >= 0 and iters >= 0, got ", warmup,
                       " and ", iters));
    }
    std::shared_ptr<Executor> executor;
    OpSpec normalized = spec;
    CCL_ASSIGN_OR_RETURN(executor, FindGroup(normalized));
    auto resolved = Resolve(normalized, *executor);
    if (!resolved.ok()) return Refuse(*executor, normalized, resolved.status());
    const int64_t id = next_work_id_.fetch_add(1);
    std::vector<std::shared_ptr<Tensor>> tensors = resolved->tensors;
    if (absl::Status s = store_.Hold(
            tensors, id, absl::StrCat("bench of ", DescribeOp(normalized)));
        !s.ok()) {
      return Refuse(*executor, normalized, s);
    }
    auto task = std::make_shared<BenchTask>(id, normalized,
                                            *std::move(resolved), warmup, iters,
                                            check, &store_, std::move(done));
    if (absl::Status s = executor->Enqueue(task); !s.ok()) {
      store_.Release(tensors, id);
      return s;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<Work>> CreateGroup(
      const std::string& name, std::vector<int> ranks, int64_t world_seq,
      std::chrono::milliseconds timeout) override {
    OpSpec probe;
    probe.seq = world_seq;
    std::shared_ptr<Executor> world;
    CCL_ASSIGN_OR_RETURN(world, FindGroup(probe));
    if (world_seq < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("creating group '", name, "': seq must be >= 0"));
    }
    if (timeout.count() <= 0) timeout = config_.default_op_timeout;
    int position = -1;
    int64_t generation = 0;
    KvStore* kv = nullptr;
    absl::Status valid = ValidateGroupName(name);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (valid.ok()) valid = ValidateGroupRanks(ranks, world_size_);
      if (valid.ok() && groups_.count(name) > 0) {
        valid = absl::AlreadyExistsError(
            absl::StrCat("a group named '", name, "' already exists"));
      }
      if (valid.ok()) {
        GroupEntry& entry = groups_[name];
        entry.ranks = ranks;
        auto it = std::find(ranks.begin(), ranks.end(), rank_);
        if (it != ranks.end()) {
          position = static_cast<int>(it - ranks.begin());
        }
        entry.group_rank = position;
      }
      generation = generation_;
      kv = kv_;
    }
    if (!valid.ok()) {
      OpSpec split;
      split.group = kWorldGroup;
      split.seq = world_seq;
      split.kind = OpKind::kNop;  // a group split occupies the world seq
      split.input = absl::StrCat("create group ", name);
      return Refuse(*world, split, valid);
    }

    const int size = static_cast<int>(ranks.size());
    const std::string data_host = config_.data_host;
    auto make = [=](Communicator& parent)
        -> absl::StatusOr<std::shared_ptr<Communicator>> {
#if CCL_HAVE_CUDA
      if (auto* nccl = dynamic_cast<NcclCommunicator*>(&parent)) {
        // Every rank of the parent takes part; non-members get nothing.
        auto child = nccl->Split(position >= 0 ? 0 : NCCL_SPLIT_NOCOLOR,
                                 std::max(position, 0), timeout);
        if (!child.ok()) return child.status();
        return std::shared_ptr<Communicator>(*std::move(child));
      }
#endif
      (void)parent;
      if (position < 0) return std::shared_ptr<Communicator>();
      if (kv == nullptr) {
        return absl::FailedPreconditionError("this worker has no KV store");
      }
      auto gloo = GlooCommunicator::Create(
          position, size, data_host,
          absl::StrCat("gen", generation, "/group/", name), *kv, timeout);
      if (!gloo.ok()) return gloo.status();
      return std::shared_ptr<Communicator>(*std::move(gloo));
    };
    auto done = [this, name, position, generation,
                 kv](absl::StatusOr<std::shared_ptr<Communicator>> comm)
        -> absl::Status {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = groups_.find(name);
      if (it == groups_.end() || generation_ != generation || shutdown_) {
        return absl::AbortedError(
            "the world changed while the group was being created");
      }
      if (!comm.ok()) {
        groups_.erase(it);
        return comm.status();
      }
      GroupEntry& entry = it->second;
      entry.creating = false;
      if (*comm) {
        entry.executor = std::make_shared<Executor>(
            name, position, *std::move(comm), config_.seq_gap_timeout,
            ArrivalCheck(kv, name, position, entry.ranks));
      }
      return absl::OkStatus();
    };
    const int64_t id = next_work_id_.fetch_add(1);
    auto task = std::make_shared<GroupTask>(id, name, world_seq, timeout,
                                            std::move(make), std::move(done));
    if (absl::Status s = world->Enqueue(task); !s.ok()) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (generation_ == generation) groups_.erase(name);
      return s;
    }
    return std::shared_ptr<Work>(task);
  }

  std::vector<GroupInfo> Groups() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<GroupInfo> groups;
    if (!world_) return groups;
    GroupInfo info;
    info.name = world_->group();
    info.ranks.resize(static_cast<size_t>(world_size_));
    std::iota(info.ranks.begin(), info.ranks.end(), 0);
    info.group_rank = rank_;
    info.next_seq = world_->next_seq();
    info.backend = world_->communicator().name();
    info.state = world_->state();
    groups.push_back(std::move(info));
    for (const auto& [name, entry] : groups_) {
      GroupInfo group;
      group.name = name;
      group.ranks = entry.ranks;
      group.group_rank = entry.group_rank;
      group.backend = world_->communicator().name();
      if (entry.creating) {
        group.state = "creating";
      } else if (!entry.executor) {
        group.state = "not a member";
      } else {
        group.next_seq = entry.executor->next_seq();
        group.backend = entry.executor->communicator().name();
        group.state = entry.executor->state();
      }
      groups.push_back(std::move(group));
    }
    return groups;
  }

  void Shutdown() override {
    std::shared_ptr<Executor> world;
    std::map<std::string, GroupEntry> groups;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
      world = std::move(world_);
      groups.swap(groups_);
    }
    const absl::Status reason =
        absl::CancelledError("the worker shut down before the op ran");
    for (auto& [name, group] : groups) {
      if (group.executor) group.executor->Stop(reason);
    }
    if (world) world->Stop(reason);
    std::vector<Reaper> reapers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reapers.swap(reapers_);
    }
    for (auto& reaper : reapers) reaper.thread.join();
    store_.Clear();
  }

  absl::Status CommunicatorHealth() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!world_) return absl::FailedPreconditionError("no world yet");
    if (absl::Status s = world_->communicator().Health(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("group world: ", s.message()));
    }
    for (const auto& [name, group] : groups_) {
      if (!group.executor) continue;
      if (absl::Status s = group.executor->communicator().Health(); !s.ok()) {
        return absl::Status(s.code(),
                            absl::StrCat("group ", name, ": ", s.message()));
      }
    }
    return absl::OkStatus();
  }

 private:
  // Normalizes the group name and the generation (0: the current one) and
  // checks the generation.
  absl::StatusOr<std::shared_ptr<Executor>> FindGroup(OpSpec& spec) const {
    if (spec.group.empty()) spec.group = kWorldGroup;
    std::lock_guard<std::mutex> lock(mutex_);
    if (shutdown_) {
      return absl::FailedPreconditionError("the worker is shut down");
    }
    if (!world_) {
      return absl::FailedPreconditionError(
          "this worker has no world yet; ops can run once it has joined a "
          "generation");
    }
    if (spec.generation != 0 && spec.generation != generation_) {
      return absl::FailedPreconditionError(
          absl::StrCat("op is for generation ", spec.generation,
                       " but this worker is in ", "generation ", generation_));
    }
    // The flight recorder keeps ops across generations; it needs to know
    // which one each ran in.
    spec.generation = generation_;
    if (spec.group == kWorldGroup) return world_;
    auto it = groups_.find(spec.group);
    if (it == groups_.end()) {
      std::string known = kWorldGroup;
      for (const auto& [name, entry] : groups_)
        absl::StrAppend(&known, ", ", name);
      return absl::NotFoundError(absl::StrCat("no group named '", spec.group,
                                              "' on rank ", rank_,
                                              "; known groups: ", known));
    }
    if (it->second.creating) {
      return absl::UnavailableError(absl::StrCat(
          "group '", spec.group, "' is still being created on rank ", rank_));
    }
    if (!it->second.executor) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", rank_, " is not a member of group '", spec.group,
          "' (world ranks ", absl::StrJoin(it->second.ranks, ","), ")"));
    }
    return it->second.executor;
  }

  absl::StatusOr<Resolved> Resolve(const OpSpec& spec, Executor& executor) {
    Communicator& comm = executor.communicator();
    const int rank = comm.rank();
    const int world = comm.size();
    const std::string op_name = Name(spec.kind);
    const std::string what = DescribeOp(spec);
    auto fail = [&](const std::string& message) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", message));
    };
    if (spec.seq < 0) return fail("seq must be >= 0");
    switch (spec.kind) {
      case OpKind::kAllReduce:
      case OpKind::kBroadcast:
      case OpKind::kReduce:
      case OpKind::kAllGather:
      case OpKind::kReduceScatter:
      case OpKind::kGather:
      case OpKind::kScatter:
      case OpKind::kAllToAll:
      case OpKind::kBarrier:
      case OpKind::kSend:
      case OpKind::kRecv:
      case OpKind::kNop:
        break;
      default:
        return fail("unknown op kind");
    }
    // Root and peer are ranks of the op's group.
    const std::string of_group =
        spec.group == kWorldGroup
            ? absl::StrCat("a world of size ", world)
            : absl::StrCat("group '", spec.group, "' of size ", world,
                           " (group ranks)");
    if (HasRoot(spec.kind) && (spec.root < 0 || spec.root >= world)) {
      return fail(
          absl::StrCat("root ", spec.root, " is not a rank of ", of_group));
    }
    if (spec.kind == OpKind::kSend || spec.kind == OpKind::kRecv) {
      if (spec.peer < 0 || spec.peer >= world) {
        return fail(
            absl::StrCat("peer ", spec.peer, " is not a rank of ", of_group));
      }
      if (spec.peer == rank) {
        return fail(absl::StrCat("peer ", spec.peer,
                                 " is this rank; send/recv need another rank"));
      }
    }
    if (spec.timeout.count() < 0) return fail("timeout must be >= 0");

    Resolved out;
    BoundOp& op = out.op;
    op.kind = spec.kind;
    op.root = spec.root;
    op.peer = spec.peer;
    op.reduce_op = spec.reduce_op;
    op.premul_scale = spec.premul_scale;
    op.seq = spec.seq;
    op.timeout =
        spec.timeout.count() > 0 ? spec.timeout : config_.default_op_timeout;
    op.agree_first = spec.agree;
    if (spec.kind == OpKind::kBarrier || spec.kind == OpKind::kNop) return out;

    auto lookup =
        [&](const std::string& name,
            const char* role) -> absl::StatusOr<std::shared_ptr<Tensor>> {
      if (name.empty()) {
        return fail(absl::StrCat(op_name, " needs ", role, " tensor"));
      }
      auto tensor = store_.Lookup(name);
      if (!tensor.ok()) {
        return absl::NotFoundError(absl::StrCat(what, ": no tensor named '",
                                                name, "' (", role, ") on rank ",
                                                rank));
      }
      return tensor;
    };
    // A tensor a rank does not use may be left out (gather's output and
    // scatter's input off the root).
    auto optional = [&](const std::string& name) -> std::shared_ptr<Tensor> {
      if (name.empty()) return nullptr;
      auto tensor = store_.Lookup(name);
      return tensor.ok() ? *tensor : nullptr;
    };
    auto same_dtype = [&](const Tensor& a, const Tensor& b) -> absl::Status {
      if (a.dtype() == b.dtype()) return absl::OkStatus();
      return fail(absl::StrCat("input '", a.name(), "' is ",
                               std::string(DTypeName(a.dtype())),
                               " but output '", b.name(), "' is ",
                               std::string(DTypeName(b.dtype()))));
    };
    auto divisible = [&](const Tensor& t) -> absl::Status {
      if (t.numel() % world == 0) return absl::OkStatus();
      return fail(absl::StrCat("tensor '", t.name(), "' has ", t.numel(),
                               " elements, not a multiple of the world size ",
                               world));
    };
    auto at = [](const Tensor& t, int64_t elements) {
      return t.data() + elements * static_cast<int64_t>(DTypeSize(t.dtype()));
    };

    const bool in_place = spec.output.empty() || spec.output == spec.input;
    const bool root = rank == spec.root;
    std::shared_ptr<Tensor> in;
    std::shared_ptr<Tensor> outp;

    switch (spec.kind) {
      case OpKind::kAllReduce:
      case OpKind::kBroadcast:
      case OpKind::kReduce:
      case OpKind::kAllToAll: {
        CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
        outp = in;
        if (!in_place) {
          CCL_ASSIGN_OR_RETURN(outp, lookup(spec.output, "an output"));
          CCL_RETURN_IF_ERROR(same_dtype(*in, *outp));
          if (outp->numel() != in->numel()) {
            return fail(absl::StrCat("input '", in->name(), "' has ",
                                     in->numel(), " elements but output '",
                                     outp->name(), "' has ", outp->numel()));
          }
        }
        op.count = in->numel();
        if (spec.kind == OpKind::kAllToAll) {
          CCL_RETURN_IF_ERROR(divisible(*in));
          op.count = in->numel() / world;
        }
        op.input = in->data();
        op.output = outp->data();
        break;
      }
      case OpKind::kAllGather:
      case OpKind::kGather: {
        const bool gather = spec.kind == OpKind::kGather;
        CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
        if (in_place) {
          CCL_RETURN_IF_ERROR(divisible(*in));
          op.count = in->numel() / world;
          op.input = at(*in, rank * op.count);
          op.output = (!gather || root) ? in->data() : nullptr;
          break;
        }
        op.count = in->numel();
        op.input = in->data();
        if (gather && !root) {
          outp = optional(spec.output);
        } else {
          CCL_ASSIGN_OR_RETURN(outp, lookup(spec.output, "an output"));
        }
        if (outp) {
          CCL_RETURN_IF_ERROR(same_dtype(*in, *outp));
          if (outp->numel() != world * in->numel()) {
            return fail(absl::StrCat(
                "output '", outp->name(), "' has ", outp->numel(),
                " elements but needs world size ", world, " x input '",
                in->name(), "' (", in->numel(), ") = ", world * in->numel()));
          }
          if (!gather || root) op.output = outp->data();
        }
        break;
      }
      case OpKind::kReduceScatter:
      case OpKind::kScatter: {
        const bool scatter = spec.kind == OpKind::kScatter;
        if (in_place) {
          CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
          CCL_RETURN_IF_ERROR(divisible(*in));
          op.count = in->numel() / world;
          op.input = (!scatter || root) ? in->data() : nullptr;
          op.output = at(*in, rank * op.count);
          break;
        }
        CCL_ASSIGN_OR_RETURN(outp, lookup(spec.output, "an output"));
        op.count = outp->numel();
        op.output = outp->data();
        if (scatter && !root) {
          in = optional(spec.input);
        } else {
          CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
        }
        if (in) {
          CCL_RETURN_IF_ERROR(same_dtype(*in, *outp));
          if (in->numel() != world * outp->numel()) {
            return fail(
                absl::StrCat("input '", in->name(), "' has ", in->numel(),
                             " elements but needs world size ", world,
                             " x output '", outp->name(), "' (", outp->numel(),
                             ") = ", world * outp->numel()));
          }
          if (!scatter || root) op.input = in->data();
        }
        break;
      }
      case OpKind::kSend: {
        CCL_ASSIGN_OR_RETURN(in, lookup(spec.input, "an input"));
        op.count = in->numel();
        op.input = in->data();
        break;
      }
      case OpKind::kRecv: {
        const std::string& target =
            spec.output.empty() ? spec.input : spec.output;
        CCL_ASSIGN_OR_RETURN(outp, lookup(target, "a destination"));
        op.count = outp->numel();
        op.output = outp->data();
        break;
      }
      default:
        break;
    }
    const Tensor& typed = in ? *in : *outp;
    op.dtype = typed.dtype();
    CCL_RETURN_IF_ERROR(comm.Supports(op.kind, op.dtype, op.reduce_op));
    if (in) out.tensors.push_back(in);
    if (outp && outp != in) out.tensors.push_back(outp);
    return out;
  }

  // A flight-recorder entry: the op as submitted, its work (live state and
  // timing; it holds no tensors once complete), or why it was refused.
  struct FlightEntry {
    OpSpec spec;
    std::shared_ptr<OpWork> work;
    absl::Status refused;
  };

  void Record(FlightEntry entry) {
    std::lock_guard<std::mutex> lock(flight_mutex_);
    std::deque<FlightEntry>& entries = flight_[entry.spec.group];
    entries.push_back(std::move(entry));
    if (entries.size() > kFlightRecords) entries.pop_front();
  }

  void Remember(const std::shared_ptr<Work>& work) {
    std::lock_guard<std::mutex> lock(works_mutex_);
    works_.emplace(work->id(), work);
    for (auto it = works_.begin();
         works_.size() > kMaxRememberedWorks && it != works_.end();) {
      const WorkState state = it->second->state();
      if (state == WorkState::kCompleted || state == WorkState::kFailed) {
        it = works_.erase(it);
      } else {
        ++it;
      }
    }
  }

  const WorkerConfig config_;
  TensorStore store_;

  mutable std::mutex mutex_;
  bool shutdown_ = false;
  int rank_ = 0;
  int world_size_ = 0;
  int64_t generation_ = 0;
  std::shared_ptr<Executor> world_;
  // The KV store of the current generation (FormWorld's), for Gloo
  // rendezvous of subgroups.
  KvStore* kv_ = nullptr;
  struct GroupEntry {
    std::vector<int> ranks;  // world ranks, in group-rank order
    int group_rank = -1;     // -1: not a member
    bool creating = true;
    std::shared_ptr<Executor> executor;  // members, once created
  };
  std::map<std::string, GroupEntry> groups_;
  // Stop the executors of replaced generations (see FormWorld).
  struct Reaper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Reaper> reapers_;

  std::atomic<int64_t> next_work_id_{1};
  std::mutex works_mutex_;
  mutable std::mutex flight_mutex_;
  std::map<std::string, std::deque<FlightEntry>> flight_;
  std::map<int64_t, std::shared_ptr<Work>> works_;
};

}  // namespace

absl::Status ValidateGroupName(const std::string& name) {
  if (name == kWorldGroup) {
    return absl::AlreadyExistsError(
        "the group name 'world' is taken by the world group");
  }
  if (absl::Status s = ValidateTensorName(name); !s.ok()) {
    std::string message(s.message());
    if (absl::StartsWith(message, "tensor name")) {
      message = absl::StrCat("group name", message.substr(11));
    }
    return absl::InvalidArgumentError(message);
  }
  return absl::OkStatus();
}

absl::Status ValidateGroupRanks(const std::vector<int>& ranks, int world_size) {
  if (ranks.empty()) {
    return absl::InvalidArgumentError("a group needs at least one rank");
  }
  std::vector<bool> seen(static_cast<size_t>(std::max(world_size, 0)), false);
  for (int rank : ranks) {
    if (rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is not a rank of a world of size ",
                       world_size, " (group ranks are world ranks)"));
    }
    if (seen[static_cast<size_t>(rank)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is listed twice"));
    }
    seen[static_cast<size_t>(rank)] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerCore>> WorkerCore::Create(
    WorkerConfig config) {
  if (config.device.kind != DeviceKind::kCpu) {
#if CCL_HAVE_CUDA
    const int count = cuda::DeviceCount();
    if (count == 0) {
      // Same code as a build without CUDA: nothing here can run on a GPU.
      return absl::UnimplementedError(absl::StrCat(
          "device ", DeviceName(config.device),
          ": no CUDA device is visible to this worker (NCCL backend built, "
          "but cudaGetDeviceCount found none); start it with device cpu"));
    }
    if (config.device.index < 0 || config.device.index >= count) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", DeviceName(config.device), " does not exist: ", count,
          " CUDA device(s) are visible"));
    }
    if (absl::Status s = cuda::SetDevice(config.device.index); !s.ok()) {
      return s;
    }
#else
    return absl::UnimplementedError(absl::StrCat(
        "device ", DeviceName(config.device),
        ": this worker was built without CUDA/NCCL, so it has only the Gloo "
        "(cpu) backend; start it with device cpu"));
#endif
  }
  if (config.tensor_quota_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor quota must be >= 0, got ", config.tensor_quota_bytes));
  }
  if (config.default_op_timeout.count() <= 0 ||
      config.seq_gap_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        "default op timeout and seq gap timeout must be positive");
  }
  return std::unique_ptr<WorkerCore>(new WorkerCoreImpl(std::move(config)));
}

}  // namespace ccl
