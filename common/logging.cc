#include "common/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>

#include "absl/strings/str_cat.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace ccl {
namespace {

std::atomic<int> log_rank{-1};
std::atomic<int64_t> log_generation{-1};
thread_local std::string op_group;
thread_local int64_t op_seq = -1;

void AppendJsonString(std::string& out, const std::string& text) {
  out += '"';
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
          out += escaped;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// RFC 3339 UTC with microseconds: what Loki, Fluent Bit and jq all parse.
std::string Rfc3339(int64_t unix_micros) {
  const time_t seconds = static_cast<time_t>(unix_micros / 1000000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[80];
  std::snprintf(buffer, sizeof(buffer), "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ",
                utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                utc.tm_min, utc.tm_sec,
                static_cast<long long>(unix_micros % 1000000));
  return buffer;
}

class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string process) : process_(std::move(process)) {}

  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    const int64_t micros =
        std::chrono::duration_cast<std::chrono::microseconds>(
            msg.time.time_since_epoch())
            .count();
    const auto level = spdlog::level::to_string_view(msg.level);
    std::string line = FormatJsonLogLine(
        micros, std::string(level.data(), level.size()), process_,
        std::string(msg.payload.data(), msg.payload.size()));
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(process_);
  }

 private:
  std::string process_;
};

}  // namespace

std::string FormatJsonLogLine(int64_t unix_micros, const std::string& level,
                              const std::string& process,
                              const std::string& message) {
  std::string out = "{\"ts\":";
  AppendJsonString(out, Rfc3339(unix_micros));
  out += ",\"level\":";
  AppendJsonString(out, level);
  out += ",\"process\":";
  AppendJsonString(out, process);
  out += absl::StrCat(",\"pid\":", getpid());
  if (const int rank = log_rank.load(); rank >= 0) {
    out += absl::StrCat(",\"rank\":", rank);
  }
  if (const int64_t generation = log_generation.load(); generation >= 0) {
    out += absl::StrCat(",\"generation\":", generation);
  }
  if (!op_group.empty()) {
    out += ",\"group\":";
    AppendJsonString(out, op_group);
  }
  if (op_seq >= 0) out += absl::StrCat(",\"seq\":", op_seq);
  out += ",\"msg\":";
  AppendJsonString(out, message);
  out += "}";
  return out;
}

absl::Status SetupLogging(const std::string& level, const std::string& format,
                          const std::string& process) {
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  // from_str maps anything unknown to off; only "off" itself means off.
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--log-level '", level,
        "': use trace, debug, info, warn, error, critical or off"));
  }
  if (format != "text" && format != "json") {
    return absl::InvalidArgumentError(
        absl::StrCat("--log-format '", format, "': use text or json"));
  }
  // Logs go to stderr: stdout carries the lines scripts read ("listening
  // on", "ready"), and containers collect both.
  auto logger = spdlog::get(process);
  if (!logger) logger = spdlog::stderr_color_mt(process);
  if (format == "json") {
    logger->set_formatter(std::make_unique<JsonFormatter>(process));
  } else {
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v");
  }
  logger->set_level(parsed);
  spdlog::set_default_logger(logger);
  return absl::OkStatus();
}

void SetLogRank(int rank, int64_t generation) {
  log_rank = rank;
  log_generation = generation;
}

ScopedLogOp::ScopedLogOp(std::string group, int64_t seq)
    : saved_group_(std::move(op_group)), saved_seq_(op_seq) {
  op_group = std::move(group);
  op_seq = seq;
}

ScopedLogOp::~ScopedLogOp() {
  op_group = std::move(saved_group_);
  op_seq = saved_seq_;
}

}  // namespace ccl
