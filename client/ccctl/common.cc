#include <cstdlib>
#include <fstream>
#include <random>

#include "absl/strings/str_format.h"
#include "client/ccctl/ccctl.h"
#include "client/ccctl/format.h"

namespace ccl::ctl {

std::string StateDir() {
  if (const char* dir = std::getenv("CCCTL_STATE_DIR"); dir && *dir) return dir;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.ccctl/cluster";
}

std::string ResolveCoordinator(const Globals& globals) {
  if (!globals.coordinator.empty()) return globals.coordinator;
  if (const char* env = std::getenv("CCCTL_COORDINATOR"); env && *env)
    return env;
  std::ifstream state(StateDir() + "/state.json");
  if (state) {
    try {
      nlohmann::json document = nlohmann::json::parse(state);
      if (document.contains("coordinator")) {
        return document["coordinator"].get<std::string>();
      }
    } catch (const nlohmann::json::exception&) {
      // A damaged state file falls back to the default address.
    }
  }
  return "127.0.0.1:29400";
}

absl::StatusOr<SecurityOptions> ResolveSecurity(const Globals& globals) {
  SecurityOptions security = globals.security.options;
  if (absl::Status s =
          ResolveSecurityOptions(globals.security.token_files, &security);
      !s.ok()) {
    return s;
  }
  return security;
}

absl::StatusOr<std::unique_ptr<ClusterClient>> Connect(const Globals& globals) {
  auto timeout = ParseDuration(globals.timeout);
  if (!timeout.ok()) return timeout.status();
  auto security = ResolveSecurity(globals);
  if (!security.ok()) return security.status();
  ClientOptions options;
  options.security = *std::move(security);
  options.coordinator = ResolveCoordinator(globals);
  options.timeout = *timeout;
  options.group = globals.group;
  return ClusterClient::Connect(options);
}

std::string TemporaryPrefix(const std::string& what) {
  std::random_device entropy;  // /dev/urandom: differs between processes
  const uint64_t id = (static_cast<uint64_t>(entropy()) << 32) | entropy();
  return absl::StrFormat("ccctl.%s.%016x.", what, id);
}

bool FreeTemporaries(ClusterClient& client,
                     const std::vector<Temporary>& temporaries) {
  bool ok = true;
  for (const auto& [name, ranks] : temporaries) {
    for (const auto& r : client.Free(ranks, name)) {
      if (r.result.ok() || absl::IsNotFound(r.result.status())) continue;
      std::cerr << "ccctl: rank " << r.rank << ": could not free temporary "
                << name << " (" << StatusText(r.result.status())
                << "); free it with: ccctl tensor free " << name << " --ranks "
                << r.rank << "\n";
      ok = false;
    }
  }
  return ok;
}

int Fail(const absl::Status& status, bool usage) {
  std::cerr << "ccctl: " << StatusText(status) << "\n";
  return usage ? kExitUsage : kExitFailure;
}

void PrintJson(const nlohmann::json& document) {
  std::cout << document.dump(2) << std::endl;
}

}  // namespace ccl::ctl
