#include <cuda_runtime.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/check/device_check.h"
#include "server/check/pattern.h"
#include "server/cuda/check_kernels.h"
#include "server/cuda/device_memory.h"

namespace ccl::check {
namespace {

// The device-side check, for the dtypes the kernels cover.
// The dtypes the check kernels cover (fp8 is checked through host copies).
bool KernelsCheck(DType dtype) {
  return dtype != DType::kFp8E4M3 && dtype != DType::kFp8E5M2;
}

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Fills and zeroes on the device (legacy default stream, which the
// communicator's blocking stream orders after).
absl::Status PrepareCheckOnDevice(const BoundOp& op, int device, int rank,
                                  int world, DType type) {
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
                                           int rank, int world, DType type) {
  const CheckPlan plan = PlanCheck(op, rank, world);
  if (plan.count == 0) return 0;
  CCL_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  cuda::CheckSpec spec;
  spec.type = type;
  spec.reduce = op.reduce_op;
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

}  // namespace

absl::StatusOr<int64_t> RunCheckedOnDevice(
    const BoundOp& op, int rank, int world, const std::vector<Buffer>& buffers,
    const std::function<absl::Status()>& run) {
  int device = 0;
  for (const Buffer& b : buffers) {
    if (b.device.kind == DeviceKind::kCuda) device = b.device.index;
  }
  if (KernelsCheck(op.dtype)) {
    // On the device, as nccl-tests does: only the count comes back.
    CCL_RETURN_IF_ERROR(
        PrepareCheckOnDevice(op, device, rank, world, op.dtype));
    CCL_RETURN_IF_ERROR(run());
    auto wrong = CountWrongOnDevice(op, device, rank, world, op.dtype);
    if (!wrong.ok()) return wrong.status();
    return *wrong;
  }
  // Other dtypes (fp8): prepare and check on host copies (slow, but only
  // for --check), with the op's pointers translated into them.
  std::vector<std::vector<std::byte>> host(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    host[i].resize(static_cast<size_t>(buffers[i].bytes));
    CCL_RETURN_IF_ERROR(cuda::CopyToHost(buffers[i].device.index,
                                         host[i].data(), buffers[i].data,
                                         host[i].size()));
  }
  // Strictly inside a tensor: two tensors may be adjacent in device
  // memory, and the end of one (the start of the next) mapped into the
  // first one's host copy would write past it.
  auto to_host = [&](const void* p) -> void* {
    if (p == nullptr) return nullptr;
    const auto* b = static_cast<const std::byte*>(p);
    for (size_t i = 0; i < buffers.size(); ++i) {
      const std::byte* base = buffers[i].data;
      if (b >= base && b < base + buffers[i].bytes) {
        return host[i].data() + (b - base);
      }
    }
    return nullptr;
  };
  BoundOp host_op = op;
  host_op.input = to_host(op.input);
  host_op.output = to_host(op.output);
  PrepareCheck(host_op, rank, world);
  for (size_t i = 0; i < buffers.size(); ++i) {
    CCL_RETURN_IF_ERROR(cuda::CopyToDevice(buffers[i].device.index,
                                           buffers[i].data, host[i].data(),
                                           host[i].size()));
  }
  CCL_RETURN_IF_ERROR(run());
  for (size_t i = 0; i < buffers.size(); ++i) {
    CCL_RETURN_IF_ERROR(cuda::CopyToHost(buffers[i].device.index,
                                         host[i].data(), buffers[i].data,
                                         host[i].size()));
  }
  return CountWrong(host_op, rank, world);
}

}  // namespace ccl::check
