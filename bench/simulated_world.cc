#include "bench/simulated_world.h"

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <queue>
#include <thread>
#include <utility>

#include "common/unique_id_plan.h"
#include "coordinator/heartbeat_policy.h"

namespace ccl::bench {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kRegisterWait(120000);
constexpr milliseconds kKvWait(120000);
// Beyond the call's own wait: a coordinator busy with 65k parked calls on a
// loaded 2-core machine answers slowly, and a bench should measure that
// rather than give up.
constexpr milliseconds kRpcMargin(60000);
// What ccworker posts for one id: its 128 bytes in hex.
const std::string kIdHex(2 * nccl::kUniqueIdBytes, 'a');
// What rank 0 posts for `ids` ids, as ncclGetUniqueId makes them: a handle
// of 36 non-zero bytes (a 64-bit magic and an IPv6 socket address, the
// longer case; IPv4 is 16), zeros after it (common/unique_id_plan.h).
std::string IdList(int ids) {
  std::string id(nccl::kUniqueIdBytes, '\0');
  id.replace(0, 36, std::string(36, '\x7f'));
  return nccl::PackUniqueIds(
      std::vector<std::string>(static_cast<size_t>(ids), id));
}

// One RPC's state, alive until its callback has run.
template <typename Request, typename Response>
struct Call {
  grpc::ClientContext context;
  Request request;
  Response response;
};

// As CoordinatorClient does: the call's own wait plus a margin.
template <typename Request, typename Response>
Call<Request, Response>* NewCall(milliseconds wait) {
  auto* call = new Call<Request, Response>();
  call->context.set_deadline(std::chrono::system_clock::now() + wait +
                             kRpcMargin);
  return call;
}

std::string Describe(const char* what, const grpc::Status& status) {
  return std::string(what) + ": " + std::to_string(status.error_code()) + ": " +
         status.error_message();
}

// Counts workers down and keeps the first error.
class Countdown {
 public:
  explicit Countdown(int n) : left_(n) {}
  void Done() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (--left_ == 0) {
      at_ = Clock::now();
      cv_.notify_all();
    }
  }
  void Fail(const std::string& error) {
    Note(error);
    Done();
  }
  // An error of a call the countdown does not wait for.
  void Note(const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.empty()) error_ = error;
  }
  Clock::time_point Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return left_ == 0; });
    return at_;
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int left_;
  Clock::time_point at_;
  std::string error_;
};

// The rendezvous of rank `rank` of `n` through `stub`, as
// NcclCommunicator::Create runs it through CoordinatorKvStore; `done` counts
// it down (or fails) when its ids are known.
void Rendezvous(v1::Coordinator::Stub* stub, int rank, int n,
                int ranks_per_root, int64_t generation, size_t list_bytes,
                const std::shared_ptr<Countdown>& done) {
  const std::string prefix = "gen" + std::to_string(generation) + "/world";
  const nccl::UniqueIdPlan plan = nccl::PlanUniqueIds(rank, n, ranks_per_root);
  // `then` empty: nobody waits for this call but its error counts.
  auto set = [stub, generation, done](std::string key, std::string value,
                                      std::function<void()> then) {
    auto* call = NewCall<v1::KvSetRequest, v1::KvSetResponse>(milliseconds(0));
    call->request.set_generation(generation);
    call->request.set_key(std::move(key));
    call->request.set_value(std::move(value));
    stub->async()->KvSet(&call->context, &call->request, &call->response,
                         [call, then, done](grpc::Status s) {
                           delete call;
                           if (!s.ok() && !then)
                             return done->Note(Describe("KvSet", s));
                           if (!s.ok()) return done->Fail(Describe("KvSet", s));
                           if (then) then();
                         });
  };
  // Waits for `keys` and checks every value's size.
  auto wait = [stub, generation, done](std::vector<std::string> keys,
                                       size_t value_bytes,
                                       std::function<void()> then) {
    auto* call = NewCall<v1::KvWaitRequest, v1::KvWaitResponse>(kKvWait);
    call->request.set_generation(generation);
    for (auto& key : keys) call->request.add_keys(std::move(key));
    call->request.set_timeout_ms(kKvWait.count());
    call->request.set_include_values(true);
    stub->async()->KvWait(
        &call->context, &call->request, &call->response,
        [call, value_bytes, then, done](grpc::Status s) {
          if (s.ok() &&
              call->response.values_size() != call->request.keys_size()) {
            s = grpc::Status(grpc::StatusCode::INTERNAL, "values missing");
          }
          for (int i = 0; s.ok() && i < call->response.values_size(); ++i) {
            if (call->response.values(i).size() != value_bytes) {
              s = grpc::Status(grpc::StatusCode::INTERNAL, "wrong id size");
            }
          }
          delete call;
          if (!s.ok()) return done->Fail(Describe("KvWait", s));
          then();
        });
  };
  auto finished = [done] { done->Done(); };
  if (plan.ids == 1) {
    if (rank == 0) return set(nccl::UniqueIdKey(prefix), kIdHex, finished);
    return wait({nccl::UniqueIdKey(prefix)}, kIdHex.size(), finished);
  }
  if (plan.posts) set(nccl::UniqueIdKey(prefix, plan.block), kIdHex, {});
  if (plan.gathers) {
    std::vector<std::string> keys;
    for (int b = 0; b < plan.ids; ++b) {
      keys.push_back(nccl::UniqueIdKey(prefix, b));
    }
    return wait(std::move(keys), kIdHex.size(), [=] {
      set(nccl::UniqueIdListKey(prefix), IdList(plan.ids), finished);
    });
  }
  wait({nccl::UniqueIdListKey(prefix)}, list_bytes, finished);
}

