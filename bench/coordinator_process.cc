#include "bench/coordinator_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace ccl::bench {
namespace fs = std::filesystem;

std::string DefaultCoordinatorBinary() {
  std::error_code error;
  const fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    const fs::path candidate =
        self.parent_path().parent_path() / "coordinator" / "cccoord";
    if (fs::exists(candidate)) return candidate.string();
  }
  return "cccoord";
}

void RaiseFileLimit() {
  rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

absl::StatusOr<std::unique_ptr<CoordinatorProcess>> CoordinatorProcess::Start(
    const std::string& binary, const std::vector<std::string>& args,
    const std::string& log_path) {
  std::string dir_template =
      (fs::temp_directory_path() / "ccl_bench.XXXXXX").string();
  if (mkdtemp(dir_template.data()) == nullptr) {
    return absl::InternalError("cannot make a temporary directory");
  }
  std::unique_ptr<CoordinatorProcess> process(new CoordinatorProcess());
  process->dir_ = dir_template;
  const std::string port_file = process->dir_ + "/port";
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  for (const char* arg : {"--listen", "127.0.0.1:0", "--port-file"}) {
    argv.push_back(arg);
  }
  argv.push_back(port_file);

  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      close(fd);
    }
    std::vector<char*> raw;
    for (auto& arg : argv) raw.push_back(arg.data());
    raw.push_back(nullptr);
    execvp(raw[0], raw.data());
    _exit(127);
  }
  process->pid_ = pid;

  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      process->pid_ = -1;
      return absl::UnavailableError(
          absl::StrCat(binary, " exited before serving; see ", log_path));
    }
    std::ifstream in(port_file);
    int port = 0;
    if (in >> port && port > 0) {
      process->port_ = port;
      return process;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError(
      absl::StrCat(binary, " did not serve within 30 s; see ", log_path));
}

CoordinatorProcess::~CoordinatorProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(5);
    bool reaped = false;
    while (!reaped && std::chrono::steady_clock::now() < deadline) {
      reaped = waitpid(pid_, nullptr, WNOHANG) == pid_;
      if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!reaped) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
}

std::string CoordinatorProcess::address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

absl::StatusOr<ProcessSample> CoordinatorProcess::Sample() const {
  ProcessSample sample;
  std::ifstream stat_file(absl::StrCat("/proc/", pid_, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), {});
  // The command name (field 2) may hold spaces; fields count from after it.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("no /proc/", pid_, "/stat"));
  }
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ', absl::SkipEmpty());
  // utime and stime are fields 14 and 15 of the whole line.
  int64_t utime = 0;
  int64_t stime = 0;
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return absl::InternalError(
        absl::StrCat("cannot parse /proc/", pid_, "/stat"));
  }
  sample.cpu_s = static_cast<double>(utime + stime) /
                 static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream status(absl::StrCat("/proc/", pid_, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream words(line);
    std::string key;
    int64_t kb = 0;
    words >> key >> kb;
    if (key == "VmRSS:") sample.rss_kb = kb;
    if (key == "VmHWM:") sample.peak_kb = kb;
  }
  return sample;
}

}  // namespace ccl::bench
