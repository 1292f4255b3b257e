// What a client or server needs to know about TLS and tokens, as plain
// options: no gRPC here, so that the client library's public header can
// carry them (common/credentials.h turns them into gRPC credentials).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "common/auth.h"

namespace ccl {

struct SecurityOptions {
  // PEM files. A server serves TLS when it has a cert and key; a client uses
  // TLS when it has a CA (and presents cert and key, if given, for mTLS).
  // Files are re-read every `cert_refresh_seconds`, so rotated certificates
  // take effect without a restart.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  // Server: reject clients without a certificate signed by tls_ca.
  bool require_client_cert = false;
  // Client: the name the server certificate must carry, when the target's
  // host is not it (pods dialled by IP, say).
  std::string tls_server_name;
  unsigned cert_refresh_seconds = 60;
  // Server: plaintext on a non-loopback address, asked for explicitly.
  bool insecure = false;
  // Server: the secrets it accepts. Client: `tokens.full` is the one token
  // it sends (whatever role the server gives it).
  RoleTokens tokens;

  bool server_tls() const { return !tls_cert.empty() || !tls_key.empty(); }
  bool client_tls() const { return !tls_ca.empty(); }
};

// Fills what the flags left empty from the environment: CCL_TLS_CERT,
// CCL_TLS_KEY, CCL_TLS_CA, CCL_TLS_SERVER_NAME, CCL_TLS_REQUIRE_CLIENT_CERT
// and CCL_INSECURE (1/true), and the tokens from CCL_TOKEN /
// CCL_TOKEN_FILE, CCL_READ_ONLY_TOKEN / CCL_READ_ONLY_TOKEN_FILE and
// CCL_JOIN_TOKEN / CCL_JOIN_TOKEN_FILE. `token_files` holds the flags' token
// file paths (full, read-only, join; empty: not given), read here; a file
// wins over its variable. Token files are trimmed of surrounding whitespace.
struct TokenFiles {
  std::string full;
  std::string read_only;
  std::string join;
};
absl::Status ResolveSecurityOptions(const TokenFiles& token_files,
                                    SecurityOptions* options);

}  // namespace ccl
