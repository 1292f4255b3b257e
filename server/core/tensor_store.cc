#include "server/core/tensor_store.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/element.h"
#include "server/core/fill.h"

namespace ccl {
namespace {

constexpr int64_t kDefaultChunkBytes = 1 << 20;
// Host chunk of a device tensor's Summarize.
constexpr int64_t kSummarizeChunkBytes = 4 << 20;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
         c == '/' || c == '-';
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string BusyMessage(const Tensor& tensor,
                        const std::map<int64_t, std::string>& users,
                        const char* what) {
  std::vector<std::string> descs;
  for (const auto& [id, desc] : users) descs.push_back(desc);
  return absl::StrCat("cannot ", what, " tensor '", tensor.name(),
                      "': it is in use by ", absl::StrJoin(descs, ", "),
                      "; wait for that op to complete");
}

}  // namespace

absl::Status ValidateTensorName(const std::string& name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("tensor name is empty");
  }
  if (name.size() > kMaxTensorNameLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor name '", name.substr(0, 32), "...' has ", name.size(),
        " characters; at most ", kMaxTensorNameLength, " are allowed"));
  }
  for (char c : name) {
    if (!IsNameChar(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor name '", name, "' has a character outside [A-Za-z0-9_.:/-]"));
    }
  }
  return absl::OkStatus();
}

Tensor::Tensor(TensorMeta meta, std::byte* data, Memory* memory)
    : meta_(std::move(meta)), data_(data), memory_(memory) {}

Tensor::~Tensor() { memory_->Free(data_); }

TensorStore::TensorStore(Device device, int64_t quota_bytes,
                         std::unique_ptr<Memory> memory, int64_t max_tensors)
    : device_(device),
      quota_bytes_(quota_bytes),
      memory_(std::move(memory)),
      max_tensors_(max_tensors) {}

absl::StatusOr<TensorMeta> TensorStore::Alloc(const TensorMeta& spec,
                                              const Fill& fill, int rank) {
  if (absl::Status s = ValidateTensorName(spec.name); !s.ok()) return s;
  if (spec.device.kind != DeviceKind::kCpu &&
      device_.kind == DeviceKind::kCpu) {
    return absl::UnimplementedError(absl::StrCat(
        "tensor '", spec.name, "' asks for device ", DeviceName(spec.device),
        " but this worker was started for cpu (Gloo backend); allocate it "
        "on cpu or use a CUDA worker"));
  }
  if (spec.device != device_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", spec.name, "' asks for device ", DeviceName(spec.device),
        " but this worker owns ", DeviceName(device_)));
  }
  int64_t numel = 1;
  for (int64_t dim : spec.shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name, "' has a negative dimension in ",
                       "shape ", ShapeString(spec.shape)));
    }
    if (__builtin_mul_overflow(numel, dim, &numel)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name, "' shape ",
                       ShapeString(spec.shape), " overflows 64-bit numel"));
    }
  }
  const int64_t esize = static_cast<int64_t>(DTypeSize(spec.dtype));
  int64_t bytes = 0;
  // Keep room for the rounding up to the alignment below.
  if (__builtin_mul_overflow(numel, esize, &bytes) ||
      bytes > std::numeric_limits<int64_t>::max() - 2 * 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", spec.name, "' shape ", ShapeString(spec.shape), " of ",
        std::string(DTypeName(spec.dtype)), " overflows 64-bit bytes"));
  }

  TensorMeta meta = spec;
  meta.numel = numel;
  meta.bytes = bytes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (tensors_.count(spec.name)) {
      return absl::AlreadyExistsError(absl::StrCat(
          "tensor '", spec.name, "' already exists; free it first"));
    }
    // Allocations in flight count too, so concurrent ones cannot overshoot.
    if (max_tensors_ > 0 &&
        static_cast<int64_t>(tensors_.size()) + allocating_ >= max_tensors_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tensor '", spec.name, "' would be tensor number ", max_tensors_ + 1,
          " on this worker, over its --max-tensors of ", max_tensors_,
          "; free some first"));
    }
    if (quota_bytes_ > 0 && bytes > quota_bytes_ - bytes_in_use_) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "tensor '", spec.name, "' needs ", bytes, " bytes but only ",
          quota_bytes_ - bytes_in_use_, " of the quota of ", quota_bytes_,
          " bytes are available"));
    }
    // Reserve now so concurrent Allocs cannot overshoot the quota together.
    bytes_in_use_ += bytes;
    ++allocating_;
  }
  auto unreserve = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_in_use_ -= bytes;
    --allocating_;
  };
  auto data = memory_->Allocate(static_cast<size_t>(bytes));
  if (!data.ok()) {
    unreserve();
    return absl::Status(
        data.status().code(),
        absl::StrCat("tensor '", spec.name, "': ", data.status().message()));
  }
  std::shared_ptr<Tensor> tensor;
  try {
    tensor = std::make_shared<Tensor>(meta, *data, memory_.get());
  } catch (const std::bad_alloc&) {
    memory_->Free(*data);
    unreserve();
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory for tensor '", spec.name, "'"));
  }
  if (absl::Status s = memory_->Fill(*data, meta.dtype, numel, fill, rank);
      !s.ok()) {
    tensor.reset();
    unreserve();
    return absl::Status(s.code(), absl::StrCat("filling tensor '", spec.name,
                                               "': ", s.message()));
  }

  std::lock_guard<std::mutex> lock(mutex_);
  --allocating_;
  if (!tensors_.emplace(spec.name, std::move(tensor)).second) {
    bytes_in_use_ -= bytes;
    return absl::AlreadyExistsError(
        absl::StrCat("tensor '", spec.name, "' already exists; free it first"));
  }
  return meta;
}

