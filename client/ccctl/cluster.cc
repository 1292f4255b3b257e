// ccctl cluster up|down|status: a local coordinator and N workers (and,
// with --hosts, a host agent per simulated host) in the background, the
// quickest way to have a cluster. State (pids, address,
// logs) lives in StateDir().
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/format.h"

namespace ccl::ctl {
namespace {

namespace fs = std::filesystem;

// The daemons sit next to ccctl when installed, or in the build tree's
// sibling folders.
std::string FindBinary(const std::string& name,
                       const std::string& build_subdir) {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    for (const fs::path& candidate :
         {self.parent_path() / name,
          self.parent_path().parent_path() / build_subdir / name}) {
      if (fs::exists(candidate)) return candidate.string();
    }
  }
  return name;  // rely on PATH
}

pid_t Spawn(const std::vector<std::string>& argv, const std::string& log_path) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  // A new session: the daemons outlive this ccctl and its terminal.
  setsid();
  const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
  }
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  execvp(args[0], args.data());
  _exit(127);
}

bool Alive(pid_t pid) { return pid > 0 && kill(pid, 0) == 0; }

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  return text;
}

struct UpArgs {
  int workers = 2;
  int hosts = 0;
  std::string device = "cpu";
  std::string wait = "60s";
};

int StopPids(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) {
    if (Alive(pid)) kill(pid, SIGTERM);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (pid_t pid : pids) {
    while (Alive(pid) && std::chrono::steady_clock::now() < deadline) {
      waitpid(pid, nullptr, WNOHANG);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (Alive(pid)) kill(pid, SIGKILL);
  }
  return kExitOk;
}

int Down(Globals& globals) {
  const std::string dir = StateDir();
  std::ifstream in(dir + "/state.json");
  if (!in) {
    std::cout << "no local cluster is running (" << dir << ")\n";
    return kExitOk;
  }
  nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  std::vector<pid_t> pids;
  if (state.is_object() && state.contains("workers")) {
    for (const auto& pid : state["workers"]) pids.push_back(pid.get<pid_t>());
  }
  if (state.is_object() && state.contains("host_agents")) {
    for (const auto& pid : state["host_agents"]) {
      pids.push_back(pid.get<pid_t>());
    }
  }
  if (state.is_object() && state.contains("coordinator_pid")) {
    pids.push_back(state["coordinator_pid"].get<pid_t>());
  }
  StopPids(pids);
  fs::remove(dir + "/state.json");
  if (globals.json()) {
    PrintJson({{"stopped", pids.size()}});
  } else {
    std::cout << "stopped the local cluster (" << pids.size()
              << " processes)\n";
  }
  return kExitOk;
}

// The last lines of a daemon's log that say something: why it exited.
std::string LastLines(const std::string& path, size_t count) {
  std::vector<std::string> lines;
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    lines.push_back(line);
    if (lines.size() > count) lines.erase(lines.begin());
  }
  return absl::StrJoin(lines, "\n  ");
}

// Checks --workers and --hosts, completing --hosts for one GPU. An error is
// a usage error.
absl::Status SettleUpArgs(UpArgs& args) {
  if (args.workers < 1) {
    return absl::InvalidArgumentError("--workers must be at least 1");
  }
  // One GPU for every worker (cuda:N): NCCL refuses two ranks of one host
  // on one GPU, so each worker is a simulated host of its own, talking to
  // the others through NCCL's network transport (../shared/GPU.md).
  const bool one_gpu = absl::StartsWith(args.device, "cuda:");
  if (one_gpu && args.workers > 1) {
    if (args.hosts == 0) {
      args.hosts = args.workers;
    } else if (args.hosts != args.workers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--device ", args.device, " puts all ", args.workers,
          " workers on one GPU, and NCCL refuses two ranks of one host "
          "on one GPU: each worker must be a host of its own (--hosts ",
          args.workers, ", or leave --hosts out)"));
    }
  }
  if (args.hosts < 0 || args.hosts > args.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--hosts must be between 0 and --workers (", args.workers,
                     "); got ", args.hosts));
  }
  return absl::OkStatus();
}

