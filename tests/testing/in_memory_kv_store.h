// A KvStore in memory for tests: thread-safe, Get and Wait block on a
// condition variable until the keys appear or the timeout passes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/comm/kv_store.h"

namespace ccl::testing {

class InMemoryKvStore : public KvStore {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      data_[key] = value;
    }
    changed_.notify_all();
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Get(const std::string& key,
                                  std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!changed_.wait_for(lock, timeout,
                           [&] { return data_.count(key) > 0; })) {
      return absl::DeadlineExceededError(absl::StrCat(
          "key '", key, "' did not appear within ", timeout.count(), "ms"));
    }
    return data_.at(key);
  }

  absl::Status Wait(const std::vector<std::string>& keys,
                    std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    const bool ok = changed_.wait_for(lock, timeout, [&] {
      for (const auto& key : keys) {
        if (data_.count(key) == 0) return false;
      }
      return true;
    });
    if (!ok) {
      return absl::DeadlineExceededError(absl::StrCat(
          "keys did not all appear within ", timeout.count(), "ms"));
    }
    return absl::OkStatus();
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return data_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
};

}  // namespace ccl::testing
