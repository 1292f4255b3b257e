// The coordinator's Prometheus metrics, all read from the core's world
// snapshot at scrape time: world size and state, generation, members by
// state, and each rank's heartbeat age (the number to alert on).
#pragma once

#include "common/metrics.h"
#include "coordinator/coordinator_core.h"

namespace ccl::coordinator {

// Declares the families on `registry` and adds a collector over `core`,
// which must outlive the registry's scrapes.
void RegisterCoordinatorMetrics(MetricsRegistry& registry,
                                CoordinatorCore& core);

}  // namespace ccl::coordinator