// A host agent's call: the workers first..first+count-1 in one
// RegisterHost, each answered on the stream when it is ready.
class HostCall final : public grpc::ClientReadReactor<v1::RegisterHostReply> {
 public:
  using Answer = std::function<void(int, const grpc::Status&,
                                    const v1::RegisterResponse&)>;
  HostCall(int first, Answer answer,
           std::function<void(const std::string&)> note)
      : first_(first), answer_(std::move(answer)), note_(std::move(note)) {
    context.set_deadline(std::chrono::system_clock::now() + kRegisterWait +
                         kRpcMargin);
  }
  void Start(v1::Coordinator::Stub* stub) {
    answered_.assign(static_cast<size_t>(request.members_size()), false);
    stub->async()->RegisterHost(&context, &request, this);
    StartRead(&reply_);
    StartCall();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone has its status
    const int m = reply_.member();
    if (m < 0 || m >= request.members_size() ||
        answered_[static_cast<size_t>(m)]) {
      error_ = "RegisterHost: a reply names no unanswered member";
    } else {
      answered_[static_cast<size_t>(m)] = true;
      // The reply leaves out keys earlier replies carried; a host
      // agent gives each worker the whole kv, as Register would.
      auto& kv = *reply_.mutable_response()->mutable_kv();
      for (const auto& [key, value] : kv) stream_kv_.emplace(key, value);
      if (reply_.code() == 0) {
        for (const auto& [key, value] : stream_kv_) kv.insert({key, value});
      }
      answer_(first_ + m,
              grpc::Status(static_cast<grpc::StatusCode>(reply_.code()),
                           reply_.message()),
              reply_.response());
    }
    StartRead(&reply_);
  }
  void OnDone(const grpc::Status& s) override {
    if (!s.ok()) error_ = Describe("RegisterHost", s);
    const grpc::Status unanswered(
        grpc::StatusCode::INTERNAL,
        error_.empty() ? "RegisterHost ended with a member unanswered"
                       : error_);
    for (size_t m = 0; m < answered_.size(); ++m) {
      if (!answered_[m]) {
        answer_(first_ + static_cast<int>(m), unanswered, {});
      }
    }
    if (!error_.empty()) note_(error_);
    delete this;
  }

  grpc::ClientContext context;
  v1::RegisterHostRequest request;

 private:
  const int first_;
  const Answer answer_;
  const std::function<void(const std::string&)> note_;
  v1::RegisterHostReply reply_;
  std::vector<bool> answered_;
  std::map<std::string, std::string> stream_kv_;
  std::string error_;
};

}  // namespace

SimulatedWorld::SimulatedWorld(const std::string& address, int channels) {
  for (int c = 0; c < std::max(1, channels); ++c) {
    grpc::ChannelArguments args;
    // Separate connections rather than one shared subchannel.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(-1);
    auto channel = grpc::CreateCustomChannel(
        address, grpc::InsecureChannelCredentials(), args);
    channel->WaitForConnected(std::chrono::system_clock::now() +
                              std::chrono::seconds(10));
    stubs_.push_back(v1::Coordinator::NewStub(channel));
  }
}

