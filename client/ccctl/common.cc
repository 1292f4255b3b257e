#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/ccctl.h"
#include "client/ccctl/format.h"
#include "client/ccctl/values.h"

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
  // "0": a unary Submit per op and rank, as before op streams (for a
  // network path that does not carry long-lived streams well).
  if (const char* streams = std::getenv("CCL_CLIENT_OP_STREAMS")) {
    options.op_streams = std::string(streams) != "0";
  }
  if (const char* poll = std::getenv("CCL_CLIENT_BUSY_POLL_US")) {
    options.busy_poll = std::chrono::microseconds(std::atoll(poll));
  }
  // One line on stderr when an op waited for the world to re-form, so that
  // a person knows why it took a second and what broke before.
  options.on_reform = [](const std::string& line) {
    std::fprintf(stderr, "ccctl: %s\n", line.c_str());
  };
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

ShownHead ExactHead(ClusterClient& client, int rank, const std::string& name,
                    const TensorSummary& summary) {
  ShownHead shown;
  const DType dtype = summary.info.dtype;
  shown.truncated =
      summary.info.numel > static_cast<int64_t>(summary.head.size());
  if (!DoubleHoldsEveryValue(dtype) && !summary.head.empty()) {
    auto raw =
        client.Read(rank, name, 0, static_cast<int64_t>(summary.head.size()));
    if (raw.ok()) {
      shown.text = DecodeValues(dtype, *raw);
      shown.json = nlohmann::json::array();
      for (const std::string& value : shown.text) {
        shown.json.push_back(std::stoll(value));
      }
      return shown;
    }
    // The tensor changed or went away between the two reads: the doubles
    // are what there is; a value beyond 2^53 says it is near, not exact.
  }
  shown.json = summary.head;
  for (double value : summary.head) {
    std::string text = FormatValue(value, dtype);
    if (!DoubleHoldsEveryValue(dtype) &&
        std::fabs(value) > 9007199254740992.0) {
      text = "~" + text;
    }
    shown.text.push_back(std::move(text));
  }
  return shown;
}

std::string ShownHead::Render() const {
  std::string out = "[" + absl::StrJoin(text, ", ");
  if (truncated) out += text.empty() ? "..." : ", ...";
  return out + "]";
}

}  // namespace ccl::ctl
