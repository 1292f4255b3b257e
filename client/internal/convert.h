// The client library's edge: wire messages (ccl.v1) to the plain types of
// client/types.h and back. Nothing else in the library builds a message
// field by field.
#pragma once

#include <vector>

#include "ccl/v1/coordinator.pb.h"
#include "ccl/v1/worker.pb.h"
#include "client/types.h"

namespace ccl::client::internal {

// A google.rpc code and message as a Status (OK for code 0).
absl::Status StatusFromCode(int32_t code, const std::string& message);

World ToNative(const v1::World& world);
GroupInfo ToNative(const v1::GroupInfo& group);
WorkerInfo ToNative(const v1::WorkerInfo& info);
TensorInfo ToNative(const v1::TensorInfo& info);
TensorList ToNative(const v1::ListTensorsResponse& list);
TensorSummary ToNative(const v1::TensorSummary& summary);
OpTiming ToNative(const v1::OpTiming& timing);
OpResult ToNative(const v1::OpResponse& response);
WorkStatus ToNative(const v1::WorkStatus& status);
BenchResult ToNative(const v1::BenchResponse& response);
OpRecord ToNative(const v1::OpRecord& record);
OpLog ToNative(const v1::OpLog& log);
PlanResult ToNative(const v1::PlanResponse& response);

// Each rank's wire answer (or its error) as the native type, in rank order.
template <typename Native, typename Wire>
RankResults<Native> ToNativeEach(const std::vector<int>& ranks,
                                 std::vector<absl::StatusOr<Wire>> results) {
  RankResults<Native> out;
  out.reserve(ranks.size());
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (results[i].ok()) {
      out.push_back({ranks[i], ToNative(*results[i])});
    } else {
      out.push_back({ranks[i], results[i].status()});
    }
  }
  return out;
}

v1::Fill ToWire(const Fill& fill);
// `device` fills in a spec without one (the worker's own).
v1::TensorSpec ToWire(const TensorSpec& spec, const Device& device);
// Everything of the op but its place in the group's order (group, seq,
// generation) and the translation of root and peer to group ranks.
v1::OpRequest ToWire(const Op& op);

}  // namespace ccl::client::internal
