// libFuzzer target over the worker's request handling: the first byte picks
// a request message, the rest is parsed as it; the request is validated
// (server/rpc/request_limits) and, if valid, converted and run as the gRPC
// adapter (server/rpc/worker_service.cc) does, against a real worker core on
// the CPU in a world of one (Gloo); a refused sequenced request is handed to
// WorkerCore::Refuse as the adapter hands it. Tensors and groups persist
// across inputs, so sequences of requests are explored too. A crash, a
// sanitizer report or a hang is a bug.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "google/protobuf/stubs/logging.h"
#include "server/core/worker_core.h"
#include "server/rpc/convert.h"
#include "server/rpc/request_limits.h"
#include "spdlog/spdlog.h"
#include "tests/testing/in_memory_kv_store.h"

namespace ccl {
namespace {

// Small limits keep each input fast; the checks are the same code.
RequestLimits FuzzLimits() {
  RequestLimits limits;
  limits.max_tensors = 32;
  limits.max_tensor_elements = 1 << 16;
  limits.max_timeout_ms = 200;
  limits.max_bench_iters = 4;
  limits.max_summary_head = 1024;
  limits.max_groups = 8;
  return limits;
}

constexpr auto kWorkWait = std::chrono::seconds(5);

class Harness {
 public:
  Harness() : limits_(FuzzLimits()) {
    // Invalid UTF-8 in string fields is expected here; its log line per
    // input would drown the fuzzer's own output.
    google::protobuf::SetLogHandler(nullptr);
    // spdlog's registry is made now, before this object is complete, so
    // that it outlives this object at exit: the core logs while it stops.
    (void)spdlog::default_logger_raw();
    WorkerConfig config;
    config.device = Device{DeviceKind::kCpu, 0};
    config.tensor_quota_bytes = 64 << 20;
    config.default_op_timeout = std::chrono::milliseconds(200);
    config.seq_gap_timeout = std::chrono::milliseconds(20);
    config.data_host = "127.0.0.1";
    core_ = *WorkerCore::Create(config);
    absl::Status formed = core_->FormWorld(0, 1, 1, store_);
    if (!formed.ok()) {
      std::fprintf(stderr, "FormWorld: %s\n", formed.ToString().c_str());
      std::abort();
    }
  }

