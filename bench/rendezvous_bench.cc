// Rendezvous cost of the coordinator: N simulated workers register (world
// size N) and then fetch the unique id that rank 0 posts, as the NCCL
// bootstrap does. The coordinator runs in process on an ephemeral loopback
// port; workers use the callback client API, so 4096 of them need no
// threads of their own.
//
//   rendezvous_bench [N ...]     (default: 64 1024 4096)
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "ccl/v1/coordinator.grpc.pb.h"
#include "coordinator/coordinator_core.h"
#include "coordinator/coordinator_service.h"
#include "spdlog/spdlog.h"

namespace {

using Clock = std::chrono::steady_clock;
using ccl::v1::Coordinator;

// A few connections, as a few hosts would open; one per worker would measure
// the kernel, not the coordinator.
constexpr int kChannels = 4;
constexpr auto kCallDeadline = std::chrono::seconds(120);
const std::string kUniqueId(128, '\x2a');  // sizeof(ncclUniqueId)

void RaiseFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
}

// Counts finished workers and the first error.
class Tally {
 public:
  explicit Tally(int n) : remaining_(n) {}
  void Registered() {
    if (--registering_left_ == 0) registered_at_ = Clock::now();
  }
  void Done(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!status.ok() && error_.empty()) {
      error_ =
          std::to_string(status.error_code()) + ": " + status.error_message();
    }
    if (--remaining_ == 0) done_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return remaining_ == 0; });
  }
  void set_registering(int n) { registering_left_ = n; }
  Clock::time_point registered_at() const { return registered_at_; }
  const std::string& error() const { return error_; }

 private:
  std::mutex mutex_;
  std::condition_variable done_;
  int remaining_;
  std::atomic<int> registering_left_{0};
  Clock::time_point registered_at_;
  std::string error_;
};

// One simulated worker: its RPC state must live until its callbacks ran.
struct Worker {
  Coordinator::Stub* stub = nullptr;
  Tally* tally = nullptr;
  grpc::ClientContext register_context;
  ccl::v1::RegisterRequest register_request;
  ccl::v1::RegisterResponse register_response;
  grpc::ClientContext post_context;
  ccl::v1::PostUniqueIdRequest post_request;
  ccl::v1::PostUniqueIdResponse post_response;
  grpc::ClientContext get_context;
  ccl::v1::GetUniqueIdRequest get_request;
  ccl::v1::GetUniqueIdResponse get_response;

  void Start(int index) {
    register_request.set_address("10.0.0." + std::to_string(index % 250) + ":" +
                                 std::to_string(30000 + index));
    register_request.set_host("node" + std::to_string(index / 8));
    register_request.mutable_device()->set_kind(ccl::v1::DEVICE_KIND_CUDA);
    register_request.mutable_device()->set_index(index % 8);
    register_request.set_worker_id("bench-" + std::to_string(index));
    SetDeadline(register_context);
    stub->async()->Register(&register_context, &register_request,
                            &register_response,
                            [this](grpc::Status s) { OnRegistered(s); });
  }

  void OnRegistered(const grpc::Status& status) {
    if (!status.ok()) return tally->Done(status);
    tally->Registered();
    if (register_response.rank() == 0) {
      post_request.set_generation(register_response.generation());
      post_request.set_unique_id(kUniqueId);
      SetDeadline(post_context);
      stub->async()->PostUniqueId(&post_context, &post_request, &post_response,
                                  [this](grpc::Status s) {
                                    if (!s.ok()) tally->Done(s);
                                  });
    }
    get_request.set_generation(register_response.generation());
    SetDeadline(get_context);
    stub->async()->GetUniqueId(
        &get_context, &get_request, &get_response, [this](grpc::Status s) {
          if (s.ok() && get_response.unique_id() != kUniqueId) {
            s = grpc::Status(grpc::StatusCode::INTERNAL, "wrong unique id");
          }
          tally->Done(s);
        });
  }
};

struct Row {
  int n = 0;
  double formed_s = 0;
  double total_s = 0;
  std::string error;
};

Row RunOnce(int n) {
  Row row{n};
  ccl::coordinator::CoordinatorOptions options;
  options.world_size = n;
  options.default_wait_timeout = std::chrono::seconds(120);
  // The simulated workers never heartbeat.
  options.heartbeat_timeout = std::chrono::hours(1);
  auto core = ccl::coordinator::CoordinatorCore::Create(options);
  if (!core.ok()) {
    row.error = std::string(core.status().message());
    return row;
  }
  ccl::coordinator::CoordinatorService service(**core);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) {
    row.error = "cannot start the server";
    return row;
  }

  std::vector<std::unique_ptr<Coordinator::Stub>> stubs;
  for (int c = 0; c < kChannels; ++c) {
    grpc::ChannelArguments args;
    // Separate connections rather than one shared subchannel.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(-1);
    auto channel =
        grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                  grpc::InsecureChannelCredentials(), args);
    channel->WaitForConnected(std::chrono::system_clock::now() +
                              std::chrono::seconds(10));
    stubs.push_back(Coordinator::NewStub(channel));
  }

  Tally tally(n);
  tally.set_registering(n);
  std::vector<std::unique_ptr<Worker>> workers(n);
  for (int i = 0; i < n; ++i) {
    workers[i] = std::make_unique<Worker>();
    workers[i]->stub = stubs[i % kChannels].get();
    workers[i]->tally = &tally;
  }
  Clock::time_point start = Clock::now();
  for (int i = 0; i < n; ++i) workers[i]->Start(i);
  tally.Wait();
  Clock::time_point end = Clock::now();
  row.formed_s =
      std::chrono::duration<double>(tally.registered_at() - start).count();
  row.total_s = std::chrono::duration<double>(end - start).count();
  row.error = tally.error();
  server->Shutdown(std::chrono::system_clock::now());
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  RaiseFileLimit();
  spdlog::set_level(spdlog::level::warn);
  std::vector<int> sizes;
  for (int i = 1; i < argc; ++i) {
    int n = 0;
    if (!absl::SimpleAtoi(argv[i], &n) || n <= 0) {
      std::fprintf(stderr, "usage: %s [N ...]  (N: a positive world size)\n",
                   argv[0]);
      return 2;
    }
    sizes.push_back(n);
  }
  if (sizes.empty()) sizes = {64, 1024, 4096};

  std::printf("%8s %14s %12s %16s\n", "N", "all-registered", "total",
              "per-rank");
  std::printf("%8s %14s %12s %16s\n", "", "(s)", "(s)", "(us)");
  int failures = 0;
  for (int n : sizes) {
    Row row = RunOnce(n);
    if (!row.error.empty()) {
      std::printf("%8d  failed: %s\n", n, row.error.c_str());
      ++failures;
      continue;
    }
    std::printf("%8d %14.3f %12.3f %16.1f\n", n, row.formed_s, row.total_s,
                row.total_s / n * 1e6);
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
