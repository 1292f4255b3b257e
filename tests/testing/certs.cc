#include "tests/testing/certs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace ccl::testing {
namespace {

namespace fs = std::filesystem;

// A config of our own, so the system's openssl.cnf changes nothing.
constexpr char kConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
CN = ccl test
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[v3_leaf]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[ca]
default_ca = test_ca
[test_ca]
database = index.txt
new_certs_dir = .
serial = serial
default_md = sha256
policy = any
unique_subject = no
[any]
commonName = supplied
)";

absl::Status Run(const std::string& dir, const std::string& command) {
  const std::string full =
      absl::StrCat("cd '", dir, "' && ", command, " >>openssl.log 2>&1");
  if (std::system(full.c_str()) != 0) {
    std::ifstream log(dir + "/openssl.log");
    std::string text((std::istreambuf_iterator<char>(log)), {});
    return absl::InternalError(
        absl::StrCat("openssl failed: ", command, "\n", text));
  }
  return absl::OkStatus();
}

constexpr char kNewKey[] = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Run(dir, absl::StrCat("openssl req -x509 -config openssl.cnf ",
                               "-extensions v3_ca ", kNewKey, " -keyout ", name,
                               ".key -out ", name, ".pem -days 2 ",
                               "-subj '/CN=", name, "'"));
}

absl::Status MakeLeaf(const std::string& dir, const std::string& ca,
                      const std::string& name) {
  if (absl::Status s =
          Run(dir, absl::StrCat("openssl req -new -config openssl.cnf ",
                                kNewKey, " -keyout ", name, ".key -out ", name,
                                ".csr -subj '/CN=localhost'"));
      !s.ok()) {
    return s;
  }
  return Run(dir, absl::StrCat("openssl x509 -req -in ", name, ".csr -CA ", ca,
                               ".pem -CAkey ", ca, ".key -CAcreateserial ",
                               "-days 2 -extfile openssl.cnf ",
                               "-extensions v3_leaf -out ", name, ".pem"));
}

}  // namespace

std::string WriteTestFile(const std::string& dir, const std::string& name,
                          const std::string& text) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

TestCerts::~TestCerts() {
  std::error_code error;
  if (!dir.empty()) fs::remove_all(dir, error);
}

absl::StatusOr<std::unique_ptr<TestCerts>> MakeTestCerts() {
  auto certs = std::make_unique<TestCerts>();
  std::string pattern =
      (fs::temp_directory_path() / "ccl-certs-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::InternalError("mkdtemp failed");
  }
  const std::string dir = certs->dir = pattern;
  WriteTestFile(dir, "openssl.cnf", kConfig);
  WriteTestFile(dir, "index.txt", "");
  WriteTestFile(dir, "serial", "1000\n");
  for (absl::Status s :
       {MakeCa(dir, "ca"), MakeCa(dir, "other_ca"),
        MakeLeaf(dir, "ca", "server"), MakeLeaf(dir, "ca", "client"),
        MakeLeaf(dir, "other_ca", "other")}) {
    if (!s.ok()) return s;
  }
  // x509 cannot backdate a certificate; `openssl ca` can.
  if (absl::Status s = Run(
          dir, absl::StrCat("openssl req -new -config openssl.cnf ", kNewKey,
                            " -keyout expired.key -out expired.csr ",
                            "-subj '/CN=localhost'"));
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          Run(dir,
              "openssl ca -config openssl.cnf -batch -notext -cert ca.pem "
              "-keyfile ca.key -in expired.csr -out expired.pem -extfile "
              "openssl.cnf -extensions v3_leaf -startdate 20200101000000Z "
              "-enddate 20200102000000Z");
      !s.ok()) {
    return s;
  }
  auto path = [&](const char* name) { return dir + "/" + name; };
  certs->ca = path("ca.pem");
  certs->server_cert = path("server.pem");
  certs->server_key = path("server.key");
  certs->client_cert = path("client.pem");
  certs->client_key = path("client.key");
  certs->other_ca = path("other_ca.pem");
  certs->other_cert = path("other.pem");
  certs->other_key = path("other.key");
  certs->expired_cert = path("expired.pem");
  certs->expired_key = path("expired.key");
  return certs;
}

}  // namespace ccl::testing
