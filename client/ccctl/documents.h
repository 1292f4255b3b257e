// The JSON documents that `ccctl status -o json` and `ccctl debug ops -o
// json` print, as functions: the console serves the same documents, so a
// script reads one shape whichever it asks.
#pragma once

#include <string>

#include "client/ccctl/ccctl.h"
#include "nlohmann/json.hpp"

namespace ccl::ctl {

// The world as the coordinator sees it now, and each worker's own answer
// under "workers" ({"rank", "error"} for a rank that did not answer).
nlohmann::json WorldDocument(ClusterClient& client);

// The flight recorders of the client's group: "ranks" (one log each),
// "diagnosis" (where the ranks diverge, in words) and "errors" (ranks that
// did not answer, as {"rank", "error"}).
nlohmann::json OpsDocument(ClusterClient& client, int limit);

}  // namespace ccl::ctl