using Clock = std::chrono::steady_clock;

// Waits for a daemon's port file; the port, or UNAVAILABLE if the daemon
// exited or the deadline passed first.
absl::StatusOr<int> AwaitPort(pid_t pid, const std::string& port_file,
                              Clock::time_point deadline,
                              const std::string& what, const std::string& log) {
  while (!fs::exists(port_file) && Alive(pid) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!fs::exists(port_file)) {
    return absl::UnavailableError(
        absl::StrCat(what, " did not start; see ", log));
  }
  return std::stoi(ReadFile(port_file));
}

// With --hosts, the workers are split over that many "hosts" of
// consecutive ranks, each registering through its own cchostagent, as a
// node's workers do in a large world (docs/deploy.md). Each simulated host
// is a host to NCCL too (ccworker --host-id): its ranks talk to other
// hosts' through NCCL's network transport.
struct SimulatedHosts {
  std::vector<pid_t> agents;
  std::vector<std::string> agent_of;    // per worker; empty: none
  std::vector<std::string> host_id_of;  // per worker
};

// On failure, the agents started are stopped.
absl::StatusOr<SimulatedHosts> StartHostAgents(const UpArgs& args,
                                               const std::string& dir,
                                               const std::string& coordinator,
                                               Clock::time_point deadline) {
  SimulatedHosts hosts;
  hosts.agent_of.resize(args.workers);
  hosts.host_id_of.resize(args.workers);
  const int per_host =
      args.hosts > 0 ? (args.workers + args.hosts - 1) / args.hosts : 0;
  for (int h = 0; h < args.hosts; ++h) {
    const int first = h * per_host;
    const int count = std::min(per_host, args.workers - first);
    if (count <= 0) break;
    const std::string port_file = absl::StrCat(dir, "/host-agent-", h, ".port");
    const std::string log = absl::StrCat(dir, "/host-agent-", h, ".log");
    fs::remove(port_file);
    const pid_t pid =
        Spawn({FindBinary("cchostagent", "coordinator"), "--coordinator",
               coordinator, "--listen", "127.0.0.1:0", "--workers",
               absl::StrCat(count), "--port-file", port_file},
              log);
    hosts.agents.push_back(pid);
    auto port = AwaitPort(pid, port_file, deadline,
                          absl::StrCat("host agent ", h), log);
    if (!port.ok()) {
      StopPids(hosts.agents);
      return port.status();
    }
    for (int i = first; i < first + count; ++i) {
      hosts.agent_of[i] = absl::StrCat("127.0.0.1:", *port);
      hosts.host_id_of[i] = absl::StrCat("simhost", h);
    }
  }
  return hosts;
}

std::vector<pid_t> StartWorkers(const UpArgs& args, const std::string& dir,
                                const std::string& coordinator,
                                const SimulatedHosts& hosts,
                                const std::vector<std::string>& security_args) {
  std::vector<pid_t> workers;
  for (int i = 0; i < args.workers; ++i) {
    std::string device = args.device;
    if (device == "cuda") device = absl::StrCat("cuda:", i);
    std::vector<std::string> argv = {FindBinary("ccworker", "server"),
                                     "--coordinator",
                                     coordinator,
                                     "--device",
                                     device,
                                     "--rank",
                                     absl::StrCat(i),
                                     "--listen",
                                     "127.0.0.1:0"};
    if (!hosts.agent_of[i].empty()) {
      argv.insert(argv.end(), {"--host-agent", hosts.agent_of[i], "--host-id",
                               hosts.host_id_of[i]});
    }
    argv.insert(argv.end(), security_args.begin(), security_args.end());
    workers.push_back(Spawn(argv, absl::StrCat(dir, "/worker-", i, ".log")));
  }
  return workers;
}

