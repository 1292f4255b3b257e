// The fixture of the coordinator core tests (coordinator_core_test.cc,
// coordinator_kv_test.cc; coordinator_scale_test.cc takes its helpers): the
// core without gRPC, heartbeat expiry on an
// injected clock, wait deadlines on short real timeouts.
#ifndef CCL_TESTS_UNIT_COORDINATOR_CORE_FIXTURE_H_
#define CCL_TESTS_UNIT_COORDINATOR_CORE_FIXTURE_H_

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "coordinator/coordinator_core.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ccl::coordinator::core_testing {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

inline constexpr auto kPatience = std::chrono::seconds(5);

// Captures the one callback of a parked call.
template <typename T>
class Result {
 public:
  CoordinatorCore::Callback<T> callback() {
    auto promise = promise_;
    return [promise](absl::StatusOr<T> r) { promise->set_value(std::move(r)); };
  }
  bool ready() const {
    return future_.wait_for(std::chrono::seconds(0)) ==
           std::future_status::ready;
  }
  absl::StatusOr<T> Get() const {
    if (future_.wait_for(kPatience) != std::future_status::ready) {
      return absl::InternalError("test: the callback never ran");
    }
    return future_.get();
  }

 private:
  std::shared_ptr<std::promise<absl::StatusOr<T>>> promise_ =
      std::make_shared<std::promise<absl::StatusOr<T>>>();
  std::shared_future<absl::StatusOr<T>> future_ =
      promise_->get_future().share();
};

// What each test worker proves itself with, as a ccworker brings its own.
inline std::string Secret(const std::string& worker_id) {
  return "secret-of-" + worker_id + "-0123456789abcdef0123456789abcdef";
}

inline HeartbeatRequest Beat(int rank, int64_t generation,
                             const std::string& worker_id, int64_t count = 0,
                             int64_t bytes = 0, std::string reason = "") {
  return HeartbeatRequest{rank,  generation,        worker_id,        count,
                          bytes, std::move(reason), Secret(worker_id)};
}

class FakeClock {
 public:
  std::chrono::steady_clock::time_point Now() const {
    return base_ + milliseconds(offset_ms_.load());
  }
  void Advance(milliseconds d) { offset_ms_ += d.count(); }

 private:
  const std::chrono::steady_clock::time_point base_ =
      std::chrono::steady_clock::now();
  std::atomic<int64_t> offset_ms_{0};
};

class CoordinatorCoreTest : public ::testing::Test {
 protected:
  CoordinatorCore& Make(int world_size, bool elastic_shrink = false) {
    CoordinatorOptions options;
    options.world_size = world_size;
    options.elastic_shrink = elastic_shrink;
    options.heartbeat_interval = milliseconds(1000);
    options.heartbeat_timeout = milliseconds(10000);
    options.max_value_bytes = 64;
    options.sweep_period = milliseconds(0);
    options.clock = [this] { return clock_.Now(); };
    auto core = CoordinatorCore::Create(std::move(options));
    EXPECT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    return *core_;
  }

  // A worker's registration at its own address, proved by its secret.
  RegisterRequest Request(const std::string& worker_id, milliseconds timeout) {
    RegisterRequest request;
    request.address = "10.0.0.1:" + std::to_string(5000 + addresses_++);
    request.host = "node";
    request.worker_id = worker_id;
    request.secret = Secret(worker_id);
    request.timeout = timeout;
    return request;
  }
  std::unique_ptr<Result<RegisterResult>> Send(RegisterRequest request) {
    auto result = std::make_unique<Result<RegisterResult>>();
    core_->Register(core_->NewWaitId(), std::move(request), result->callback());
    return result;
  }

  std::unique_ptr<Result<RegisterResult>> Register(
      const std::string& worker_id, std::optional<int> rank = std::nullopt,
      milliseconds timeout = milliseconds(0)) {
    RegisterRequest request = Request(worker_id, timeout);
    request.requested_rank = rank;
    return Send(std::move(request));
  }

  // As a ccworker on a CUDA device registers: asking for the world's NCCL
  // ids with `ranks_per_root`.
  std::unique_ptr<Result<RegisterResult>> RegisterForIds(
      const std::string& worker_id, int ranks_per_root,
      milliseconds timeout = milliseconds(0),
      std::optional<std::chrono::steady_clock::time_point> reply_by = {}) {
    RegisterRequest request = Request(worker_id, timeout);
    request.nccl_ranks_per_root = ranks_per_root;
    request.reply_by = reply_by;
    return Send(std::move(request));
  }

  // Registers `n` workers "w0".."w{n-1}" in order and returns their ranks.
  std::vector<int> FormWorld(int n) {
    std::vector<std::unique_ptr<Result<RegisterResult>>> pending;
    for (int i = 0; i < n; ++i)
      pending.push_back(Register("w" + std::to_string(i)));
    std::vector<int> ranks;
    for (auto& p : pending) {
      auto r = p->Get();
      EXPECT_TRUE(r.ok()) << r.status();
      ranks.push_back(r.ok() ? r->rank : -1);
    }
    return ranks;
  }

  absl::Status Heartbeat(int rank, int64_t generation,
                         const std::string& worker_id) {
    return core_->Heartbeat(Beat(rank, generation, worker_id)).status();
  }

  absl::StatusOr<int64_t> Leave(int rank, int64_t generation,
                                const std::string& worker_id) {
    return core_->Deregister(rank, generation, worker_id, Secret(worker_id));
  }

  FakeClock clock_;
  std::unique_ptr<CoordinatorCore> core_;
  int addresses_ = 0;
};

}  // namespace ccl::coordinator::core_testing

#endif  // CCL_TESTS_UNIT_COORDINATOR_CORE_FIXTURE_H_
