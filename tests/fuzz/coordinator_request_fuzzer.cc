// libFuzzer target over the coordinator's request handling: the first byte
// picks a request message (and, for calls that park, whether the caller
// goes away at once), the rest is parsed as it; the request is validated
// (coordinator/request_limits) and, if valid, converted and run as the gRPC
// adapter (coordinator/coordinator_service.cc) does, against a real
// coordinator core of a world of four. Members, KV data, sequence counters
// and parked calls persist across inputs, so sequences of requests are
// explored too. A crash, a sanitizer report or a hang is a bug.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/proto_convert.h"
#include "coordinator/coordinator_core.h"
#include "coordinator/coordinator_service.h"
#include "coordinator/request_limits.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"

namespace ccl::coordinator {
namespace {

// Short waits keep parked calls from piling up; the checks are the same
// code as the daemon's.
CoordinatorLimits FuzzLimits() {
  CoordinatorLimits limits;
  limits.max_value_bytes = 4096;
  limits.max_timeout_ms = 20;
  return limits;
}

class Harness {
 public:
  Harness() : limits_(FuzzLimits()) {
    google::protobuf::SetLogHandler(nullptr);
    // Every registration and lost member is logged at info; the fuzzer's
    // own output must stay readable.
    spdlog::set_level(spdlog::level::off);
    CoordinatorOptions options;
    options.world_size = 4;
    options.heartbeat_interval = std::chrono::milliseconds(10);
    options.heartbeat_timeout = std::chrono::milliseconds(50);
    options.default_wait_timeout = std::chrono::milliseconds(20);
    options.max_value_bytes = limits_.max_value_bytes;
    options.sweep_period = std::chrono::milliseconds(0);
    options.elastic_shrink = true;
    auto core = CoordinatorCore::Create(std::move(options));
    if (!core.ok()) {
      std::fprintf(stderr, "CoordinatorCore::Create: %s\n",
                   core.status().ToString().c_str());
      std::abort();
    }
    core_ = *std::move(core);
  }

  void Run(uint8_t selector, const std::string& bytes) {
    // The caller of a parked call goes away at once (the reactor's OnCancel)
    // for odd selectors above the request kinds.
    const bool impatient = (selector / 14) % 2 == 1;
    switch (selector % 14) {
      case 0:
        Handle<v1::RegisterRequest>(bytes, [&](const auto& r) {
          if (!ValidateRequest(r, limits_).ok()) return;
          auto native = RegisterFromProto(r, limits_);
          if (!native.ok()) return;
          Park(impatient, [&](CoordinatorCore::WaitId id) {
            core_->Register(id, *std::move(native),
                            [](absl::StatusOr<RegisterResult>) {});
          });
        });
        break;
      case 1:
        Handle<v1::HeartbeatRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->Heartbeat(::ccl::FromProto(r));
          }
        });
        break;
      case 2:
        Handle<v1::DeregisterRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->Deregister(r.rank(), r.generation(), r.worker_id(),
                                    r.worker_secret());
          }
        });
        break;
      case 3:
        Handle<v1::GetWorldRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok())
            (void)ToProto(core_->GetWorld());
        });
        break;
      case 4:
        Handle<v1::KvSetRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->KvSet(r.generation(), r.key(), r.value());
          }
        });
        break;
      case 5:
        Handle<v1::KvGetRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->KvGet(r.generation(), r.key());
          }
        });
        break;
      case 6:
        Handle<v1::KvWaitRequest>(bytes, [&](const auto& r) {
          if (!ValidateRequest(r, limits_).ok()) return;
          std::vector<std::string> keys(r.keys().begin(), r.keys().end());
          Park(impatient, [&](CoordinatorCore::WaitId id) {
            core_->KvWait(id, r.generation(), std::move(keys),
                          ClampTimeout(r.timeout_ms(), limits_),
                          r.include_values(),
                          [](absl::StatusOr<KvWaitResult>) {});
          });
        });
        break;
      case 7:
        Handle<v1::KvAddRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->KvAdd(r.generation(), r.key(), r.delta());
          }
        });
        break;
      case 8:
        Handle<v1::KvCompareSetRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->KvCompareSet(r.generation(), r.key(), r.expected(),
                                      r.desired());
          }
        });
        break;
      case 9:
        Handle<v1::KvDeleteRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->KvDelete(r.generation(), r.key());
          }
        });
        break;
      case 10:
        Handle<v1::ReserveSequenceRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->ReserveSequence(r.generation(), r.group(), r.count());
          }
        });
        break;
      case 11:
        Handle<v1::PostUniqueIdRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->PostUniqueId(r.generation(), r.group(), r.unique_id());
          }
        });
        break;
      case 12:
        Handle<v1::GetUniqueIdRequest>(bytes, [&](const auto& r) {
          if (!ValidateRequest(r, limits_).ok()) return;
          Park(impatient, [&](CoordinatorCore::WaitId id) {
            core_->GetUniqueId(id, r.generation(), r.group(),
                               ClampTimeout(r.timeout_ms(), limits_),
                               [](absl::StatusOr<UniqueIdResult>) {});
          });
        });
        break;
      case 13:
        // Time passes for heartbeats: members that stopped beating are lost
        // (and, with elastic shrink, dropped).
        core_->SweepLiveness();
        break;
    }
  }

 private:
  // Issues a call that may park; an impatient caller cancels it at once,
  // as the adapter does when the client goes away.
  template <typename F>
  void Park(bool impatient, F&& issue) {
    const CoordinatorCore::WaitId id = core_->NewWaitId();
    issue(id);
    if (impatient) core_->Cancel(id);
  }

  template <typename Message, typename F>
  static void Handle(const std::string& bytes, F&& handle) {
    Message message;
    if (!message.ParseFromString(bytes)) return;
    handle(message);
  }

  const CoordinatorLimits limits_;
  std::unique_ptr<CoordinatorCore> core_;
};

}  // namespace
}  // namespace ccl::coordinator

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One coordinator for the whole run, as the daemon lives across requests.
  // A static object rather than a leaked one: at exit its destructor stops
  // the core (and its timer thread) before spdlog, constructed inside it,
  // is destroyed. A leaked core's timer thread went on expiring parked
  // calls during exit and logged into the destroyed logger
  // (heap-use-after-free under ASan in 7 of 40 replays, then a hang).
  static ccl::coordinator::Harness harness;
  if (size == 0) return 0;
  harness.Run(data[0],
              std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
