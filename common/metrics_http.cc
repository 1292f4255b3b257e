#include "common/metrics_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ccl {
namespace {

// A scraper sends a short request; a slow or idle client must not hold the
// only serving thread.
constexpr int kClientTimeoutMs = 2000;
constexpr size_t kMaxRequestBytes = 8192;

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const char* type,
                     const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason,
                      "\r\nContent-Type: ", type,
                      "\r\nContent-Length: ", body.size(),
                      "\r\nConnection: close\r\n\r\n", body);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, MetricsRegistry* registry) {
  if (port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("bad metrics port ", port));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string bare =
      host.size() > 2 && host.front() == '[' && host.back() == ']'
          ? host.substr(1, host.size() - 2)
          : host;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(bare.empty() ? nullptr : bare.c_str(),
                           service.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address ", host, ": ", gai_strerror(rc)));
  }
  int fd = -1;
  std::string error = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 16) == 0) {
      break;
    }
    error = std::strerror(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", host, ":", port, ": ", error));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<MetricsHttpServer>(
      new MetricsHttpServer(fd, bound_port, registry));
}

MetricsHttpServer::MetricsHttpServer(int fd, int port,
                                     MetricsRegistry* registry)
    : fd_(fd), port_(port), registry_(registry) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  close(fd_);
}

void MetricsHttpServer::Serve() {
  while (!stopping_) {
    // A short poll so that Stop never waits long for the thread.
    pollfd waiting{fd_, POLLIN, 0};
    if (poll(&waiting, 1, 200) <= 0) continue;
    int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    Handle(client);
    close(client);
  }
}

void MetricsHttpServer::Handle(int client) {
  std::string request;
  char buffer[1024];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.size() < kMaxRequestBytes) {
    pollfd readable{client, POLLIN, 0};
    if (poll(&readable, 1, kClientTimeoutMs) <= 0) return;
    ssize_t n = recv(client, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    request.append(buffer, static_cast<size_t>(n));
  }
  const size_t line_end = request.find("\r\n");
  const std::string line = request.substr(0, line_end);
  if (!absl::StartsWith(line, "GET ") && !absl::StartsWith(line, "HEAD ")) {
    SendAll(client, Response(405, "Method Not Allowed", "text/plain",
                             "only GET /metrics\n"));
    return;
  }
  const size_t path_start = line.find(' ') + 1;
  const std::string path =
      line.substr(path_start, line.find(' ', path_start) - path_start);
  if (path != "/metrics" && !absl::StartsWith(path, "/metrics?")) {
    SendAll(client, Response(404, "Not Found", "text/plain", "see /metrics\n"));
    return;
  }
  std::string body = registry_->Render();
  if (absl::StartsWith(line, "HEAD ")) {
    std::string head =
        Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
    SendAll(client, head.substr(0, head.size() - body.size()));
    return;
  }
  SendAll(client, Response(200, "OK",
                           "text/plain; version=0.0.4; charset=utf-8", body));
}

}  // namespace ccl
