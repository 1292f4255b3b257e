// Gloo's rendezvous store over the coordinator's KV store. Gloo expects
// failures as exceptions; they are caught where Gloo is called (FormWorld)
// and turned back into a Status there.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "gloo/rendezvous/store.h"
#include "server/comm/kv_store.h"

namespace ccl {

class GlooKvStore : public gloo::rendezvous::Store {
 public:
  // `timeout`, from construction, bounds get() and the waits together: a
  // rendezvous waits for its peers' keys one after another, and each wait
  // given the whole timeout again would let the rendezvous outlast the
  // call that asked for it. Gloo's own timeout for a wait (its context's,
  // kept short while pairs connect) never shortens it.
  GlooKvStore(KvStore& store, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // What is left of the timeout (at least 1 ms, so that an expired one
  // still asks the store once and fails with its answer).
  std::chrono::milliseconds Left() const;

  KvStore& store_;
  const std::chrono::steady_clock::time_point deadline_;
};

}  // namespace ccl
