// What the first touch of fresh memory costs on this machine, in 4 KiB pages
// and in the huge pages common/huge_pages.h asks for: the cost a tensor's
// allocation and fill, a client's read of a tensor and Gloo's staging pay
// once per buffer. On a VM each 4 KiB fault exits to the hypervisor. For
// each size, p50 of --rounds: a fresh buffer (aligned_alloc, as the worker's
// host memory) written once (first touch), then again (the same pages,
// resident: the memory's own speed), each way.
//
//   ./build/bench/first_touch [--rounds 5] [--sizes 4194304,67108864,...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/huge_pages.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Touches {
  double first_us = 0;
  double again_us = 0;
};

Touches TouchOnce(size_t bytes, bool advise) {
  auto* data = static_cast<char*>(std::aligned_alloc(64, bytes));
  if (data == nullptr) {
    std::fprintf(stderr, "out of memory allocating %zu bytes\n", bytes);
    std::exit(1);
  }
  const auto start = Clock::now();
  if (advise) ccl::AdviseHugePages(data, bytes);
  std::memset(data, 1, bytes);
  const auto first = Clock::now();
  std::memset(data, 2, bytes);
  const auto again = Clock::now();
  // Read back so the stores cannot be dropped.
  volatile char sink = data[bytes / 2];
  (void)sink;
  std::free(data);
  return {std::chrono::duration<double, std::micro>(first - start).count(),
          std::chrono::duration<double, std::micro>(again - first).count()};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 5;
  std::vector<size_t> sizes = {size_t{4} << 20, size_t{16} << 20,
                               size_t{64} << 20, size_t{256} << 20};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--rounds" && has_value) {
      if (!absl::SimpleAtoi(argv[++i], &rounds) || rounds < 1) {
        std::fprintf(stderr, "--rounds takes a positive count\n");
        return 2;
      }
    } else if (arg == "--sizes" && has_value) {
      sizes.clear();
      for (absl::string_view s : absl::StrSplit(argv[++i], ',')) {
        size_t bytes = 0;
        if (!absl::SimpleAtoi(s, &bytes) || bytes == 0) {
          std::fprintf(stderr, "--sizes takes byte counts, e.g. 4194304\n");
          return 2;
        }
        sizes.push_back(bytes);
      }
    } else {
      std::fprintf(stderr,
                   "usage: first_touch [--rounds N] [--sizes B1,B2,...]\n");
      return 2;
    }
  }
  std::printf("# first_touch: p50 of %d rounds; algbw = bytes / time (GB/s)\n",
              rounds);
  std::printf("%12s %24s %24s %14s %8s\n", "", "4 KiB pages",
              "huge pages advised", "written again", "ratio");
  std::printf("%12s %12s %11s %12s %11s %14s %8s\n", "size(B)", "time(us)",
              "algbw", "time(us)", "algbw", "time(us)", "4K/huge");
  for (size_t bytes : sizes) {
    std::vector<double> small, huge, again;
    for (int r = 0; r < rounds; ++r) {
      const Touches s = TouchOnce(bytes, false);
      const Touches h = TouchOnce(bytes, true);
      small.push_back(s.first_us);
      huge.push_back(h.first_us);
      again.push_back(s.again_us);
    }
    const double s = Median(small), h = Median(huge), a = Median(again);
    std::printf("%12zu %12.0f %11.2f %12.0f %11.2f %14.0f %8.2f\n", bytes, s,
                bytes / s / 1e3, h, bytes / h / 1e3, a, s / h);
  }
  return 0;
}
