// Shared pieces of the ccctl subcommands: global options, output, exit codes.
#pragma once

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cluster_client.h"
#include "common/security_flags.h"
#include "nlohmann/json.hpp"

namespace ccl::ctl {

// ccctl is the client library's one user inside this binary: its commands
// name the library's types without the namespace (many hold a `client`).
using client::BenchResult;
using client::BenchSpec;
using client::ClientOptions;
using client::ClusterClient;
using client::Fill;
using client::FillKind;
using client::FillKindByName;
using client::GroupInfo;
using client::MemberState;
using client::MemberStateName;
using client::Op;
using client::OpLog;
using client::OpRecord;
using client::OpResult;
using client::OpTiming;
using client::Plan;
using client::PlanResult;
using client::PlanStep;
using client::RankResult;
using client::RankResults;
using client::StatusText;
using client::TensorAlloc;
using client::TensorInfo;
using client::TensorList;
using client::TensorSpec;
using client::TensorSummary;
using client::TensorWrite;
using client::WorkerInfo;
using client::WorkRef;
using client::WorkState;
using client::WorkStateName;
using client::WorkStatus;
using client::World;
using client::WorldState;
using client::WorldStateName;

// Exit codes: 0 success, 1 an RPC or op failed, 2 bad usage, 3 the doctor
// found something (it ran; scripts and Kubernetes jobs act on it).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitFindings = 3;

struct Globals {
  std::string coordinator;
  std::string output = "table";
  std::string timeout = "30s";
  std::string group = "world";
  // TLS and the token; the environment fills the rest in Connect.
  SecurityFlags security;
  bool json() const { return output == "json"; }
};

// Where `ccctl cluster up` keeps its state (logs, pids, the address).
std::string StateDir();
// --coordinator, else CCCTL_COORDINATOR, else the local cluster's, else the
// default port on 127.0.0.1.
std::string ResolveCoordinator(const Globals& globals);

absl::StatusOr<std::unique_ptr<ClusterClient>> Connect(const Globals& globals);
// The flags' security options completed from the environment.
absl::StatusOr<SecurityOptions> ResolveSecurity(const Globals& globals);

// Prints "ccctl: CODE: message" to stderr; returns kExitFailure (or
// kExitUsage for INVALID_ARGUMENT raised before any RPC, when `usage`).
int Fail(const absl::Status& status, bool usage = false);
// Prints each failed rank; true if any failed.
template <typename T>
bool ReportRankErrors(const RankResults<T>& results) {
  bool failed = false;
  for (const auto& r : results) {
    if (!r.result.ok()) {
      std::cerr << "ccctl: rank " << r.rank << ": "
                << StatusText(r.result.status()) << "\n";
      failed = true;
    }
  }
  return failed;
}

// The prefix of one invocation's temporary tensors, "ccctl.<what>.<16 hex
// digits>.": random per invocation, never the PID, because every ccctl in a
// container is PID 1 and two ccctl at once must never share a name.
std::string TemporaryPrefix(const std::string& what);

// A temporary tensor and the ranks that may hold it.
struct Temporary {
  std::string name;
  std::vector<int> ranks;
};
// Frees each temporary on each of its ranks, as cleanup after a command that
// may have allocated it only on some of them: NOT_FOUND is expected there
// and silent; any other failure is reported on stderr with the command that
// frees it by hand. Returns false if any such failure.
bool FreeTemporaries(ClusterClient& client,
                     const std::vector<Temporary>& temporaries);

void PrintJson(const nlohmann::json& document);

// A tensor's first elements as a person reads them and as JSON, exactly: a
// summary's head travels as doubles, which do not hold every int64, so an
// int64 head is read back as raw bytes (JSON numbers as int64 then).
struct ShownHead {
  std::vector<std::string> text;
  nlohmann::json json;
  bool truncated = false;  // the tensor has more elements than shown
  // "[1, 2, ...]"
  std::string Render() const;
};
ShownHead ExactHead(ClusterClient& client, int rank, const std::string& name,
                    const TensorSummary& summary);

}  // namespace ccl::ctl
