#include "bench/child_servers.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

extern char** environ;

namespace ccl::bench {

ChildServers::ChildServers(int count, const std::vector<std::string>& args) {
  for (int i = 0; i < count; ++i) {
    int out[2];
    if (pipe(out) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    std::string self = "/proc/self/exe";
    std::vector<std::string> owned = args;
    std::vector<char*> argv = {self.data()};
    for (std::string& arg : owned) argv.push_back(arg.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, self.c_str(), &actions, nullptr,
                                    argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (spawned != 0) {
      close(out[0]);
      return;
    }
    pids_.push_back(pid);
    char line[32] = {};
    FILE* from_child = fdopen(out[0], "r");
    if (from_child == nullptr) {
      close(out[0]);
      return;
    }
    const bool got = std::fgets(line, sizeof(line), from_child) != nullptr;
    std::fclose(from_child);
    if (!got || std::atoi(line) <= 0) return;
    addresses_.push_back("127.0.0.1:" + std::to_string(std::atoi(line)));
  }
}

ChildServers::~ChildServers() {
  for (pid_t pid : pids_) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
}

std::vector<std::string> ChildServers::addresses() const {
  return addresses_.size() == pids_.size() ? addresses_
                                           : std::vector<std::string>{};
}

void AnnouncePort(int port) {
  std::printf("%d\n", port);
  std::fflush(stdout);
}

}  // namespace ccl::bench
