// ccctl console: a web console on the cluster ccctl is pointed at. Pages
// (built into the binary) poll JSON endpoints that serve the documents the
// commands print with -o json; docs/console.md lists them.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/ccctl/ccctl.h"

namespace ccl::ctl {

// What a browser may do. Viewers read; operators also start benches and the
// doctor, which load every rank.
enum class ConsoleRole { kNone, kViewer, kOperator };
std::string_view ConsoleRoleName(ConsoleRole role);

// The console's own secrets, never the cluster's: a person given the page
// gets no token that reaches a worker.
struct ConsoleTokens {
  std::string viewer;     // empty: anyone who reaches the port may view
  std::string operator_;  // empty: no one may start runs from the page
};

// The role of a request by its Authorization header ("Bearer <token>").
ConsoleRole RoleOf(const ConsoleTokens& tokens,
                   absl::string_view authorization);

// Refuses settings that would expose the cluster: a listen address other
// than loopback without a viewer token, tokens equal to each other or to the
// token the console sends to the cluster.
absl::Status CheckConsoleSettings(const std::string& listen,
                                  const ConsoleTokens& tokens,
                                  const std::string& cluster_token);

// One embedded file of the pages.
struct ConsoleAsset {
  const char* path;  // "/", "/console.js"
  const char* content_type;
  const unsigned char* data;
  size_t size;
};
// The files, ending with a {nullptr} entry (generated at build time from
// client/ccctl/console/).
extern const ConsoleAsset kConsoleAssets[];

class ConsoleServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: any free port
    ConsoleTokens tokens;
    Globals globals;  // how to reach the cluster
    std::string ccctl_path;
    // Flags every ccctl child gets (coordinator, timeout, TLS, token file).
    std::vector<std::string> child_globals;
  };
  // Binds and starts serving on threads of its own.
  static absl::StatusOr<std::unique_ptr<ConsoleServer>> Start(Options options);
  ~ConsoleServer();
  int port() const;
  // Stops serving and any run it started.
  void Stop();

  struct Impl;

 private:
  explicit ConsoleServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ccl::ctl
