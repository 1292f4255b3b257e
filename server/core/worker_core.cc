// WorkerCore::Create and the checks of a group's name and ranks. The
// implementation's class (tensors, ops, plans, benches, the work table) is
// in worker_core_impl.h; generations and groups are in worker_world.cc.
#include "server/core/worker_core_impl.h"

namespace ccl {

absl::Status ValidateGroupName(const std::string& name) {
  if (name == kWorldGroup) {
    return absl::AlreadyExistsError(
        "the group name 'world' is taken by the world group");
  }
  if (absl::Status s = ValidateTensorName(name); !s.ok()) {
    std::string message(s.message());
    if (absl::StartsWith(message, "tensor name")) {
      message = absl::StrCat("group name", message.substr(11));
    }
    return absl::InvalidArgumentError(message);
  }
  return absl::OkStatus();
}

absl::Status ValidateGroupRanks(const std::vector<int>& ranks, int world_size) {
  if (ranks.empty()) {
    return absl::InvalidArgumentError("a group needs at least one rank");
  }
  std::vector<bool> seen(static_cast<size_t>(std::max(world_size, 0)), false);
  for (int rank : ranks) {
    if (rank < 0 || rank >= world_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is not a rank of a world of size ",
                       world_size, " (group ranks are world ranks)"));
    }
    if (seen[static_cast<size_t>(rank)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("rank ", rank, " is listed twice"));
    }
    seen[static_cast<size_t>(rank)] = true;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerCore>> WorkerCore::Create(
    WorkerConfig config) {
  if (config.tensor_quota_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor quota must be >= 0, got ", config.tensor_quota_bytes));
  }
  if (config.default_op_timeout.count() <= 0 ||
      config.seq_gap_timeout.count() <= 0) {
    return absl::InvalidArgumentError(
        "default op timeout and seq gap timeout must be positive");
  }
  auto memory = MakeMemory(config.device);
  if (!memory.ok()) return memory.status();
  return std::unique_ptr<WorkerCore>(new worker_core_internal::WorkerCoreImpl(
      std::move(config), *std::move(memory)));
}

}  // namespace ccl
