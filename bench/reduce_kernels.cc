// The CPU backend's reduce kernels alone (server/comm/gloo/reduce_kernels.h):
// what one step of a reduction costs per dtype at the same bytes, so that a
// narrow float's conversions can be compared with float32's plain add. No
// peer: torch's Gloo has no bfloat16 or fp8 reductions (pytorch#111131).
//
//   build/bench/reduce_kernels                  # 1, 16, 64 MiB, sum
//   build/bench/reduce_kernels --op max --iters 20
#include "server/comm/gloo/reduce_kernels.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/element.h"
#include "common/types.h"

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  ccl::ReduceOp op = ccl::ReduceOp::kSum;
  int iters = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--op") {
      auto parsed = ccl::ParseReduceOp(argv[i + 1]);
      if (!parsed.ok()) {
        std::fprintf(stderr, "%s\n", parsed.status().ToString().c_str());
        return 2;
      }
      op = *parsed;
    } else if (flag == "--iters") {
      iters = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: %s [--op sum|prod|min|max] [--iters N]\n",
                   argv[0]);
      return 2;
    }
  }
  const ccl::DType dtypes[] = {ccl::DType::kFloat32, ccl::DType::kFloat16,
                               ccl::DType::kBFloat16, ccl::DType::kFp8E4M3,
                               ccl::DType::kFp8E5M2};
  std::printf(
      "# out[i] = a[i] %s b[i], best of %d calls; GB/s counts the "
      "bytes of one operand\n",
      std::string(ccl::ReduceOpName(op)).c_str(), iters);
  std::printf("%10s %10s %12s %10s %10s\n", "size", "dtype", "elements",
              "time us", "GB/s");
  for (size_t mib : {1, 16, 64}) {
    const size_t bytes = mib << 20;
    for (ccl::DType dtype : dtypes) {
      const size_t n = bytes / ccl::DTypeSize(dtype);
      std::vector<std::byte> a(bytes), b(bytes);
      for (size_t i = 0; i < n; ++i) {
        ccl::StoreElement(dtype, a.data(), i, 1.0 + (i % 7) * 0.25);
        ccl::StoreElement(dtype, b.data(), i, 0.5 + (i % 5) * 0.125);
      }
      const ccl::ReduceKernel kernel = ccl::ReduceKernelFor(dtype, op);
      double best = 1e30;
      for (int it = 0; it < iters; ++it) {
        // In place into a, as Gloo calls it; a grows, which is fine for
        // timing (no value reaches inf in 20 sums of these).
        const auto start = Clock::now();
        kernel(a.data(), a.data(), b.data(), n);
        const double us =
            std::chrono::duration<double, std::micro>(Clock::now() - start)
                .count();
        best = std::min(best, us);
      }
      std::printf("%6zu MiB %10s %12zu %10.1f %10.2f\n", mib,
                  std::string(ccl::DTypeName(dtype)).c_str(), n, best,
                  static_cast<double>(bytes) / best / 1e3);
    }
  }
  return 0;
}
