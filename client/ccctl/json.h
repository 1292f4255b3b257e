// ccctl's JSON documents (-o json) for what the client library returns.
// Field names, enum spellings ("DTYPE_FLOAT32") and 64-bit integers as
// strings follow the proto3 JSON mapping that ccctl printed before the
// library spoke plain types, so scripts written against it keep working.
#pragma once

#include "client/types.h"
#include "nlohmann/json.hpp"

namespace ccl::ctl {

nlohmann::json ToJson(const client::World& world);
nlohmann::json ToJson(const client::WorkerInfo& info);
nlohmann::json ToJson(const client::GroupInfo& group);
nlohmann::json ToJson(const client::TensorInfo& info);
nlohmann::json ToJson(const client::TensorList& list);
nlohmann::json ToJson(const client::TensorSummary& summary);
nlohmann::json ToJson(const client::WorkStatus& status);
nlohmann::json ToJson(const client::OpLog& log);

}  // namespace ccl::ctl
