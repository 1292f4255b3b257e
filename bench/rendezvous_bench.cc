// Rendezvous cost of the coordinator at scale. For each N, a real cccoord
// (a child process, so that its CPU time and memory are its own) serves a
// world of N ranks; N simulated workers (bench/simulated_world.h) register
// and run the NCCL unique-id rendezvous as ccworker does: one id below 129
// ranks, one per 128 ranks above (ncclCommInitRankScalable), handed out
// through the KV store. With --generations G the world is re-formed G-1 more
// times (a rank asks for a new generation, everyone re-registers and runs
// the rendezvous again), to show what each generation leaves behind.
//
//   rendezvous_bench [options] [N ...]      (default N: 1024 4096 16384)
//     --channels C           connections the workers share (default 64)
//     --ranks-per-root R     NCCL ranks per unique id; 0: one id (default 128)
//     --generations G        formations per N (default 1)
//     --cccoord PATH         the coordinator binary (default: this build's)
//     --ranks-per-host H     register as host agents do (cchostagent): one
//                            RegisterHost per H workers; default 1, one
//                            Register per worker
//     --kv-ids               every rank reads the ids from the KV store, as
//                            before Register could carry them (2 calls a
//                            rank); default: ask for them with Register
//     --logic-only           the same protocol against CoordinatorCore in
//                            this process, no gRPC: what the coordinator's
//                            own code costs, apart from its transport
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "bench/coordinator_process.h"
#include "bench/simulated_world.h"
#include "common/unique_id_plan.h"
#include "coordinator/coordinator_core.h"
#include "spdlog/spdlog.h"

namespace {

using ccl::bench::CoordinatorProcess;
using ccl::bench::FormedWorld;
using ccl::bench::ProcessSample;
using ccl::bench::SimulatedWorld;

struct Options {
  std::vector<int> sizes;
  int channels = 64;
  int ranks_per_root = 128;
  int generations = 1;
  bool logic_only = false;
  bool kv_ids = false;
  int ranks_per_host = 1;
  std::string cccoord = ccl::bench::DefaultCoordinatorBinary();
};

int Usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--channels C] [--ranks-per-root R] "
               "[--generations G] [--cccoord PATH] [--ranks-per-host H] "
               "[--kv-ids] "
               "[--logic-only] [N ...]\n",
               argv0);
  return 2;
}

// GET /metrics from the coordinator's metrics endpoint; gauges by name.
std::map<std::string, double> ScrapeMetrics(int port) {
  std::map<std::string, double> out;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return out;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string text;
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
      0) {
    const std::string request =
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      ssize_t got;
      while ((got = read(fd, buffer, sizeof(buffer))) > 0) {
        text.append(buffer, static_cast<size_t>(got));
      }
    }
  }
  close(fd);
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#' || line.find('{') != line.npos) continue;
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    double value = 0;
    if (parts.size() == 2 && absl::SimpleAtod(parts[1], &value)) {
      out[std::string(parts[0])] = value;
    }
  }
  return out;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

// Asks for a new generation through rank 0's heartbeat, as a worker whose
// communicator broke does; the coordinator starts it once every member has
// been heard from since (a rank that died would not be), so every simulated
// worker then beats once, as live workers would within an interval.
bool Reform(const std::string& address, SimulatedWorld& workers,
            const FormedWorld& world) {
  auto stub = ccl::v1::Coordinator::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  for (size_t w = 0; w < world.rank_of.size(); ++w) {
    if (world.rank_of[w] != 0) continue;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    ccl::v1::HeartbeatRequest request;
    request.set_rank(0);
    request.set_generation(world.generation);
    request.set_worker_id(world.worker_id_of[w]);
    request.set_worker_secret(world.secret_of[w]);
    request.set_reform_reason("rendezvous_bench: next generation");
    ccl::v1::HeartbeatResponse response;
    if (!stub->Heartbeat(&context, request, &response).ok()) return false;
    return response.generation() > world.generation ||
           workers.BeatOnce(world) > world.generation;
  }
  return false;
}

double CpuSeconds() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) /
             1e6;
}

int64_t RssKb() {
  std::ifstream status("/proc/self/status");
  std::string key;
  int64_t kb = 0;
  while (status >> key) {
    if (key == "VmRSS:") {
      status >> kb;
      return kb;
    }
  }
  return 0;
}

