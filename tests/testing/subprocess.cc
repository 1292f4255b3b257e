#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

#ifndef CCL_TEST_BINARIES
#define CCL_TEST_BINARIES ""
#endif

extern char** environ;

namespace ccl::testing {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(10);

std::string ErrnoText(const std::string& what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

}  // namespace

absl::StatusOr<std::string> BinaryPath(const std::string& name) {
  std::string env_name = "CCL_BINARY_";
  for (char c : name) {
    env_name += std::isalnum(static_cast<unsigned char>(c))
                    ? static_cast<char>(std::toupper(c))
                    : '_';
  }
  if (const char* path = std::getenv(env_name.c_str()); path && *path) {
    return std::string(path);
  }
  for (absl::string_view entry :
       absl::StrSplit(CCL_TEST_BINARIES, '|', absl::SkipEmpty())) {
    std::pair<std::string, std::string> kv =
        absl::StrSplit(entry, absl::MaxSplits('=', 1));
    if (kv.first == name) return kv.second;
  }
  return absl::NotFoundError(
      absl::StrCat("no built binary named '", name,
                   "'; add its target to CCL_TEST_BINARY_TARGETS in "
                   "tests/testing/testing.cmake or set $",
                   env_name));
}

std::string ExitStatus::ToString() const {
  return exited ? absl::StrCat("exit code ", code)
                : absl::StrCat("killed by signal ", signal, " (",
                               strsignal(signal), ")");
}

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(
    const std::string& binary, const std::vector<std::string>& args,
    Options options) {
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::NotFoundError(ErrnoText(absl::StrCat("cannot run ", binary)));
  }
  std::unique_ptr<Subprocess> p(new Subprocess());
  p->name_ = options.name.empty()
                 ? std::filesystem::path(binary).filename().string()
                 : options.name;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat((tmp && *tmp) ? tmp : "/tmp", "/ccl-", p->name_, "-XXXXXX");
  std::vector<char> dir(pattern.begin(), pattern.end());
  dir.push_back('\0');
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::InternalError(ErrnoText("mkdtemp " + pattern));
  }
  p->dir_ = dir.data();
  p->log_path_ = p->dir_ + "/" + p->name_ + ".log";
  p->port_file_ = p->dir_ + "/port";

  // Everything the child needs is built before fork: between fork and exec
  // only async-signal-safe calls are allowed in a threaded process.
  std::vector<std::string> argv_strings{binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  if (!options.port_file_flag.empty()) {
    argv_strings.push_back(options.port_file_flag);
    argv_strings.push_back(p->port_file_);
  }
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.insert(env_strings.end(), options.env.begin(), options.env.end());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  int log_fd = open(p->log_path_.c_str(),
                    O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) return absl::InternalError(ErrnoText("open " + p->log_path_));
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    return absl::InternalError(ErrnoText("fork"));
  }
  if (pid == 0) {
    // If the test process dies (a ctest timeout kills it), so does the child.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    // The test may have blocked signals; the child must see SIGTERM.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Whatever the test runner was started with (a shell's `trap '' PIPE`
    // is inherited across exec), each daemon starts from the default
    // disposition, so a test sees what the daemon itself sets up.
    signal(SIGPIPE, SIG_DFL);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(log_fd);
  p->pid_ = pid;
  return p;
}

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    Reap(0);
  }
  bool failed =
      ::testing::UnitTest::GetInstance()->current_test_info() != nullptr &&
      ::testing::Test::HasFailure();
  if (failed) {
    std::cerr << "[subprocess] keeping " << dir_ << " (test failed)\n";
  } else if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

bool Subprocess::Reap(int options) {
  if (reaped_) return true;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, options);
  } while (r < 0 && errno == EINTR);
  if (r != pid_) return false;
  reaped_ = true;
  if (WIFEXITED(status)) {
    exit_status_ = ExitStatus{true, WEXITSTATUS(status), 0};
  } else if (WIFSIGNALED(status)) {
    exit_status_ = ExitStatus{false, 0, WTERMSIG(status)};
  }
  return true;
}

bool Subprocess::running() { return !Reap(WNOHANG); }

absl::StatusOr<int> Subprocess::WaitForPort(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream in(port_file_);
    int port = 0;
    if (in >> port && port > 0) {
      port_ = port;
      return port;
    }
    if (!running()) {
      return absl::FailedPreconditionError(absl::StrCat(
          name_, " exited (", exit_status_.ToString(),
          ") before writing its port file; log ", log_path_, ":\n", ReadLog()));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, " wrote no port file within ", timeout.count(),
                       " ms; log ", log_path_, ":\n", ReadLog()));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

std::string Subprocess::loopback_address() const {
  return absl::StrCat("127.0.0.1:", port_);
}

absl::Status Subprocess::Signal(int signal) {
  if (reaped_) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, " already exited (", exit_status_.ToString(), ")"));
  }
  if (kill(pid_, signal) != 0) return absl::InternalError(ErrnoText("kill"));
  return absl::OkStatus();
}

absl::StatusOr<ExitStatus> Subprocess::WaitForExit(
    std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!Reap(WNOHANG)) {
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, " still running after ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  return exit_status_;
}

std::string Subprocess::ReadLog() const {
  std::ifstream in(log_path_);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

void Subprocess::DumpLogOnFailure() const {
  if (!::testing::Test::HasFailure()) return;
  std::cerr << "----- " << name_ << " log (" << log_path_ << ") -----\n"
            << ReadLog() << "----- end of " << name_ << " log -----\n";
}

}  // namespace ccl::testing
