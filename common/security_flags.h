// The security flags every binary takes, one spelling for all of them; the
// environment fills what a flag leaves empty (see ResolveSecurityOptions).
#pragma once

#include "CLI/CLI.hpp"
#include "common/credentials.h"

namespace ccl {

struct SecurityFlags {
  SecurityOptions options;
  TokenFiles token_files;
};

enum class SecurityFlagSet {
  kClient,       // ccctl: CA, client cert, the token it sends
  kServer,       // ccworker: all of a server's, plus the join token it sends
  kCoordinator,  // cccoord: all of a server's, plus the join token it checks
};

inline void AddSecurityFlags(CLI::App& app, SecurityFlags& flags,
                             SecurityFlagSet set) {
  const bool server = set != SecurityFlagSet::kClient;
  auto& o = flags.options;
  app.add_option("--tls-cert", o.tls_cert,
                 server ? "PEM certificate this server presents (and, for "
                          "mTLS, its client certificate) (env CCL_TLS_CERT)"
                        : "PEM client certificate for mTLS (env CCL_TLS_CERT)");
  app.add_option("--tls-key", o.tls_key,
                 "PEM private key of --tls-cert (env CCL_TLS_KEY)");
  app.add_option("--tls-ca", o.tls_ca,
                 "PEM CA bundle: verifies servers (a client with it uses TLS) "
                 "and, on a server, client certificates (env CCL_TLS_CA)");
  if (set != SecurityFlagSet::kCoordinator) {
    app.add_option("--tls-server-name", o.tls_server_name,
                   "name the server certificate must carry, when the address "
                   "is not it (env CCL_TLS_SERVER_NAME)");
  }
  app.add_option("--token-file", flags.token_files.full,
                 server ? "file with the full-access token this server "
                          "accepts (env CCL_TOKEN_FILE or CCL_TOKEN)"
                        : "file with the token to send (env CCL_TOKEN_FILE "
                          "or CCL_TOKEN)");
  if (server) {
    app.add_flag("--tls-require-client-cert", o.require_client_cert,
                 "mTLS: refuse clients without a certificate signed by "
                 "--tls-ca (env CCL_TLS_REQUIRE_CLIENT_CERT=1)");
    app.add_flag("--insecure", o.insecure,
                 "serve plaintext on a non-loopback address (env "
                 "CCL_INSECURE=1)");
    app.add_option("--read-only-token-file", flags.token_files.read_only,
                   "file with a token that may only read status and tensors "
                   "(env CCL_READ_ONLY_TOKEN_FILE or CCL_READ_ONLY_TOKEN)");
    app.add_option("--join-token-file", flags.token_files.join,
                   set == SecurityFlagSet::kCoordinator
                       ? "file with the token workers register with (env "
                         "CCL_JOIN_TOKEN_FILE or CCL_JOIN_TOKEN)"
                       : "file with the token to register with the "
                         "coordinator (default: the full token) (env "
                         "CCL_JOIN_TOKEN_FILE or CCL_JOIN_TOKEN)");
  }
  app.add_option("--cert-refresh-s", o.cert_refresh_seconds,
                 "how often certificate files are re-read")
      ->capture_default_str();
}

}  // namespace ccl
