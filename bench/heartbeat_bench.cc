// A formed world at steady state: what its heartbeats cost the coordinator,
// and how long the loss of one rank takes to be noticed. A real cccoord (a
// child process) serves a world of N ranks; N simulated workers
// (bench/simulated_world.h) form it, then heartbeat for --seconds at the
// interval the coordinator tells them, first beats staggered by rank as
// ccworker staggers them. Then one rank stops beating, as a killed worker
// does, and the run goes on until a heartbeat reply reports the world
// DEGRADED.
//
//   heartbeat_bench [options] N
//     --seconds S             steady-state window (default 60)
//     --interval-ms I         cccoord --heartbeat-interval-ms (default 1000)
//     --timeout-ms T          cccoord --heartbeat-timeout-ms (default 10000)
//     --max-heartbeat-rate R  cccoord --max-heartbeat-rate (default 4096)
//     --channels C            connections the workers share (default 64)
//     --cccoord PATH          the coordinator binary (default: this build's)
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/coordinator_process.h"
#include "bench/simulated_world.h"
#include "common/world_keys.h"

namespace {

using ccl::bench::CoordinatorProcess;
using ccl::bench::HeartbeatStats;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Options {
  int n = 0;
  int seconds = 60;
  int64_t interval_ms = 1000;
  int64_t timeout_ms = 10000;
  int64_t max_rate = 4096;
  int channels = 64;
  std::string cccoord = ccl::bench::DefaultCoordinatorBinary();
  bool progress = false;
};

double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  const size_t at =
      std::min(values.size() - 1, static_cast<size_t>(p * (values.size() - 1)));
  std::nth_element(values.begin(), values.begin() + at, values.end());
  return values[at];
}