// Ready when the world is complete and every worker says so. A worker that
// exited will not come back: that is said at once rather than at the
// deadline. INVALID_ARGUMENT for credentials that cannot work.
absl::Status AwaitReady(ClientOptions options,
                        const std::vector<pid_t>& workers,
                        const std::string& dir, Clock::time_point deadline,
                        const std::string& wait) {
  while (Clock::now() < deadline) {
    auto client = ClusterClient::Connect(options);
    if (client.ok() && (*client)->world().state == WorldState::kComplete) {
      bool ready = true;
      for (const auto& info : (*client)->Info((*client)->AllRanks())) {
        if (!info.result.ok() || info.result->state != "ready") ready = false;
      }
      if (ready) return absl::OkStatus();
    } else if (!client.ok() &&
               client.status().code() == absl::StatusCode::kInvalidArgument) {
      return client.status();
    }
    // Its children are ours, so a dead worker is a zombie until reaped here.
    for (size_t i = 0; i < workers.size(); ++i) {
      int status = 0;
      if (waitpid(workers[i], &status, WNOHANG) != workers[i]) continue;
      const std::string log = absl::StrCat(dir, "/worker-", i, ".log");
      return absl::UnavailableError(absl::StrCat(
          "worker ", i, " exited (",
          WIFEXITED(status) ? absl::StrCat("status ", WEXITSTATUS(status))
                            : absl::StrCat("signal ", WTERMSIG(status)),
          ") before the cluster was ready; the end of ", log, ":\n  ",
          LastLines(log, 3)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "the cluster did not become ready within ", wait, "; logs in ", dir));
}

int Up(Globals& globals, UpArgs args) {
  if (absl::Status s = SettleUpArgs(args); !s.ok()) return Fail(s, true);
  auto wait = ParseDuration(args.wait);
  if (!wait.ok()) return Fail(wait.status(), true);
  // What this ccctl will check readiness with: credentials that cannot work
  // are said before anything starts.
  auto security = ResolveSecurity(globals);
  if (!security.ok()) return Fail(security.status(), true);
  const std::string dir = StateDir();
  if (fs::exists(dir + "/state.json")) {
    Down(globals);
  }
  fs::create_directories(dir);
  const std::string port_file = dir + "/coordinator.port";
  fs::remove(port_file);
  // The daemons inherit the environment (CCL_TOKEN, CCL_TLS_*); a token
  // file given to ccctl as a flag is passed on, so the cluster accepts the
  // token this ccctl sends.
  std::vector<std::string> security_args;
  if (!globals.security.token_files.full.empty()) {
    security_args = {"--token-file", globals.security.token_files.full};
  }
  std::vector<std::string> coordinator_argv = {
      FindBinary("cccoord", "coordinator"),
      "--world-size",
      absl::StrCat(args.workers),
      "--listen",
      "127.0.0.1:0",
      "--port-file",
      port_file};
  coordinator_argv.insert(coordinator_argv.end(), security_args.begin(),
                          security_args.end());
  const std::string coordinator_log = dir + "/coordinator.log";
  const pid_t coordinator_pid = Spawn(coordinator_argv, coordinator_log);
  const auto deadline = Clock::now() + *wait;
  auto port = AwaitPort(coordinator_pid, port_file, deadline, "the coordinator",
                        coordinator_log);
  if (!port.ok()) {
    StopPids({coordinator_pid});
    return Fail(port.status());
  }
  const std::string address = absl::StrCat("127.0.0.1:", *port);
  auto hosts = StartHostAgents(args, dir, address, deadline);
  if (!hosts.ok()) {
    StopPids({coordinator_pid});
    return Fail(hosts.status());
  }
  const std::vector<pid_t> workers =
      StartWorkers(args, dir, address, *hosts, security_args);
  nlohmann::json state = {{"coordinator", address},
                          {"coordinator_pid", coordinator_pid},
                          {"workers", workers},
                          {"host_agents", hosts->agents},
                          {"device", args.device}};
  std::ofstream(dir + "/state.json") << state.dump(2) << "\n";

  ClientOptions options;
  options.coordinator = address;
  options.timeout = std::chrono::seconds(5);
  options.security = *security;
  if (absl::Status ready =
          AwaitReady(options, workers, dir, deadline, args.wait);
      !ready.ok()) {
    Down(globals);
    return Fail(ready, ready.code() == absl::StatusCode::kInvalidArgument);
  }
  if (globals.json()) {
    PrintJson(state);
  } else {
    std::cout << "local cluster up: coordinator " << address << ", "
              << args.workers << " " << args.device << " workers (logs in "
              << dir << ")\n";
  }
  return kExitOk;
}

}  // namespace

void AddClusterCommands(CLI::App& app, Globals& globals, int& exit_code) {
  auto* cluster =
      app.add_subcommand("cluster", "start or stop a local cluster");
  cluster->require_subcommand(1);
  auto args = std::make_shared<UpArgs>();
  auto* up = cluster->add_subcommand(
      "up", "start a coordinator and N workers on 127.0.0.1 in the background");
  up->add_option("--workers,-n", args->workers)->capture_default_str();
  up->add_option("--device", args->device,
                 "cpu, cuda (one GPU per worker) or cuda:N (every worker on "
                 "GPU N, each a simulated host of its own)")
      ->check([](const std::string& device) {
        return device == "cpu" || device == "cuda" ||
                       (absl::StartsWith(device, "cuda:") &&
                        ParseDevice(device).ok())
                   ? std::string()
                   : "expected cpu, cuda or cuda:N";
      })
      ->capture_default_str();
  up->add_option("--hosts", args->hosts,
                 "split the workers over this many simulated hosts, each "
                 "registering through its own cchostagent and a host of its "
                 "own to NCCL (ccworker --host-id); 0: none")
      ->capture_default_str();
  up->add_option("--wait", args->wait, "how long to wait for readiness")
      ->capture_default_str();
  up->callback([&, args] { exit_code = Up(globals, *args); });
  auto* down = cluster->add_subcommand("down", "stop the local cluster");
  down->callback([&] { exit_code = Down(globals); });
}

void AddCompletionCommand(CLI::App& app, int& exit_code) {
  auto shell = std::make_shared<std::string>("bash");
  auto* completion =
      app.add_subcommand("completion", "print a shell completion script");
  completion->add_option("shell", *shell)->check(CLI::IsMember({"bash"}));
  // The option writes into *shell when the command line is parsed, after
  // this function returns: the callback holds it alive until then.
  completion->callback([&app, &exit_code, shell] {
    std::string commands;
    for (const CLI::App* sub : app.get_subcommands({})) {
      commands += sub->get_name() + " ";
    }
    std::cout
        << "# " << *shell
        << " completion for ccctl: source <(ccctl completion bash)\n"
           "_ccctl() {\n"
           "  local cur=${COMP_WORDS[COMP_CWORD]}\n"
           "  if [[ $COMP_CWORD -eq 1 ]]; then\n"
           "    COMPREPLY=($(compgen -W \""
        << commands
        << "\" -- \"$cur\"))\n"
           "  elif [[ ${COMP_WORDS[1]} == tensor && $COMP_CWORD -eq 2 ]]; "
           "then\n"
           "    COMPREPLY=($(compgen -W \"alloc write read free ls\" -- "
           "\"$cur\"))\n"
           "  elif [[ ${COMP_WORDS[1]} == cluster && $COMP_CWORD -eq 2 ]]; "
           "then\n"
           "    COMPREPLY=($(compgen -W \"up down\" -- \"$cur\"))\n"
           "  else\n"
           "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
           "  fi\n"
           "}\n"
           "complete -F _ccctl ccctl\n";
    exit_code = kExitOk;
  });
}

}  // namespace ccl::ctl
