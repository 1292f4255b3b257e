// Certificates made at test time with the openssl command line, in a temp
// dir removed with the object: no key is ever committed. Every leaf carries
// SAN IP:127.0.0.1 and DNS:localhost and both serverAuth and clientAuth, so
// one cert serves a worker as server and as client of the coordinator.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace ccl::testing {

struct TestCerts {
  std::string dir;
  std::string ca;  // the cluster's CA
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string other_ca;                   // an unrelated CA
  std::string other_cert, other_key;      // signed by other_ca
  std::string expired_cert, expired_key;  // by ca, expired in 2020
  ~TestCerts();
};

absl::StatusOr<std::unique_ptr<TestCerts>> MakeTestCerts();

// Writes `text` to a fresh file under `dir`; returns its path.
std::string WriteTestFile(const std::string& dir, const std::string& name,
                          const std::string& text);

}  // namespace ccl::testing