int Run(const Options& options) {
  const std::string log =
      absl::StrCat("/tmp/heartbeat_bench.cccoord.", getpid(), ".log");
  auto coordinator = CoordinatorProcess::Start(
      options.cccoord,
      {"--world-size", absl::StrCat(options.n), "--register-timeout-ms",
       "120000", "--heartbeat-interval-ms", absl::StrCat(options.interval_ms),
       "--heartbeat-timeout-ms", absl::StrCat(options.timeout_ms),
       "--max-heartbeat-rate", absl::StrCat(options.max_rate), "--log-level",
       "warn"},
      log);
  if (!coordinator.ok()) {
    std::printf("failed: %s\n",
                std::string(coordinator.status().message()).c_str());
    return 1;
  }
  ccl::bench::SimulatedWorld workers((*coordinator)->address(),
                                     options.channels);
  const ccl::bench::FormedWorld world = workers.Form(options.n, 128);
  if (!world.error.empty()) {
    std::printf("failed to form the world: %s\n", world.error.c_str());
    return 1;
  }
  workers.set_progress(options.progress);
  // cccoord's sweep period (coordinator/main.cc).
  const int64_t sweep_ms =
      std::max<int64_t>(10, std::min<int64_t>(options.interval_ms, 1000));
  std::printf(
      "# N=%d formed in %.3f s; told interval %lld ms, timeout %lld ms "
      "(configured %lld / %lld, max rate %lld/s); sweep %lld ms; %d "
      "channel(s)%s\n",
      options.n, world.formed_s, static_cast<long long>(world.interval_ms),
      static_cast<long long>(world.timeout_ms),
      static_cast<long long>(options.interval_ms),
      static_cast<long long>(options.timeout_ms),
      static_cast<long long>(options.max_rate),
      static_cast<long long>(sweep_ms), options.channels,
      options.progress ? "; every beat reports new progress" : "");

  const auto before = (*coordinator)->Sample();
  const Clock::time_point start = Clock::now();
  HeartbeatStats steady =
      workers.Heartbeat(world, milliseconds(options.seconds * 1000), -1,
                        milliseconds(0), nullptr);
  const double wall =
      std::chrono::duration<double>(Clock::now() - start).count();
  const auto after = (*coordinator)->Sample();
  if (!before.ok() || !after.ok()) {
    std::printf("failed: cannot read the coordinator's /proc entries\n");
    return 1;
  }
  std::vector<double>& latency = steady.latencies_us;
  const size_t replies = latency.size();
  const double p50 = Percentile(latency, 0.50);
  const double p99 = Percentile(latency, 0.99);
  const double max =
      latency.empty() ? 0 : *std::max_element(latency.begin(), latency.end());
  std::printf("%8s %7s %9s %9s %9s %10s %10s %10s %8s %9s\n", "N", "window",
              "beats", "beats/s", "failed", "coordCPU", "p50", "p99", "max",
              "peakRSS");
  std::printf("%8s %7s %9s %9s %9s %10s %10s %10s %8s %9s\n", "", "(s)", "", "",
              "", "(% core)", "(us)", "(us)", "(ms)", "(MiB)");
  std::printf("%8d %7.1f %9lld %9.0f %9lld %10.2f %10.0f %10.0f %8.1f %9.1f\n",
              options.n, wall, static_cast<long long>(steady.sent),
              static_cast<double>(replies) / wall,
              static_cast<long long>(steady.failed),
              100.0 * (after->cpu_s - before->cpu_s) / wall, p50, p99,
              max / 1000.0, static_cast<double>(after->peak_kb) / 1024.0);
  if (steady.failed > 0) {
    std::printf("# first failure: %s\n", steady.first_error.c_str());
  }
  if (options.progress) {
    // What the coordinator published from the beats (the arrival check
    // reads these keys): the last finished_below of rank 0's worker.
    const int rank = world.rank_of[0];
    std::printf("# progress key %s reads \"%s\"\n",
                ccl::ProgressKey("world", rank).c_str(),
                workers.KvGet(world, ccl::ProgressKey("world", rank)).c_str());
  }

  // The victim stops after one interval of normal beating; give the
  // detection its bound and ten seconds more.
  const int victim = options.n / 2;
  double lost_after_s = -1;
  const milliseconds patience(world.interval_ms + world.timeout_ms + sweep_ms +
                              10000);
  HeartbeatStats loss = workers.Heartbeat(
      world, patience, victim, milliseconds(world.interval_ms), &lost_after_s);
  const double bound_s =
      static_cast<double>(world.timeout_ms + sweep_ms) / 1000.0;
  if (lost_after_s < 0) {
    std::printf("# rank %d stopped beating: NOT declared lost within %.1f s\n",
                victim, static_cast<double>(patience.count()) / 1000.0);
    return 1;
  }
  std::printf(
      "# rank %d stopped beating: declared lost %.2f s after its last beat "
      "(bound: timeout + sweep = %.2f s); %lld beats meanwhile, %lld failed\n",
      victim, lost_after_s, bound_s, static_cast<long long>(loss.sent),
      static_cast<long long>(loss.failed));
  unlink(log.c_str());
  return 0;
}

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--seconds S] [--interval-ms I] [--timeout-ms T] "
               "[--max-heartbeat-rate R] [--channels C] [--progress] "
               "[--cccoord PATH] N\n"
               "  --progress: every beat reports new progress for the world "
               "group (finished_below), so the coordinator publishes a "
               "progress key per beat\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // As in cccoord: Debian's absl tracks lock graphs unless told not to.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  ccl::bench::RaiseFileLimit();
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto int64 = [&](int64_t& out) {
      return i + 1 < argc && absl::SimpleAtoi(argv[++i], &out);
    };
    auto int32 = [&](int& out) {
      return i + 1 < argc && absl::SimpleAtoi(argv[++i], &out);
    };
    bool ok = true;
    if (arg == "--seconds") {
      ok = int32(options.seconds) && options.seconds > 0;
    } else if (arg == "--interval-ms") {
      ok = int64(options.interval_ms) && options.interval_ms > 0;
    } else if (arg == "--timeout-ms") {
      ok = int64(options.timeout_ms) && options.timeout_ms > 0;
    } else if (arg == "--max-heartbeat-rate") {
      ok = int64(options.max_rate);
    } else if (arg == "--channels") {
      ok = int32(options.channels) && options.channels > 0;
    } else if (arg == "--progress") {
      options.progress = true;
    } else if (arg == "--cccoord") {
      ok = i + 1 < argc;
      if (ok) options.cccoord = argv[++i];
    } else {
      ok = absl::SimpleAtoi(arg, &options.n) && options.n > 1;
    }
    if (!ok) return Usage(argv[0]);
  }
  if (options.n <= 1) return Usage(argv[0]);
  return Run(options);
}