FormedWorld SimulatedWorld::Form(int n, int ranks_per_root,
                                 bool ids_with_register, int ranks_per_host) {
  FormedWorld world;
  world.rank_of.assign(n, -1);
  world.worker_id_of.resize(n);
  world.secret_of.resize(n);
  // Shared with the callbacks: a worker's own id post may still be on its
  // way back when the last rank has the list.
  auto registered = std::make_shared<Countdown>(n);
  auto done = std::make_shared<Countdown>(n);

  const size_t list_bytes =
      IdList(nccl::UniqueIdCount(n, ranks_per_root)).size();
  auto rendezvous = [this, n, ranks_per_root, done, list_bytes](
                        int w, int rank, int64_t generation) {
    Rendezvous(Stub(w), rank, n, ranks_per_root, generation, list_bytes, done);
  };

  std::mutex header_mutex;
  // What a worker does with its registration's answer.
  auto registered_as = [&, n, ranks_per_root, list_bytes](
                           int w, const grpc::Status& s,
                           const v1::RegisterResponse& r) {
    if (!s.ok()) {
      registered->Fail(Describe("Register", s));
      done->Fail(Describe("Register", s));
      return;
    }
    world.rank_of[w] = r.rank();
    world.secret_of[w] = r.worker_secret();
    if (r.rank() == 0) {
      std::lock_guard<std::mutex> lock(header_mutex);
      world.generation = r.generation();
      world.interval_ms = r.world().heartbeat_interval_ms();
      world.timeout_ms = r.world().heartbeat_timeout_ms();
    }
    registered->Done();
    // What ccworker's CoordinatorKvStore does with the reply's kv: the key
    // the rank would read is there, so the rendezvous is over for it.
    const nccl::UniqueIdPlan plan =
        nccl::PlanUniqueIds(r.rank(), n, ranks_per_root);
    auto known = r.kv().find(
        nccl::UniqueIdReadKey(nccl::WorldPrefix(r.generation()), plan));
    if (known == r.kv().end()) {
      rendezvous(w, r.rank(), r.generation());
    } else if (known->second.size() !=
               (plan.ids == 1 ? kIdHex.size() : list_bytes)) {
      done->Fail("Register: the ids it carried have the wrong size");
    } else {
      done->Done();
    }
  };
  auto request_of = [&](int w, v1::RegisterRequest& request) {
    request.set_address("10.0." + std::to_string(w / 250 % 250) + "." +
                        std::to_string(w % 250) + ":29500");
    request.set_host("node" + std::to_string(w / 8));
    request.mutable_device()->set_kind(v1::DEVICE_KIND_CUDA);
    request.mutable_device()->set_index(w % 8);
    world.worker_id_of[w] = "sim-" + std::to_string(w);
    request.set_worker_id(world.worker_id_of[w]);
    if (static_cast<size_t>(w) < secrets_.size()) {
      request.set_worker_secret(secrets_[w]);
    }
    request.set_timeout_ms(kRegisterWait.count());
    if (ids_with_register) request.set_nccl_ranks_per_root(ranks_per_root);
  };

  const Clock::time_point start = Clock::now();
  if (ranks_per_host <= 1) {
    for (int w = 0; w < n; ++w) {
      auto* call =
          NewCall<v1::RegisterRequest, v1::RegisterResponse>(kRegisterWait);
      request_of(w, call->request);
      Stub(w)->async()->Register(&call->context, &call->request,
                                 &call->response, [&, call, w](grpc::Status s) {
                                   registered_as(w, s, call->response);
                                   delete call;
                                 });
    }
  } else {
    for (int first = 0; first < n; first += ranks_per_host) {
      auto* call =
          new HostCall(first, registered_as,
                       [done](const std::string& e) { done->Note(e); });
      for (int w = first; w < std::min(n, first + ranks_per_host); ++w) {
        request_of(w, *call->request.add_members());
      }
      call->Start(Stub(first / ranks_per_host));
    }
  }
  const Clock::time_point registered_at = registered->Wait();
  const Clock::time_point done_at = done->Wait();
  world.registered_s =
      std::chrono::duration<double>(registered_at - start).count();
  world.formed_s = std::chrono::duration<double>(done_at - start).count();
  world.error = done->error();
  world.unique_ids = nccl::UniqueIdCount(n, ranks_per_root);
  if (world.error.empty()) secrets_ = world.secret_of;
  return world;
}

