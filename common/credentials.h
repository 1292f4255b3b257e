// The one place servers and channels get their credentials. Every binary
// (cccoord, ccworker's server and its channel to the coordinator, ccctl and
// the client library) builds through here, so TLS, mTLS and token checks
// mean the same thing everywhere.
//
// Defaults: plaintext and no token, which is allowed only on loopback (the
// zero-configuration local cluster). A non-loopback bind needs TLS or an
// explicit `insecure`; one without TLS or a token is served with a warning.
#pragma once

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/auth.h"
#include "common/security_options.h"

namespace ccl {

// True for 127.0.0.0/8, ::1 and localhost ("host:port" or a bare host).
bool IsLoopbackAddress(const std::string& address);

// One secret as the security flags read theirs: `flag_file`, else the file
// in $<var>_FILE, else $<var>, trimmed of surrounding whitespace; empty when
// none is given. INVALID_ARGUMENT for a file that is unreadable or empty.
absl::StatusOr<std::string> ResolveSecret(const std::string& flag_file,
                                          const char* var);

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  // What the operator should hear about (plaintext or no token on a
  // reachable address); the caller logs them.
  std::vector<std::string> warnings;
};

// Credentials for a server listening on `listen`, with the token check
// installed. FAILED_PRECONDITION for plaintext on a non-loopback address
// without `insecure`; INVALID_ARGUMENT for options that do not fit together
// or files that cannot be read.
absl::StatusOr<ServerSecurity> MakeServerCredentials(
    const SecurityOptions& options, const std::string& listen);

// Channels that use TLS when options.client_tls() and send
// options.tokens.full, if any, as "authorization: Bearer <token>" on every
// call. Create checks the options and files once; channels made from one
// factory share its credentials (and its certificate watcher).
class ChannelFactory {
 public:
  // INVALID_ARGUMENT if a file cannot be read or the options do not fit.
  static absl::StatusOr<ChannelFactory> Create(const SecurityOptions& options);
  std::shared_ptr<grpc::Channel> Make(
      const std::string& target,
      grpc::ChannelArguments args = grpc::ChannelArguments()) const;

 private:
  ChannelFactory() = default;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::string token_;
  std::string server_name_;
};

// ChannelFactory::Create(options) and Make(target, args) in one.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const SecurityOptions& options,
    grpc::ChannelArguments args = grpc::ChannelArguments());

}  // namespace ccl
