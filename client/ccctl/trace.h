// ccctl debug trace: every rank's flight recorder as one Chrome / Perfetto
// trace (JSON object format). The Python client's trace() builds the same
// document (client/python/ccl/_trace.py); docs/python.md, "Traces", says
// how to read it. Plain logic over the client library's logs, unit-tested
// without a cluster; the command around it fetches the logs and clock
// readings.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "client/types.h"
#include "nlohmann/json.hpp"

namespace ccl::ctl {

// One reading of a worker's clock: its wall clock minus the midpoint of the
// client's round trip, and that round trip.
struct ClockSample {
  double offset_us = 0;
  double rtt_us = 0;
};

struct RankClock {
  std::string host;
  double offset_us = 0;
  // Half the round trip of the reading the offset comes from.
  double uncertainty_us = 0;
  // False when |offset| <= uncertainty: the clocks agree as far as can be
  // measured, so the rank's stamps are taken as they are.
  bool applied = false;
};

// Ranks on one host share the host's shortest-round-trip sample (one clock,
// so one offset); a rank without a host stands alone.
std::map<int, RankClock> AlignClocks(const std::map<int, ClockSample>& samples,
                                     const std::map<int, std::string>& hosts);

struct TraceLog {
  int rank = 0;  // world rank
  std::string group;
  client::OpLog log;
};

// The trace: a process per rank, a thread track per group, a slice per op
// from its start (enqueue + queue time) to its completion, failures marked,
// and flow arrows between the ranks of one (generation, group, seq): send to
// recv, and for a collective from the rank that started last to each other
// rank. `groups` maps a group to its world ranks in group-rank order;
// `members` describes each rank ("cpu @ host").
nlohmann::ordered_json BuildTrace(
    const std::vector<TraceLog>& logs,
    const std::map<std::string, std::vector<int>>& groups,
    const std::map<int, RankClock>& clocks,
    const std::map<int, std::string>& members, const std::string& generator,
    const std::string& coordinator);

}  // namespace ccl::ctl
