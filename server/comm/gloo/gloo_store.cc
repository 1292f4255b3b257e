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
    : store_(store), timeout_(timeout) {}

void GlooKvStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status status = store_.Set(key, std::string(data.begin(), data.end()));
  if (!status.ok()) Throw(status, absl::StrCat("set '", key, "'"));
}

std::vector<char> GlooKvStore::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_.Get(key, timeout_);
  if (!value.ok()) Throw(value.status(), absl::StrCat("get '", key, "'"));
  return std::vector<char>(value->begin(), value->end());
}

void GlooKvStore::wait(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
}

void GlooKvStore::wait(const std::vector<std::string>& keys,
                       const std::chrono::milliseconds& timeout) {
  absl::Status status = store_.Wait(keys, std::max(timeout, timeout_));
  if (!status.ok()) {
    Throw(status, absl::StrCat("wait for ", keys.size(), " key(s)"));
  }
}

}  // namespace ccl