absl::StatusOr<std::shared_ptr<Tensor>> TensorStore::FindLocked(
    const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("no tensor named '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<int64_t> TensorStore::Free(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat("no tensor named '", name, "'"));
  }
  Tensor& tensor = *it->second;
  if (!tensor.users_.empty()) {
    return absl::FailedPreconditionError(
        BusyMessage(tensor, tensor.users_, "free"));
  }
  if (tensor.host_accesses_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot free tensor '", name, "' while it is being read or written"));
  }
  const int64_t bytes = tensor.bytes();
  bytes_in_use_ -= bytes;
  tensors_.erase(it);
  return bytes;
}

std::vector<TensorMeta> TensorStore::List() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TensorMeta> out;
  out.reserve(tensors_.size());
  for (const auto& [name, tensor] : tensors_) out.push_back(tensor->meta());
  return out;
}

int64_t TensorStore::BytesInUse() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_in_use_;
}

absl::StatusOr<std::shared_ptr<Tensor>> TensorStore::BeginHostAccess(
    const std::string& name, const char* what) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = FindLocked(name);
  if (!found.ok()) return found.status();
  Tensor& tensor = **found;
  if (!tensor.users_.empty()) {
    return absl::FailedPreconditionError(
        BusyMessage(tensor, tensor.users_, what));
  }
  ++tensor.host_accesses_;
  return found;
}

void TensorStore::EndHostAccess(const std::shared_ptr<Tensor>& tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--tensor->host_accesses_ == 0) host_idle_.notify_all();
}

absl::StatusOr<TensorMeta> TensorStore::Write(const std::string& name,
                                              int64_t offset_bytes,
                                              std::span<const std::byte> data) {
  auto tensor = BeginHostAccess(name, "write");
  if (!tensor.ok()) return tensor.status();
  const int64_t size = static_cast<int64_t>(data.size());
  const int64_t total = (*tensor)->bytes();
  absl::Status status;
  if (offset_bytes < 0 || offset_bytes > total || size > total - offset_bytes) {
    status = absl::OutOfRangeError(absl::StrCat(
        "write of ", size, " bytes at offset ", offset_bytes,
        " does not fit in tensor '", name, "' of ", total, " bytes"));
  } else if (size > 0) {
    status = memory_->CopyFromHost((*tensor)->data() + offset_bytes,
                                   data.data(), data.size());
  }
  EndHostAccess(*tensor);
  if (!status.ok()) return status;
  return (*tensor)->meta();
}

absl::Status TensorStore::Read(
    const std::string& name, int64_t offset, int64_t count, int64_t chunk_bytes,
    const std::function<bool(int64_t, std::span<const std::byte>)>& sink) {
  auto found = BeginHostAccess(name, "read");
  if (!found.ok()) return found.status();
  const Tensor& tensor = **found;
  const int64_t numel = tensor.numel();
  absl::Status status;
  if (offset < 0 || count < 0 || offset > numel ||
      (count > 0 && count > numel - offset)) {
    status = absl::OutOfRangeError(absl::StrCat(
        "read of elements [", offset, ", ", offset, "+", count,
        ") is outside tensor '", name, "' of ", numel, " elements"));
  } else if (chunk_bytes < 0) {
    status = absl::InvalidArgumentError(
        absl::StrCat("chunk_bytes must be >= 0, got ", chunk_bytes));
  } else {
    if (count == 0) count = numel - offset;
    const int64_t esize = static_cast<int64_t>(DTypeSize(tensor.dtype()));
    if (chunk_bytes == 0) chunk_bytes = kDefaultChunkBytes;
    // Chunks hold whole elements so a reader can decode each on its own.
    chunk_bytes = std::max(esize, chunk_bytes / esize * esize);
    int64_t begin = offset * esize;
    const int64_t end = (offset + count) * esize;
    // Device tensors are staged through a host buffer one chunk at a time.
    std::vector<std::byte> staging;
    const bool on_device = !memory_->host_accessible();
    if (on_device) {
      try {
        staging.resize(static_cast<size_t>(std::min(chunk_bytes, end - begin)));
      } catch (const std::bad_alloc&) {
        status = absl::ResourceExhaustedError(
            "out of host memory staging a device read");
        begin = end;
      }
    }
    while (begin < end) {
      const int64_t n = std::min(chunk_bytes, end - begin);
      const std::byte* chunk = tensor.data() + begin;
      if (on_device) {
        status =
            memory_->CopyToHost(staging.data(), chunk, static_cast<size_t>(n));
        if (!status.ok()) break;
        chunk = staging.data();
      }
      if (!sink(begin,
                std::span<const std::byte>(chunk, static_cast<size_t>(n)))) {
        break;
      }
      begin += n;
    }
  }
  EndHostAccess(*found);
  return status;
}

