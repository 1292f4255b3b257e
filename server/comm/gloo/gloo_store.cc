#include "server/comm/gloo/gloo_store.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "gloo/common/error.h"

namespace ccl {
namespace {

[[noreturn]] void Throw(const absl::Status& status, const std::string& what) {
  const std::string message =
      absl::StrCat("rendezvous store ", what, ": ", status.ToString());
  // The timeout flavour keeps "Timed out" in the text so the caller can map
  // it back to DEADLINE_EXCEEDED.
  if (absl::IsDeadlineExceeded(status)) {
    throw gloo::IoException(absl::StrCat("Timed out: ", message));
  }
  throw gloo::IoException(message);
}

}  // namespace

GlooKvStore::GlooKvStore(KvStore& store, std::chrono::milliseconds timeout)
    : store_(store), deadline_(std::chrono::steady_clock::now() + timeout) {}

std::chrono::milliseconds GlooKvStore::Left() const {
  return std::max(std::chrono::milliseconds(1),
                  std::chrono::duration_cast<std::chrono::milliseconds>(
                      deadline_ - std::chrono::steady_clock::now()));
}

void GlooKvStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_.Set(key, std::string(data.begin(), data.end()));
  if (!status.ok()) Throw(status, absl::StrCat("set '", key, "'"));
}

std::vector<char> GlooKvStore::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_.Get(key, Left());
  if (!value.ok()) Throw(value.status(), absl::StrCat("get '", key, "'"));
  return std::vector<char>(value->begin(), value->end());
}

void GlooKvStore::wait(const std::vector<std::string>& keys) {
  wait(keys, Left());
}

void GlooKvStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds&) {
  absl::Status status = store_.Wait(keys, Left());
  if (!status.ok()) {
    Throw(status, absl::StrCat("wait for ", keys.size(), " key(s)"));
  }
}

}  // namespace ccl
