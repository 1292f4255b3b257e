// The one place where absl::Status and grpc::Status meet. Canonical codes
// map one to one, so a NOT_FOUND in the logic is a NOT_FOUND on the wire.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace ccl {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace ccl
