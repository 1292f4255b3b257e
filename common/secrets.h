// Secrets as plain logic (no gRPC): making one and comparing one. The
// coordinator issues a secret per registered worker with these, and the
// token check compares bearer tokens with them.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ccl {

// Compares in time that depends only on the lengths, so that a remote caller
// cannot find a secret byte by byte from response times.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

// `bytes` bytes from the kernel's CSPRNG (getrandom(2)), hex-encoded;
// UNAVAILABLE if the kernel cannot give them.
absl::StatusOr<std::string> RandomSecretHex(size_t bytes);

}  // namespace ccl
