#include "client/ccctl/json.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace ccl::ctl {
namespace {

using nlohmann::json;

// proto3 JSON writes 64-bit integers as strings (a double cannot hold them).
std::string I64(int64_t value) { return std::to_string(value); }

json I64List(const std::vector<int64_t>& values) {
  json out = json::array();
  for (int64_t v : values) out.push_back(I64(v));
  return out;
}

// The wire enum's name: its prefix and the native name in capitals.
std::string EnumName(const std::string& prefix, std::string_view name) {
  return absl::StrCat(prefix, absl::AsciiStrToUpper(std::string(name)));
}

std::string DTypeJson(std::optional<DType> dtype) {
  return dtype ? EnumName("DTYPE_", DTypeName(*dtype)) : "DTYPE_UNSPECIFIED";
}

std::string OpKindJson(std::optional<OpKind> kind) {
  return kind ? EnumName("OP_KIND_", OpKindName(*kind)) : "OP_KIND_UNSPECIFIED";
}

std::string ReduceOpJson(std::optional<ReduceOp> op) {
  return op ? EnumName("REDUCE_OP_", ReduceOpName(*op))
            : "REDUCE_OP_UNSPECIFIED";
}

std::string WorkStateJson(client::WorkState state) {
  return state == client::WorkState::kUnknown
             ? "WORK_STATE_UNSPECIFIED"
             : EnumName("WORK_STATE_", client::WorkStateName(state));
}

json DeviceJson(const Device& device) {
  return {{"kind", device.kind == DeviceKind::kCuda ? "DEVICE_KIND_CUDA"
                                                    : "DEVICE_KIND_CPU"},
          {"index", device.index}};
}

json TimingJson(const client::OpTiming& timing) {
  return {{"enqueued_unix_us", I64(timing.enqueued_unix_us)},
          {"queue_us", timing.queue_us},
          {"device_us", timing.device_us},
          {"total_us", timing.total_us}};
}

json RecordJson(const client::OpRecord& record) {
  return {{"seq", I64(record.seq)},
          {"kind", OpKindJson(record.kind)},
          {"dtype", DTypeJson(record.dtype)},
          {"count", I64(record.count)},
          {"root", record.root},
          {"peer", record.peer},
          {"reduce_op", ReduceOpJson(record.reduce)},
          {"input", record.input},
          {"output", record.output},
          {"state", WorkStateJson(record.state)},
          {"timing", TimingJson(record.timing)},
          {"error_code", static_cast<int>(record.error.code())},
          {"error_message", std::string(record.error.message())},
          {"work_id", I64(record.work_id)},
          {"generation", I64(record.generation)}};
}

}  // namespace

json ToJson(const client::World& world) {
  json members = json::array();
  for (const client::Member& m : world.members) {
    members.push_back(
        {{"rank", m.rank},
         {"address", m.address},
         {"host", m.host},
         {"host_id", m.host_id},
         {"device_bus_id", m.device_bus_id},
         {"device", DeviceJson(m.device)},
         {"state",
          m.state == client::MemberState::kUnknown
              ? "MEMBER_STATE_UNSPECIFIED"
              : EnumName("MEMBER_STATE_", client::MemberStateName(m.state))},
         {"last_seen_age_ms", I64(m.last_seen_age_ms)},
         {"worker_id", m.worker_id},
         {"tensor_count", I64(m.tensor_count)},
         {"tensor_bytes", I64(m.tensor_bytes)}});
  }
  return {{"generation", I64(world.generation)},
          {"world_size", world.world_size},
          {"state",
           world.state == client::WorldState::kUnknown
               ? "WORLD_STATE_UNSPECIFIED"
               : EnumName("WORLD_STATE_", client::WorldStateName(world.state))},
          {"members", members},
          {"heartbeat_interval_ms", I64(world.heartbeat_interval_ms)},
          {"heartbeat_timeout_ms", I64(world.heartbeat_timeout_ms)},
          {"reforming_reason", world.reforming_reason},
          {"began_after", world.began_after}};
}

json ToJson(const client::GroupInfo& group) {
  return {{"name", group.name},
          {"ranks", group.ranks},
          {"group_rank", group.group_rank},
          {"next_seq", I64(group.next_seq)},
          {"backend", group.backend},
          {"state", group.state}};
}

json ToJson(const client::WorkerInfo& info) {
  json groups = json::array();
  for (const auto& group : info.groups) groups.push_back(ToJson(group));
  return {{"rank", info.rank},
          {"world_size", info.world_size},
          {"generation", I64(info.generation)},
          {"device", DeviceJson(info.device)},
          {"address", info.address},
          {"backend", info.backend},
          {"worker_id", info.worker_id},
          {"tensor_count", I64(info.tensor_count)},
          {"tensor_bytes", I64(info.tensor_bytes)},
          {"tensor_quota_bytes", I64(info.tensor_quota_bytes)},
          {"groups", groups},
          {"version", info.version},
          {"state", info.state}};
}

json ToJson(const client::TensorInfo& info) {
  return {{"spec",
           {{"name", info.name},
            {"dtype", DTypeJson(info.dtype)},
            {"shape", I64List(info.shape)},
            {"device", DeviceJson(info.device)}}},
          {"numel", I64(info.numel)},
          {"bytes", I64(info.bytes)}};
}

json ToJson(const client::TensorList& list) {
  json tensors = json::array();
  for (const auto& tensor : list.tensors) tensors.push_back(ToJson(tensor));
  return {{"tensors", tensors},
          {"bytes_in_use", I64(list.bytes_in_use)},
          {"quota_bytes", I64(list.quota_bytes)}};
}

json ToJson(const client::TensorSummary& summary) {
  return {{"info", ToJson(summary.info)},
          {"sum", summary.sum},
          {"min", summary.min},
          {"max", summary.max},
          {"checksum", summary.checksum},
          {"head", summary.head},
          {"nan_count", I64(summary.nan_count)}};
}

json ToJson(const client::WorkStatus& status) {
  return {{"work_id", I64(status.work_id)},
          {"state", WorkStateJson(status.state)},
          {"kind", OpKindJson(status.kind)},
          {"group", status.group},
          {"seq", I64(status.seq)},
          {"error_code", static_cast<int>(status.error.code())},
          {"error_message", std::string(status.error.message())},
          {"timing", TimingJson(status.timing)}};
}

json ToJson(const client::OpLog& log) {
  json records = json::array();
  for (const auto& record : log.records) records.push_back(RecordJson(record));
  return {{"rank", log.rank},
          {"group", log.group},
          {"next_seq", I64(log.next_seq)},
          {"records", records},
          {"now_unix_us", I64(log.now_unix_us)}};
}

}  // namespace ccl::ctl
