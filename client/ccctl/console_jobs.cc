#include "client/ccctl/console_jobs.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

extern char** environ;

namespace ccl::ctl {
namespace {

using Clock = std::chrono::steady_clock;

// Jobs kept for the page to read back; older ones are dropped.
constexpr size_t kKeptJobs = 32;
// Progress lines kept per job (the doctor prints one per round).
constexpr size_t kKeptProgress = 200;

struct Pipe {
  int read = -1, write = -1;
  ~Pipe() {
    if (read >= 0) close(read);
    if (write >= 0) close(write);
  }
};

absl::Status MakePipe(Pipe& pipe) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  pipe.read = fds[0];
  pipe.write = fds[1];
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ChildResult> RunChild(
    const std::vector<std::string>& argv, std::chrono::milliseconds limit,
    const std::function<void(const std::string&)>& on_stderr,
    const std::function<void(pid_t)>& on_start) {
  Pipe out, err;
  if (absl::Status s = MakePipe(out); !s.ok()) return s;
  if (absl::Status s = MakePipe(err); !s.ok()) return s;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out.write, 1);
  posix_spawn_file_actions_adddup2(&actions, err.write, 2);
  std::vector<char*> args;
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = 0;
  const int spawned =
      posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    return absl::InternalError(
        absl::StrCat("cannot start ", argv[0], ": ", std::strerror(spawned)));
  }
  if (on_start) on_start(pid);
  close(out.write);
  close(err.write);
  out.write = err.write = -1;

  ChildResult result;
  std::string err_line;  // stderr not yet ended by a newline
  const Clock::time_point deadline = Clock::now() + limit;
  pollfd fds[2] = {{out.read, POLLIN, 0}, {err.read, POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    const int ready =
        poll(fds, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[65536];
      const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      if (i == 0) {
        result.out.append(buffer, n);
        continue;
      }
      result.err.append(buffer, n);
      err_line.append(buffer, n);
      size_t newline;
      while ((newline = err_line.find('\n')) != std::string::npos) {
        if (on_stderr) on_stderr(err_line.substr(0, newline));
        err_line.erase(0, newline + 1);
      }
    }
  }
  if (!err_line.empty() && on_stderr) on_stderr(err_line);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string ChildError(const ChildResult& result) {
  if (result.timed_out) {
    return "DEADLINE_EXCEEDED: the run passed its limit and was stopped";
  }
  // ccctl's own error lines ("ccctl: CODE: message"), last first.
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(result.err, '\n')) {
    if (absl::ConsumePrefix(&line, "ccctl: ")) lines.emplace_back(line);
  }
  if (!lines.empty()) return absl::StrJoin(lines, "\n");
  if (result.exit_code < 0) return "CANCELLED: the run was stopped";
  const std::string tail = result.err.size() > 2000
                               ? result.err.substr(result.err.size() - 2000)
                               : result.err;
  return absl::StrCat("ccctl exited with status ", result.exit_code,
                      tail.empty() ? "" : ": ", tail);
}

ConsoleJobs::ConsoleJobs(std::string ccctl, std::vector<std::string> globals)
    : ccctl_(std::move(ccctl)), globals_(std::move(globals)) {}

ConsoleJobs::~ConsoleJobs() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& [id, job] : jobs_) {
      if (job.state == "running" && job.pid > 0) kill(job.pid, SIGKILL);
    }
  }
  if (runner_.joinable()) runner_.join();
}

std::vector<std::string> ConsoleJobs::Argv(
    const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {ccctl_};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), globals_.begin(), globals_.end());
  return argv;
}

absl::StatusOr<int64_t> ConsoleJobs::Start(const std::string& kind,
                                           const std::vector<std::string>& args,
                                           std::chrono::milliseconds limit) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return absl::CancelledError("the console is stopping");
  for (const auto& [id, job] : jobs_) {
    if (job.state != "running") continue;
    return absl::FailedPreconditionError(absl::StrCat(
        "a ", job.kind, " (job ", id, ") is running since ",
        std::chrono::duration_cast<std::chrono::seconds>(Clock::now() -
                                                         job.started)
            .count(),
        " s; one run at a time, so that two runs do not measure each "
        "other: wait for it to end"));
  }
  if (runner_.joinable()) runner_.join();  // the previous job, ended
  const int64_t id = next_id_++;
  Job& job = jobs_[id];
  job.id = id;
  job.kind = kind;
  job.args = args;
  job.started = Clock::now();
  while (jobs_.size() > kKeptJobs) jobs_.erase(jobs_.begin());
  runner_ = std::thread(&ConsoleJobs::Run, this, id, Argv(args), limit);
  return id;
}

void ConsoleJobs::Run(int64_t id, std::vector<std::string> argv,
                      std::chrono::milliseconds limit) {
  auto result = RunChild(
      argv, limit,
      [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(mutex_);
        auto& progress = jobs_[id].progress;
        if (progress.size() < kKeptProgress) progress.push_back(line);
      },
      [&](pid_t pid) {
        std::lock_guard<std::mutex> lock(mutex_);
        jobs_[id].pid = pid;
        if (stopping_) kill(pid, SIGKILL);
      });
  std::lock_guard<std::mutex> lock(mutex_);
  Job& job = jobs_[id];
  job.ended = Clock::now();
  job.pid = 0;
  if (!result.ok()) {
    job.state = "failed";
    job.error = std::string(result.status().message());
    return;
  }
  job.exit_code = result->exit_code;
  // The doctor exits 3 when it found something: it ran, and its document
  // says what it found.
  const bool ran = result->exit_code == 0 ||
                   (job.kind == "doctor" && result->exit_code == 3);
  if (ran) {
    try {
      job.result = nlohmann::json::parse(result->out);
      job.state = "done";
      return;
    } catch (const nlohmann::json::exception& e) {
      job.error = absl::StrCat("ccctl printed no JSON document: ", e.what());
    }
  } else {
    job.error = ChildError(*result);
  }
  job.state = "failed";
}

absl::StatusOr<nlohmann::json> ConsoleJobs::Get(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "no job ", id, " (the console keeps the last ", kKeptJobs, ")"));
  }
  const Job& job = it->second;
  const Clock::time_point end =
      job.state == "running" ? Clock::now() : job.ended;
  nlohmann::json document = {
      {"id", job.id},
      {"kind", job.kind},
      {"args", job.args},
      {"state", job.state},
      {"elapsed_s", std::chrono::duration<double>(end - job.started).count()},
      {"progress", job.progress},
      {"exit_code", job.exit_code}};
  if (job.state == "done") document["result"] = job.result;
  if (!job.error.empty()) document["error"] = job.error;
  return document;
}

nlohmann::json ConsoleJobs::List() {
  std::lock_guard<std::mutex> lock(mutex_);
  nlohmann::json list = nlohmann::json::array();
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    list.push_back({{"id", it->second.id},
                    {"kind", it->second.kind},
                    {"state", it->second.state}});
  }
  return list;
}

absl::StatusOr<nlohmann::json> ConsoleJobs::RunNow(
    const std::vector<std::string>& args, std::chrono::milliseconds limit) {
  auto result = RunChild(Argv(args), limit);
  if (!result.ok()) return result.status();
  if (result->exit_code != 0) {
    return absl::UnavailableError(ChildError(*result));
  }
  try {
    return nlohmann::json::parse(result->out);
  } catch (const nlohmann::json::exception& e) {
    return absl::InternalError(
        absl::StrCat("ccctl printed no JSON document: ", e.what()));
  }
}

}  // namespace ccl::ctl
