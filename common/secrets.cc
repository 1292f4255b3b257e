#include "common/secrets.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace ccl {

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  // The volatile read keeps the compiler from turning the loop into an
  // early-exit comparison.
  volatile unsigned char result = diff;
  return result == 0;
}

absl::StatusOr<std::string> RandomSecretHex(size_t bytes) {
  std::vector<char> raw(bytes);
  size_t filled = 0;
  while (filled < bytes) {
    const ssize_t n = getrandom(raw.data() + filled, bytes - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    filled += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(raw.data(), raw.size()));
}

}  // namespace ccl