int64_t SimulatedWorld::BeatOnce(const FormedWorld& world) {
  const int n = static_cast<int>(world.rank_of.size());
  std::mutex mutex;
  std::condition_variable all_back;
  int left = n;
  int64_t highest = 0;
  bool failed = false;
  for (int w = 0; w < n; ++w) {
    auto* call =
        NewCall<v1::HeartbeatRequest, v1::HeartbeatResponse>(milliseconds(0));
    call->request.set_rank(world.rank_of[w]);
    call->request.set_generation(world.generation);
    call->request.set_worker_id(world.worker_id_of[w]);
    call->request.set_worker_secret(world.secret_of[w]);
    Stub(w)->async()->Heartbeat(&call->context, &call->request, &call->response,
                                [&, call](grpc::Status s) {
                                  std::lock_guard<std::mutex> lock(mutex);
                                  if (s.ok()) {
                                    highest = std::max(
                                        highest, call->response.generation());
                                  } else {
                                    failed = true;
                                  }
                                  delete call;
                                  if (--left == 0) all_back.notify_all();
                                });
  }
  std::unique_lock<std::mutex> lock(mutex);
  all_back.wait(lock, [&] { return left == 0; });
  return failed ? -1 : highest;
}

HeartbeatStats SimulatedWorld::Heartbeat(const FormedWorld& world,
                                         milliseconds duration, int victim_rank,
                                         milliseconds stop_victim_after,
                                         double* lost_after_s) {
  const int n = static_cast<int>(world.rank_of.size());
  const milliseconds interval(std::max<int64_t>(1, world.interval_ms));
  HeartbeatStats stats;
  std::mutex mutex;  // guards stats and the detection time
  std::condition_variable idle;
  int64_t in_flight = 0;
  Clock::time_point victim_last_beat{};
  Clock::time_point degraded_at{};
  bool degraded = false;

  using Next = std::pair<Clock::time_point, int>;  // (when, worker)
  std::priority_queue<Next, std::vector<Next>, std::greater<>> due;
  const Clock::time_point start = Clock::now();
  for (int w = 0; w < n; ++w) {
    due.emplace(
        start + coordinator::HeartbeatPhase(interval, world.rank_of[w], n), w);
  }
  const Clock::time_point end = start + duration;
  const Clock::time_point victim_stops = start + stop_victim_after;
  std::vector<int64_t> beats_of(static_cast<size_t>(n), 0);
  while (!due.empty()) {
    const Clock::time_point now = Clock::now();
    if (now >= end) break;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (degraded) break;
    }
    auto [at, w] = due.top();
    if (at > now) {
      std::this_thread::sleep_until(std::min(at, end));
      continue;
    }
    due.pop();
    const int rank = world.rank_of[w];
    if (rank == victim_rank && now >= victim_stops) continue;  // "killed"
    due.emplace(now + interval, w);

    auto* call =
        NewCall<v1::HeartbeatRequest, v1::HeartbeatResponse>(milliseconds(0));
    call->request.set_rank(rank);
    call->request.set_generation(world.generation);
    call->request.set_worker_id(world.worker_id_of[w]);
    call->request.set_worker_secret(world.secret_of[w]);
    if (progress_) {
      (*call->request.mutable_finished_below())["world"] =
          ++beats_of[static_cast<size_t>(w)];
    }
    {
      std::lock_guard<std::mutex> lock(mutex);
      ++stats.sent;
      ++in_flight;
      if (rank == victim_rank) victim_last_beat = now;
    }
    Stub(w)->async()->Heartbeat(
        &call->context, &call->request, &call->response,
        [&, call, sent = now](grpc::Status s) {
          const Clock::time_point got = Clock::now();
          std::lock_guard<std::mutex> lock(mutex);
          if (s.ok()) {
            stats.latencies_us.push_back(
                std::chrono::duration<double, std::micro>(got - sent).count());
            if (call->response.world_state() == v1::WORLD_STATE_DEGRADED &&
                !degraded) {
              degraded = true;
              degraded_at = got;
            }
          } else {
            if (stats.failed++ == 0) {
              stats.first_error = Describe("Heartbeat", s);
            }
          }
          delete call;
          if (--in_flight == 0) idle.notify_all();
        });
  }
  std::unique_lock<std::mutex> lock(mutex);
  idle.wait_for(lock, std::chrono::seconds(30), [&] { return in_flight == 0; });
  if (lost_after_s != nullptr) {
    *lost_after_s =
        degraded && victim_rank >= 0
            ? std::chrono::duration<double>(degraded_at - victim_last_beat)
                  .count()
            : -1;
  }
  return stats;
}

std::string SimulatedWorld::KvGet(const FormedWorld& world,
                                  const std::string& key) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::KvGetRequest request;
  request.set_generation(world.generation);
  request.set_key(key);
  v1::KvGetResponse response;
  const grpc::Status status = Stub(0)->KvGet(&context, request, &response);
  if (!status.ok()) return Describe("KvGet", status);
  return response.value();
}

}  // namespace ccl::bench