  void Run(uint8_t selector, const std::string& bytes) {
    switch (selector % 13) {
      case 0:
        Handle<v1::AllocTensorRequest>(bytes, [&](const auto& r) {
          if (!ValidateRequest(r, limits_).ok()) return;
          auto meta = TensorSpecFromProto(r.spec());
          auto fill = FillFromProto(r.fill());
          if (meta.ok() && fill.ok()) (void)core_->Alloc(*meta, *fill);
        });
        break;
      case 1:
        Handle<v1::FreeTensorRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) (void)core_->Free(r.name());
        });
        break;
      case 2:
        Handle<v1::WriteTensorChunk>(bytes, [&](const auto& r) {
          if (!ValidateRequest(r, limits_).ok() || r.name().empty()) return;
          (void)core_->Write(
              r.name(), r.offset_bytes(),
              std::span<const std::byte>(
                  reinterpret_cast<const std::byte*>(r.data().data()),
                  r.data().size()));
        });
        break;
      case 3:
        Handle<v1::ReadTensorRequest>(bytes, [&](const auto& r) {
          if (!ValidateRequest(r, limits_).ok()) return;
          const int64_t chunk =
              r.chunk_bytes() > 0 ? std::min<int64_t>(r.chunk_bytes(), 3 << 20)
                                  : 1 << 20;
          (void)core_->Read(
              r.name(), r.offset(), r.count(), chunk,
              [](int64_t, std::span<const std::byte>) { return true; });
        });
        break;
      case 4:
        Handle<v1::SummarizeTensorRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->Summarize(r.name(), r.head());
          }
        });
        break;
      case 5:
        Handle<v1::OpRequest>(bytes, [&](const auto& r) {
          auto spec =
              Valid(r, [](const auto& m) { return OpSpecFromProto(m); });
          if (!spec.ok()) {
            (void)core_->Refuse(r.group(), r.seq(), 1, r.generation(),
                                spec.status());
            return;
          }
          auto work = core_->Submit(*spec);
          if (!work.ok()) return;
          (void)(*work)->Wait(kWorkWait);
          if (!r.async()) core_->ForgetWork((*work)->id());
        });
        break;
      case 6:
        Handle<v1::BenchRequest>(bytes, [&](const auto& r) {
          auto spec =
              Valid(r, [](const auto& m) { return OpSpecFromProto(m.op()); });
          if (!spec.ok()) {
            (void)core_->Refuse(r.op().group(), r.op().seq(), 1,
                                r.op().generation(), spec.status());
            return;
          }
          auto work = core_->Bench(*spec, BenchOptionsFromProto(r));
          if (work.ok()) (void)(*work)->Wait(kWorkWait);
        });
        break;
      case 7:
        Handle<v1::WaitRequest>(bytes, [&](const auto& r) {
          if (!ValidateRequest(r, limits_).ok()) return;
          auto work = core_->FindWork(r.work_id());
          if (!work) return;
          if (work->Wait(std::chrono::milliseconds(r.timeout_ms())).ok()) {
            core_->ForgetWork(work->id());
          }
        });
        break;
      case 8:
        Handle<v1::TestRequest>(bytes, [&](const auto& r) {
          if (!ValidateRequest(r, limits_).ok()) return;
          auto work = core_->FindWork(r.work_id());
          if (work) {
            v1::WorkStatus status;
            WorkToProto(*work, &status);
          }
        });
        break;
      case 9:
        Handle<v1::CreateGroupRequest>(bytes, [&](const auto& r) {
          if (absl::Status s = ValidateRequest(r, limits_); !s.ok()) {
            (void)core_->Refuse(kWorldGroup, r.seq(), 1, 0, s);
            return;
          }
          std::vector<int> ranks(r.ranks().begin(), r.ranks().end());
          auto work =
              core_->CreateGroup(r.name(), ranks, r.seq(), r.generation(),
                                 std::chrono::milliseconds(200));
          if (work.ok()) (void)(*work)->Wait(kWorkWait);
        });
        break;
      case 10:
        Handle<v1::GetOpLogRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->OpLog(r.group(), r.limit());
          }
        });
        break;
      case 11:
        Handle<v1::PlanRequest>(bytes, [&](const auto& r) {
          auto plan =
              Valid(r, [](const auto& m) { return PlanSpecFromProto(m); });
          if (!plan.ok()) {
            (void)core_->Refuse(r.group(), r.seq(), std::max(1, r.ops_size()),
                                r.generation(), plan.status());
            return;
          }
          auto work = core_->SubmitPlan(*plan);
          if (work.ok()) (void)(*work)->Wait(kWorkWait);
        });
        break;
      case 12:
        Handle<v1::ReleaseSequenceRequest>(bytes, [&](const auto& r) {
          if (ValidateRequest(r, limits_).ok()) {
            (void)core_->ReleaseSequence(r.group(), r.generation(), r.begin(),
                                         r.end());
          }
        });
        break;
    }
  }

 private:
  // The request checked against the limits, then converted: the adapter's
  // ValidThen.
  template <typename Message, typename Convert>
  auto Valid(const Message& message, Convert convert)
      -> decltype(convert(message)) {
    if (absl::Status s = ValidateRequest(message, limits_); !s.ok()) return s;
    return convert(message);
  }

  template <typename Message, typename F>
  static void Handle(const std::string& bytes, F&& handle) {
    Message message;
    if (!message.ParseFromString(bytes)) return;
    handle(message);
  }

  const RequestLimits limits_;
  testing::InMemoryKvStore store_;
  std::unique_ptr<WorkerCore> core_;
};

}  // namespace
}  // namespace ccl

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One worker for the whole run, as a daemon lives across requests. A
  // static object, destroyed at exit before what it constructed (spdlog):
  // see coordinator_request_fuzzer.cc.
  static ccl::Harness harness;
  if (size == 0) return 0;
  harness.Run(data[0],
              std::string(reinterpret_cast<const char*>(data + 1), size - 1));
  return 0;
}