// The worker protocol of simulated_world.cc, against the logic directly.
int RunLogicOnly(const Options& options, int n) {
  namespace co = ccl::coordinator;
  co::CoordinatorOptions core_options;
  core_options.world_size = n;
  core_options.default_wait_timeout = std::chrono::seconds(120);
  core_options.heartbeat_timeout = std::chrono::hours(1);
  core_options.sweep_period = std::chrono::milliseconds(0);
  auto created = co::CoordinatorCore::Create(core_options);
  if (!created.ok()) return 1;
  co::CoordinatorCore& core = **created;
  const int64_t rss_before = RssKb();
  const double cpu_before = CpuSeconds();
  std::atomic<int> left{n};
  std::atomic<bool> failed{false};
  std::promise<void> all_done;
  auto finish = [&](bool ok) {
    if (!ok) failed = true;
    if (--left == 0) all_done.set_value();
  };
  auto wait = [&](int64_t generation, std::vector<std::string> keys,
                  std::function<void()> then) {
    core.KvWait(core.NewWaitId(), generation, std::move(keys),
                std::chrono::milliseconds(0), true,
                [&, then](absl::StatusOr<co::KvWaitResult> r) {
                  if (!r.ok()) return finish(false);
                  then();
                });
  };
  const std::string id(2 * ccl::nccl::kUniqueIdBytes, 'a');
  auto rendezvous = [&](int rank, int64_t generation) {
    const std::string prefix = absl::StrCat("gen", generation, "/world");
    const auto plan = ccl::nccl::PlanUniqueIds(rank, n, options.ranks_per_root);
    if (plan.ids == 1) {
      if (rank == 0) {
        return finish(
            core.KvSet(generation, ccl::nccl::UniqueIdKey(prefix), id).ok());
      }
      return wait(generation, {ccl::nccl::UniqueIdKey(prefix)},
                  [&] { finish(true); });
    }
    if (plan.posts &&
        !core.KvSet(generation, ccl::nccl::UniqueIdKey(prefix, plan.block), id)
             .ok()) {
      failed = true;
    }
    if (plan.gathers) {
      std::vector<std::string> keys;
      for (int b = 0; b < plan.ids; ++b) {
        keys.push_back(ccl::nccl::UniqueIdKey(prefix, b));
      }
      return wait(generation, std::move(keys), [&, prefix, plan, generation] {
        finish(core.KvSet(generation, ccl::nccl::UniqueIdListKey(prefix),
                          // Packed ids of 36 bytes (simulated_world.cc).
                          std::string(plan.ids * 37, 'x'))
                   .ok());
      });
    }
    wait(generation, {ccl::nccl::UniqueIdListKey(prefix)},
         [&] { finish(true); });
  };
  const auto start = std::chrono::steady_clock::now();
  for (int w = 0; w < n; ++w) {
    co::RegisterRequest request;
    request.address =
        absl::StrCat("10.0.", w / 250 % 250, ".", w % 250, ":29500");
    request.host = absl::StrCat("node", w / 8);
    request.device = {ccl::DeviceKind::kCuda, w % 8};
    request.worker_id = absl::StrCat("sim-", w);
    if (!options.kv_ids) request.nccl_ranks_per_root = options.ranks_per_root;
    core.Register(core.NewWaitId(), std::move(request),
                  [&](absl::StatusOr<co::RegisterResult> r) {
                    if (!r.ok()) return finish(false);
                    // The ids came with the reply: nothing left to read.
                    if (!r->kv.empty()) return finish(true);
                    rendezvous(r->rank, r->generation);
                  });
  }
  all_done.get_future().wait();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::printf("%8d %9.3f %9.3f %9.2f %9.2f %9.2f%s\n", n, wall, wall / n * 1e6,
              CpuSeconds() - cpu_before, (CpuSeconds() - cpu_before) / n * 1e6,
              static_cast<double>(RssKb() - rss_before) / n,
              failed ? "  (a call failed)" : "");
  std::fflush(stdout);
  return failed ? 1 : 0;
}

