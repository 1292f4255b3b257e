#include "common/hostname_rank.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace ccl {

absl::StatusOr<int> RankFromHostname(const std::string& hostname) {
  // A FQDN's first label is the pod name.
  const std::string name = hostname.substr(0, hostname.find('.'));
  const size_t dash = name.rfind('-');
  int rank = -1;
  if (dash == std::string::npos || dash + 1 == name.size() ||
      name.find_first_not_of("0123456789", dash + 1) != std::string::npos ||
      !absl::SimpleAtoi(name.substr(dash + 1), &rank) || rank < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hostname '", hostname,
                     "' does not end in -N (a StatefulSet pod ordinal)"));
  }
  return rank;
}

}  // namespace ccl
