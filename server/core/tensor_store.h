// Named host tensors of one worker. Ops resolve names at Submit and hold the
// tensors (shared_ptr) until they complete; while held a tensor is "busy" and
// the host side (Free, Write, Read, Summarize) refuses to touch it, because
// an op may still be writing it. Conversely an op waits for host accesses
// already in progress to finish before it is launched.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/core/memory.h"
#include "server/core/types.h"

namespace ccl {

inline constexpr size_t kMaxTensorNameLength = 256;

absl::Status ValidateTensorName(const std::string& name);

class Tensor {
 public:
  // `memory` frees `data` when the tensor goes; it outlives every tensor
  // (the store owns it, and held tensors are released before shutdown ends).
  Tensor(TensorMeta meta, std::byte* data, Memory* memory);
  ~Tensor();
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const TensorMeta& meta() const { return meta_; }
  const std::string& name() const { return meta_.name; }
  DType dtype() const { return meta_.dtype; }
  int64_t numel() const { return meta_.numel; }
  int64_t bytes() const { return meta_.bytes; }
  std::byte* data() const { return data_; }

 private:
  friend class TensorStore;
  TensorMeta meta_;
  std::byte* data_;
  Memory* const memory_;
  // Guarded by the owning store's mutex.
  std::map<int64_t, std::string> users_;  // work id -> "all_reduce seq 5 ..."
  int host_accesses_ = 0;
};

class TensorStore {
 public:
  // `quota_bytes` 0: unlimited. `memory` is `device`'s (MakeMemory).
  // `max_tensors` 0: unlimited.
  TensorStore(Device device, int64_t quota_bytes,
              std::unique_ptr<Memory> memory, int64_t max_tensors = 0);

  absl::StatusOr<TensorMeta> Alloc(const TensorMeta& spec, const Fill& fill,
                                   int rank);
  absl::StatusOr<int64_t> Free(const std::string& name);
  std::vector<TensorMeta> List() const;
  int64_t BytesInUse() const;
  int64_t quota_bytes() const { return quota_bytes_; }

  absl::StatusOr<TensorMeta> Write(const std::string& name,
                                   int64_t offset_bytes,
                                   std::span<const std::byte> data);
  absl::Status Read(
      const std::string& name, int64_t offset, int64_t count,
      int64_t chunk_bytes,
      const std::function<bool(int64_t offset_bytes,
                               std::span<const std::byte> chunk)>& sink);
  absl::StatusOr<TensorSummary> Summarize(const std::string& name,
                                          int64_t head);

  // For ops. Lookup does not mark anything; Hold marks the tensors busy on
  // behalf of `work_id` and fails NOT_FOUND if one was freed since Lookup.
  absl::StatusOr<std::shared_ptr<Tensor>> Lookup(const std::string& name) const;
  absl::Status Hold(const std::vector<std::shared_ptr<Tensor>>& tensors,
                    int64_t work_id, const std::string& user);
  void Release(const std::vector<std::shared_ptr<Tensor>>& tensors,
               int64_t work_id);
  // Blocks until no host access (Read, Write, Summarize) of `tensors` is in
  // progress. Call after Hold, which keeps new ones from starting.
  void WaitForHostAccess(const std::vector<std::shared_ptr<Tensor>>& tensors);

  // Drops every tensor (shutdown). Held tensors stay alive until their ops
  // let go of them.
  void Clear();

 private:
  // Finds `name` and starts a host access of it, failing if it is busy.
  absl::StatusOr<std::shared_ptr<Tensor>> BeginHostAccess(
      const std::string& name, const char* what);
  void EndHostAccess(const std::shared_ptr<Tensor>& tensor);
  absl::StatusOr<std::shared_ptr<Tensor>> FindLocked(
      const std::string& name) const;

  const Device device_;
  const int64_t quota_bytes_;
  const std::unique_ptr<Memory> memory_;
  const int64_t max_tensors_;
  mutable std::mutex mutex_;
  std::condition_variable host_idle_;
  std::map<std::string, std::shared_ptr<Tensor>> tensors_;
  int64_t bytes_in_use_ = 0;
  // Allocations between their reservation and their insertion.
  int64_t allocating_ = 0;
};

}  // namespace ccl
