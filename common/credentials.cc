#include "common/credentials.h"

#include <grpc/grpc_security.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <grpcpp/support/client_interceptor.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ccl {
namespace {

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

bool EnvTrue(const char* name) {
  const std::string value = absl::AsciiStrToLower(Env(name));
  return value == "1" || value == "true" || value == "yes";
}

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " file '", path, "'"));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The flag's file, else $<VAR>_FILE, else $<VAR>.
absl::Status ResolveToken(const std::string& flag_file, const char* var,
                          std::string* token) {
  std::string file = flag_file;
  if (file.empty()) file = Env(absl::StrCat(var, "_FILE").c_str());
  std::string value;
  if (!file.empty()) {
    auto text = ReadFile(file, var);
    if (!text.ok()) return text.status();
    value = std::string(absl::StripAsciiWhitespace(*text));
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token file '", file, "' is empty"));
    }
  } else {
    value = std::string(absl::StripAsciiWhitespace(Env(var)));
  }
  if (!value.empty()) *token = value;
  return absl::OkStatus();
}

std::string HostOf(const std::string& address) {
  std::string host = address;
  if (!host.empty() && host.front() == '[') {  // [v6]:port
    const auto close = host.find(']');
    return close == std::string::npos ? host : host.substr(1, close - 1);
  }
  // One colon: host:port. More: a bare IPv6 address.
  const auto colon = host.rfind(':');
  if (colon != std::string::npos && host.find(':') == colon) {
    host = host.substr(0, colon);
  }
  return host;
}

// The check every call passes, in both TLS and plaintext modes.
grpc::Status CheckCall(const RoleTokens& tokens,
                       const grpc::AuthMetadataProcessor::InputMetadata& md) {
  absl::string_view method;
  std::optional<absl::string_view> authorization;
  for (const auto& [key, value] : md) {
    const absl::string_view k(key.data(), key.size());
    if (k == ":path") method = absl::string_view(value.data(), value.size());
    if (k == "authorization") {
      authorization = absl::string_view(value.data(), value.size());
    }
  }
  absl::Status status = Authorize(tokens, method, authorization);
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

// Runs inline on the transport thread: the check is a few comparisons.
class TokenAuthProcessor final : public grpc::AuthMetadataProcessor {
 public:
  explicit TokenAuthProcessor(RoleTokens tokens) : tokens_(std::move(tokens)) {}
  bool IsBlocking() const override { return false; }
  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext*,
                       OutputMetadata*, OutputMetadata*) override {
    return CheckCall(tokens_, auth_metadata);
  }

 private:
  const RoleTokens tokens_;
};

// grpc::InsecureServerCredentials() refuses an auth metadata processor, yet
// core's insecure credentials run the server auth filter like any other.
// This wraps them so plaintext servers check tokens through the same
// processor as TLS ones.
class PlaintextServerCredentials final : public grpc::ServerCredentials {
 public:
  PlaintextServerCredentials()
      : creds_(grpc_insecure_server_credentials_create()) {}
  ~PlaintextServerCredentials() override {
    grpc_server_credentials_release(creds_);
  }
  void SetAuthMetadataProcessor(
      const std::shared_ptr<grpc::AuthMetadataProcessor>& processor) override {
    auto* held = new std::shared_ptr<grpc::AuthMetadataProcessor>(processor);
    grpc_server_credentials_set_auth_metadata_processor(
        creds_, {&Process, &Destroy, held});
  }

 private:
  int AddPortToServer(const std::string& addr, grpc_server* server) override {
    return grpc_server_add_http2_port(server, addr.c_str(), creds_);
  }

  static void Process(void* state, grpc_auth_context*, const grpc_metadata* md,
                      size_t num_md, grpc_process_auth_metadata_done_cb done,
                      void* user_data) {
    auto& processor =
        *static_cast<std::shared_ptr<grpc::AuthMetadataProcessor>*>(state);
    grpc::AuthMetadataProcessor::InputMetadata input;
    for (size_t i = 0; i < num_md; ++i) {
      input.emplace(
          grpc::string_ref(
              reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].key)),
              GRPC_SLICE_LENGTH(md[i].key)),
          grpc::string_ref(
              reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(md[i].value)),
              GRPC_SLICE_LENGTH(md[i].value)));
    }
    grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
    const grpc::Status status =
        processor->Process(input, nullptr, &consumed, &response);
    done(user_data, nullptr, 0, nullptr, 0,
         static_cast<grpc_status_code>(status.error_code()),
         status.ok() ? nullptr : status.error_message().c_str());
  }
  static void Destroy(void* state) {
    delete static_cast<std::shared_ptr<grpc::AuthMetadataProcessor>*>(state);
  }

  grpc_server_credentials* creds_;
};

class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header)
      : header_(header) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

// Works on plaintext channels too, where call credentials are not sent.
class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

// Fails now, with the path, rather than at the first handshake.
absl::Status CheckReadable(const std::string& path, const char* what);

// The files of `options` checked, then watched for rotation (servers and
// clients alike).
absl::StatusOr<
    std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider>>
CertificateProvider(const SecurityOptions& options) {
  for (const auto& [path, what] :
       {std::pair{options.tls_cert, "TLS certificate"},
        std::pair{options.tls_key, "TLS key"},
        std::pair{options.tls_ca, "TLS CA"}}) {
    if (absl::Status s = CheckReadable(path, what); !s.ok()) return s;
  }
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.tls_key, options.tls_cert, options.tls_ca,
      options.cert_refresh_seconds);
}

