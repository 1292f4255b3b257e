// Servers in child processes of the bench itself (/proc/self/exe started
// with a flag that makes it serve), one per rank, so a peer measured beside
// the workers runs in processes of its own as they do. Each child prints its
// loopback port on a line and serves until killed.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ccl::bench {

class ChildServers {
 public:
  // Starts `count` children as `/proc/self/exe args...`.
  ChildServers(int count, const std::vector<std::string>& args);
  // Kills and reaps every child.
  ~ChildServers();
  ChildServers(const ChildServers&) = delete;
  ChildServers& operator=(const ChildServers&) = delete;

  // "127.0.0.1:PORT" per child; empty unless every child came up.
  std::vector<std::string> addresses() const;

 private:
  std::vector<pid_t> pids_;
  std::vector<std::string> addresses_;
};

// What a child calls once it listens: the line its parent waits for.
void AnnouncePort(int port);

}  // namespace ccl::bench