int RunSize(const Options& options, int n) {
  const int metrics_port = FreePort();
  const std::string log =
      absl::StrCat("/tmp/rendezvous_bench.cccoord.", n, ".", getpid(), ".log");
  auto coordinator = CoordinatorProcess::Start(
      options.cccoord,
      {"--world-size", absl::StrCat(n), "--register-timeout-ms", "120000",
       // The simulated workers do not heartbeat here (heartbeat_bench does).
       "--heartbeat-timeout-ms", "3600000", "--log-level", "warn",
       "--metrics-port", absl::StrCat(metrics_port)},
      log);
  if (!coordinator.ok()) {
    std::printf("%8d  failed: %s\n", n,
                std::string(coordinator.status().message()).c_str());
    return 1;
  }
  const absl::StatusOr<ProcessSample> idle = (*coordinator)->Sample();
  SimulatedWorld workers((*coordinator)->address(), options.channels);
  int failures = 0;
  FormedWorld world;
  for (int g = 1; g <= options.generations; ++g) {
    if (g > 1 && !Reform((*coordinator)->address(), workers, world)) {
      std::printf("%8d  failed: the coordinator did not start a generation\n",
                  n);
      return 1;
    }
    const absl::StatusOr<ProcessSample> before = (*coordinator)->Sample();
    const double workers_cpu_before = CpuSeconds();
    world = workers.Form(n, options.ranks_per_root, !options.kv_ids,
                         options.ranks_per_host);
    const double workers_cpu = CpuSeconds() - workers_cpu_before;
    const absl::StatusOr<ProcessSample> after = (*coordinator)->Sample();
    if (!world.error.empty() || !before.ok() || !after.ok() || !idle.ok()) {
      std::printf("%8d  failed: %s\n", n,
                  !world.error.empty()
                      ? world.error.c_str()
                      : "cannot read the coordinator's /proc entries");
      ++failures;
      break;
    }
    const auto metrics = ScrapeMetrics(metrics_port);
    auto metric = [&](const char* name) {
      auto it = metrics.find(name);
      return it == metrics.end() ? -1.0 : it->second;
    };
    std::printf(
        "%8d %4lld %5d %5d %9.3f %9.3f %9.1f %9.2f %9.1f %9.1f %8.2f %7.0f "
        "%9.0f %7.2f\n",
        n, static_cast<long long>(world.generation), options.channels,
        world.unique_ids, world.registered_s, world.formed_s,
        world.formed_s / n * 1e6, after->cpu_s - before->cpu_s,
        static_cast<double>(after->peak_kb) / 1024.0,
        static_cast<double>(after->rss_kb) / 1024.0,
        static_cast<double>(after->rss_kb - idle->rss_kb) / n,
        metric("ccl_coordinator_kv_keys"), metric("ccl_coordinator_kv_bytes"),
        workers_cpu);
    std::fflush(stdout);
  }
  unlink(log.c_str());
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  // Debian's absl is built without NDEBUG: its Mutex would track lock
  // graphs for deadlock detection on every lock, a cost of the build, not of
  // the code measured (cccoord turns it off too).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  ccl::bench::RaiseFileLimit();
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](int& out) {
      return i + 1 < argc && absl::SimpleAtoi(argv[++i], &out);
    };
    bool ok = true;
    if (arg == "--channels") {
      ok = value(options.channels) && options.channels > 0;
    } else if (arg == "--ranks-per-root") {
      ok = value(options.ranks_per_root) && options.ranks_per_root >= 0;
    } else if (arg == "--generations") {
      ok = value(options.generations) && options.generations > 0;
    } else if (arg == "--ranks-per-host") {
      ok = value(options.ranks_per_host) && options.ranks_per_host > 0;
    } else if (arg == "--kv-ids") {
      options.kv_ids = true;
    } else if (arg == "--logic-only") {
      options.logic_only = true;
    } else if (arg == "--cccoord") {
      ok = i + 1 < argc;
      if (ok) options.cccoord = argv[++i];
    } else {
      int n = 0;
      ok = absl::SimpleAtoi(arg, &n) && n > 0;
      options.sizes.push_back(n);
    }
    if (!ok) return Usage(argv[0]);
  }
  if (options.sizes.empty()) options.sizes = {1024, 4096, 16384};

  if (options.logic_only) {
    // Registrations log every 1/16 of the world at info; not the subject.
    spdlog::set_level(spdlog::level::warn);
    std::printf("# CoordinatorCore in process, no gRPC; %d ranks per id\n",
                options.ranks_per_root);
    std::printf("%8s %9s %9s %9s %9s %9s\n", "N", "formed", "per-rank", "CPU",
                "CPU/rank", "RSS/rank");
    std::printf("%8s %9s %9s %9s %9s %9s\n", "", "(s)", "(us)", "(s)", "(us)",
                "(KiB)");
    int failures = 0;
    for (int n : options.sizes) failures += RunLogicOnly(options, n);
    return failures == 0 ? 0 : 1;
  }
  std::printf(
      "# coordinator %s; simulated workers on %d channel(s), %s; ids %s\n",
      options.cccoord.c_str(), options.channels,
      options.ranks_per_host > 1
          ? absl::StrCat("one RegisterHost per ", options.ranks_per_host,
                         " workers")
                .c_str()
          : "one Register per worker",
      options.kv_ids ? "from the KV store (--kv-ids)"
                     : "with Register where it can carry them");
  std::printf("%8s %4s %5s %5s %9s %9s %9s %9s %9s %9s %8s %7s %9s %7s\n", "N",
              "gen", "chan", "ids", "register", "formed", "per-rank",
              "coordCPU", "peakRSS", "RSS", "RSS/rank", "kvKeys", "kvBytes",
              "wrkCPU");
  std::printf("%8s %4s %5s %5s %9s %9s %9s %9s %9s %9s %8s %7s %9s %7s\n", "",
              "", "", "", "(s)", "(s)", "(us)", "(s)", "(MiB)", "(MiB)",
              "(KiB)", "", "(B)", "(s)");
  int failures = 0;
  for (int n : options.sizes) failures += RunSize(options, n);
  return failures == 0 ? 0 : 1;
}