absl::StatusOr<TensorSummary> TensorStore::Summarize(const std::string& name,
                                                     int64_t head) {
  if (head < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head must be >= 0, got ", head));
  }
  auto found = BeginHostAccess(name, "summarize");
  if (!found.ok()) return found.status();
  const Tensor& tensor = **found;
  TensorSummary summary;
  summary.meta = tensor.meta();
  const DType dtype = tensor.dtype();
  const int64_t numel = tensor.numel();
  const int64_t head_n = std::min(head, numel);
  summary.head.reserve(static_cast<size_t>(head_n));
  bool any = false;
  uint64_t hash = 0xcbf29ce484222325ULL;
  // Folds elements [first, first + n) held at `data` into the summary, in
  // element order (so the sum and checksum do not depend on the chunking).
  auto consume = [&](const std::byte* data, int64_t first, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
      const double v = LoadElement(dtype, data, static_cast<size_t>(k));
      if (first + k < head_n) summary.head.push_back(v);
      if (std::isnan(v)) {
        ++summary.nan_count;
        continue;
      }
      summary.sum += v;
      if (!any || v < summary.min) summary.min = v;
      if (!any || v > summary.max) summary.max = v;
      any = true;
    }
    const auto* bytes = reinterpret_cast<const unsigned char*>(data);
    const int64_t nbytes = n * static_cast<int64_t>(DTypeSize(dtype));
    for (int64_t i = 0; i < nbytes; ++i) {
      hash ^= bytes[i];
      hash *= 0x100000001b3ULL;
    }
  };
  absl::Status status;
  if (memory_->host_accessible()) {
    consume(tensor.data(), 0, numel);
  } else {
    // Device tensors are copied to the host a chunk at a time (through the
    // pinned staging buffer), so a large tensor never needs a host copy of
    // its own size.
    const int64_t esize = static_cast<int64_t>(DTypeSize(dtype));
    const int64_t per_chunk =
        std::max<int64_t>(1, kSummarizeChunkBytes / esize);
    std::vector<std::byte> chunk;
    try {
      chunk.resize(static_cast<size_t>(std::min(per_chunk, numel) * esize));
    } catch (const std::bad_alloc&) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "out of host memory summarising device tensor '", name, "'"));
    }
    for (int64_t first = 0; status.ok() && first < numel; first += per_chunk) {
      const int64_t n = std::min(per_chunk, numel - first);
      status = memory_->CopyToHost(chunk.data(), tensor.data() + first * esize,
                                   static_cast<size_t>(n * esize));
      if (status.ok()) consume(chunk.data(), first, n);
    }
  }
  summary.checksum = hash;
  EndHostAccess(*found);
  if (!status.ok()) return status;
  return summary;
}

absl::StatusOr<std::shared_ptr<Tensor>> TensorStore::Lookup(
    const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return FindLocked(name);
}

absl::Status TensorStore::Hold(
    const std::vector<std::shared_ptr<Tensor>>& tensors, int64_t work_id,
    const std::string& user) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& tensor : tensors) {
    auto it = tensors_.find(tensor->name());
    if (it == tensors_.end() || it->second != tensor) {
      return absl::NotFoundError(
          absl::StrCat("tensor '", tensor->name(),
                       "' was freed while the op was submitted"));
    }
  }
  for (const auto& tensor : tensors) tensor->users_[work_id] = user;
  return absl::OkStatus();
}

void TensorStore::Release(const std::vector<std::shared_ptr<Tensor>>& tensors,
                          int64_t work_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& tensor : tensors) tensor->users_.erase(work_id);
}

void TensorStore::WaitForHostAccess(
    const std::vector<std::shared_ptr<Tensor>>& tensors) {
  std::unique_lock<std::mutex> lock(mutex_);
  host_idle_.wait(lock, [&] {
    for (const auto& tensor : tensors) {
      if (tensor->host_accesses_ > 0) return false;
    }
    return true;
  });
}

void TensorStore::Clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  tensors_.clear();
  bytes_in_use_ = 0;
}

}  // namespace ccl
