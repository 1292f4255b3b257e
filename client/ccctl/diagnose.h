// Reads the flight recorders of every rank of a group and says, in words,
// where the ranks stand and where they diverge ("rank 1 waits in seq 17
// recv from 0; rank 0's last op is seq 16"). Plain logic over the client
// library's logs, unit-tested without a cluster.
#pragma once

#include <string>
#include <vector>

#include "client/types.h"

namespace ccl::ctl {

// `group_to_world[i]` is the world rank of group rank i (records name roots
// and peers by group rank; logs are keyed by world rank); empty for the world.
std::vector<std::string> Diagnose(const std::vector<client::OpLog>& logs,
                                  const std::vector<int>& group_to_world = {});

// "all_reduce of 4 float32", "recv of 3 float32 from 0", "barrier".
std::string DescribeRecord(const client::OpRecord& record);

}  // namespace ccl::ctl