absl::Status CheckReadable(const std::string& path, const char* what) {
  if (path.empty()) return absl::OkStatus();
  auto text = ReadFile(path, what);
  return text.ok() ? absl::OkStatus() : text.status();
}

}  // namespace

absl::Status ResolveSecurityOptions(const TokenFiles& token_files,
                                    SecurityOptions* options) {
  auto fill = [](std::string& field, const char* var) {
    if (field.empty()) field = Env(var);
  };
  fill(options->tls_cert, "CCL_TLS_CERT");
  fill(options->tls_key, "CCL_TLS_KEY");
  fill(options->tls_ca, "CCL_TLS_CA");
  fill(options->tls_server_name, "CCL_TLS_SERVER_NAME");
  if (EnvTrue("CCL_TLS_REQUIRE_CLIENT_CERT")) {
    options->require_client_cert = true;
  }
  if (EnvTrue("CCL_INSECURE")) options->insecure = true;
  if (absl::Status s =
          ResolveToken(token_files.full, "CCL_TOKEN", &options->tokens.full);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          ResolveToken(token_files.read_only, "CCL_READ_ONLY_TOKEN",
                       &options->tokens.read_only);
      !s.ok()) {
    return s;
  }
  return ResolveToken(token_files.join, "CCL_JOIN_TOKEN",
                      &options->tokens.join);
}

absl::StatusOr<std::string> ResolveSecret(const std::string& flag_file,
                                          const char* var) {
  std::string secret;
  if (absl::Status status = ResolveToken(flag_file, var, &secret);
      !status.ok()) {
    return status;
  }
  return secret;
}

bool IsLoopbackAddress(const std::string& address) {
  const std::string host = absl::AsciiStrToLower(HostOf(address));
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<ServerSecurity> MakeServerCredentials(
    const SecurityOptions& options, const std::string& listen) {
  if (absl::Status s = ValidateRoleTokens(options.tokens); !s.ok()) return s;
  ServerSecurity out;
  const bool loopback = IsLoopbackAddress(listen);
  if (options.server_tls()) {
    if (options.tls_cert.empty() || options.tls_key.empty()) {
      return absl::InvalidArgumentError(
          "TLS needs both a certificate and a key (--tls-cert, --tls-key)");
    }
    if (options.require_client_cert && options.tls_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls-require-client-cert needs --tls-ca to verify clients with");
    }
    auto provider = CertificateProvider(options);
    if (!provider.ok()) return provider.status();
    grpc::experimental::TlsServerCredentialsOptions tls(*provider);
    tls.watch_identity_key_cert_pairs();
    if (!options.tls_ca.empty()) tls.watch_root_certs();
    tls.set_cert_request_type(
        options.require_client_cert
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
        : options.tls_ca.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
    out.credentials = grpc::experimental::TlsServerCredentials(tls);
  } else {
    if (!loopback && !options.insecure) {
      return absl::FailedPreconditionError(absl::StrCat(
          "refusing to serve plaintext on ", listen,
          ", which is not a loopback address: give a TLS certificate and key "
          "(--tls-cert, --tls-key) or ask for plaintext with --insecure "
          "(CCL_INSECURE=1)"));
    }
    out.credentials = std::make_shared<PlaintextServerCredentials>();
  }
  if (!loopback && !options.server_tls()) {
    out.warnings.push_back(
        absl::StrCat("serving plaintext on ", listen,
                     ": anyone on the network can read and alter the traffic"));
  }
  if (!loopback && !options.tokens.enabled()) {
    out.warnings.push_back(absl::StrCat(
        "no token configured on ", listen,
        ": anyone who can reach it can drive this cluster (--token-file or "
        "CCL_TOKEN_FILE)"));
  }
  out.credentials->SetAuthMetadataProcessor(
      std::make_shared<TokenAuthProcessor>(options.tokens));
  return out;
}

absl::StatusOr<ChannelFactory> ChannelFactory::Create(
    const SecurityOptions& options) {
  ChannelFactory factory;
  if (options.client_tls()) {
    if (options.tls_cert.empty() != options.tls_key.empty()) {
      return absl::InvalidArgumentError(
          "a client certificate needs its key and the other way round");
    }
    auto provider = CertificateProvider(options);
    if (!provider.ok()) return provider.status();
    grpc::experimental::TlsChannelCredentialsOptions tls;
    tls.set_certificate_provider(*provider);
    tls.watch_root_certs();
    if (!options.tls_cert.empty()) tls.watch_identity_key_cert_pairs();
    tls.set_certificate_verifier(
        std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
    factory.credentials_ = grpc::experimental::TlsCredentials(tls);
    factory.server_name_ = options.tls_server_name;
  } else {
    factory.credentials_ = grpc::InsecureChannelCredentials();
  }
  if (factory.credentials_ == nullptr) {
    return absl::InvalidArgumentError("could not make TLS channel credentials");
  }
  factory.token_ = options.tokens.full;
  return factory;
}

std::shared_ptr<grpc::Channel> ChannelFactory::Make(
    const std::string& target, grpc::ChannelArguments args) const {
  if (!server_name_.empty()) args.SetSslTargetNameOverride(server_name_);
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!token_.empty()) {
    interceptors.push_back(
        std::make_unique<BearerTokenInterceptorFactory>(token_));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials_, args, std::move(interceptors));
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const SecurityOptions& options,
    grpc::ChannelArguments args) {
  auto factory = ChannelFactory::Create(options);
  if (!factory.ok()) return factory.status();
  return factory->Make(target, std::move(args));
}

}  // namespace ccl
