// ccctl console: the HTTP side (cpp-httplib, Debian's libcpp-httplib-dev)
// and the command. Reads answer from the cluster in this process, on one
// kept client that follows the world at each poll with a short deadline,
// so a page shows a re-forming or unreachable cluster as it is now; runs
// (bench, doctor, trace) are ccctl children (console_jobs.h).
#include "client/ccctl/console.h"

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "client/ccctl/commands.h"
#include "client/ccctl/console_jobs.h"
#include "client/ccctl/documents.h"
#include "common/credentials.h"
#include "common/secrets.h"

namespace ccl::ctl {

std::string_view ConsoleRoleName(ConsoleRole role) {
  switch (role) {
    case ConsoleRole::kViewer:
      return "viewer";
    case ConsoleRole::kOperator:
      return "operator";
    case ConsoleRole::kNone:
      break;
  }
  return "none";
}

ConsoleRole RoleOf(const ConsoleTokens& tokens,
                   absl::string_view authorization) {
  absl::string_view bearer;
  if (absl::ConsumePrefix(&authorization, "Bearer ")) bearer = authorization;
  if (!tokens.operator_.empty() && !bearer.empty() &&
      ConstantTimeEquals(bearer, tokens.operator_)) {
    return ConsoleRole::kOperator;
  }
  if (tokens.viewer.empty()) return ConsoleRole::kViewer;
  if (!bearer.empty() && ConstantTimeEquals(bearer, tokens.viewer)) {
    return ConsoleRole::kViewer;
  }
  return ConsoleRole::kNone;
}

absl::Status CheckConsoleSettings(const std::string& listen,
                                  const ConsoleTokens& tokens,
                                  const std::string& cluster_token) {
  if (!IsLoopbackAddress(listen) && tokens.viewer.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen ", listen,
        " is reachable from other machines: give the console a token of its "
        "own to view it with (--viewer-token-file FILE, or "
        "CCL_CONSOLE_TOKEN_FILE), or listen on 127.0.0.1 and reach it through "
        "an SSH tunnel or kubectl port-forward"));
  }
  if (!tokens.viewer.empty() && tokens.viewer == tokens.operator_) {
    return absl::InvalidArgumentError(
        "the viewer and operator tokens are the same secret: give each role "
        "its own (openssl rand -hex 32)");
  }
  if (!cluster_token.empty() &&
      (tokens.viewer == cluster_token || tokens.operator_ == cluster_token)) {
    return absl::InvalidArgumentError(
        "a console token is the cluster's own token: whoever can open the "
        "page would hold the key to every worker; give the console tokens of "
        "its own (openssl rand -hex 32)");
  }
  return absl::OkStatus();
}

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Reads the page polls every second: a cluster that does not answer within
// this is shown as such, not waited for.
constexpr char kPollTimeout[] = "5s";
constexpr auto kBenchLimit = std::chrono::minutes(10);
constexpr auto kDoctorLimit = std::chrono::minutes(10);
constexpr auto kTraceLimit = std::chrono::seconds(60);

const char* const kBenchOps[] = {"all_reduce", "all_gather", "reduce_scatter",
                                 "broadcast",  "reduce",     "alltoall",
                                 "gather",     "scatter",    "sendrecv"};

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
      return 409;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 502;  // the cluster's answer, passed on
  }
}

void Answer(httplib::Response& res, int status, const json& document) {
  res.status = status;
  res.set_content(document.dump(), "application/json");
}

// `where`: "console" for the console's own refusals (the page asks for a
// token), "cluster" for what the cluster answered.
void AnswerError(httplib::Response& res, const absl::Status& status,
                 const std::string& where = "cluster") {
  Answer(res, HttpStatus(status.code()),
         {{"error", std::string(status.message())},
          {"code", absl::StatusCodeToString(status.code())},
          {"where", where}});
}

// "32M", "1024", "1.5K"
bool IsSize(const std::string& text) {
  static const std::regex kSize("^[0-9]+(\\.[0-9]+)?[KMGkmg]?$");
  return text.size() <= 16 && std::regex_match(text, kSize);
}

bool IsName(const std::string& text) {
  static const std::regex kName("^[A-Za-z0-9_.-]{1,64}$");
  return std::regex_match(text, kName);
}

// A field of the request's JSON body as text, checked; the default when
// absent. Values go to ccctl as separate arguments, never through a shell,
// and each is checked so that none can be read as a flag.
absl::StatusOr<std::string> Field(const json& body, const std::string& key,
                                  const std::string& fallback,
                                  bool (*valid)(const std::string&),
                                  const char* expected) {
  if (!body.contains(key)) return fallback;
  const json& value = body.at(key);
  std::string text = value.is_string() ? value.get<std::string>()
                     : value.is_number_integer()
                         ? std::to_string(value.get<int64_t>())
                     : value.is_number() ? absl::StrCat(value.get<double>())
                                         : std::string("?");
  if (!valid(text)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", key, "' is '", text.substr(0, 40), "'; expected ", expected));
  }
  return text;
}

bool IsCount(const std::string& text) {
  int value = 0;
  return absl::SimpleAtoi(text, &value) && value >= 0 && value <= 100000;
}
bool IsFactor(const std::string& text) {
  double value = 0;
  return absl::SimpleAtod(text, &value) && value >= 1.1 && value <= 1024;
}
bool IsOpName(const std::string& text) {
  for (const char* op : kBenchOps) {
    if (text == op) return true;
  }
  return false;
}
bool IsRank(const std::string& text) {
  int value = 0;
  return absl::SimpleAtoi(text, &value) && value >= -1 && value < (1 << 20);
}

absl::StatusOr<std::vector<std::string>> BenchArgv(const json& body) {
  std::vector<std::string> argv = {"bench"};
  struct Spec {
    const char* key;
    const char* flag;
    const char* fallback;
    bool (*valid)(const std::string&);
    const char* expected;
  };
  static const Spec kSpecs[] = {
      {"op", nullptr, "all_reduce", IsOpName,
       "an op name as ccctl bench takes"},
      {"minbytes", "-b", "1K", IsSize, "a size such as 1K or 32M"},
      {"maxbytes", "-e", "16M", IsSize, "a size such as 1K or 32M"},
      {"stepfactor", "-f", "4", IsFactor, "a factor from 1.1 to 1024"},
      {"iters", "-n", "5", IsCount, "a count"},
      {"warmup", "-w", "2", IsCount, "a count"},
      {"datatype", "-d", "float32", IsName, "a dtype name such as float32"},
      {"redop", "--op", "sum", IsName, "a reduce op such as sum"},
      {"root", "-r", "-1", IsRank, "a rank, or -1 for the default"},
      {"check", "-c", "1", IsCount, "0 or 1"},
  };
  for (const Spec& spec : kSpecs) {
    auto value =
        Field(body, spec.key, spec.fallback, spec.valid, spec.expected);
    if (!value.ok()) return value.status();
    if (spec.flag != nullptr) argv.push_back(spec.flag);
    argv.push_back(*value);
  }
  argv.insert(argv.end(), {"--output", "json"});
  return argv;
}

absl::StatusOr<std::vector<std::string>> DoctorArgv(const json& body) {
  std::vector<std::string> argv = {"doctor"};
  auto size = Field(body, "size", "4M", IsSize, "a size such as 4M");
  if (!size.ok()) return size.status();
  auto iters = Field(body, "iters", "10", IsCount, "a count");
  if (!iters.ok()) return iters.status();
  argv.insert(argv.end(), {"--size", *size, "-n", *iters});
  if (body.value("bisect", false)) argv.push_back("--bisect");
  argv.insert(argv.end(), {"--output", "json"});
  return argv;
}

}  // namespace

struct ConsoleServer::Impl {
  Options options;
  httplib::Server http;
  std::unique_ptr<ConsoleJobs> jobs;
  std::thread thread;
  int port = 0;

  ConsoleRole Role(const httplib::Request& req) const {
    return RoleOf(options.tokens, req.get_header_value("Authorization"));
  }

  // Runs `handler` for a request of at least `need`; else 401 or 403 with
  // what to do.
  httplib::Server::Handler Guard(
      ConsoleRole need,
      std::function<void(const httplib::Request&, httplib::Response&)>
          handler) {
    return [this, need, handler = std::move(handler)](
               const httplib::Request& req, httplib::Response& res) {
      const ConsoleRole role = Role(req);
      if (role == ConsoleRole::kNone) {
        AnswerError(res,
                    absl::UnauthenticatedError(
                        "this console needs its viewer token: enter it on "
                        "the page (the file given to --viewer-token-file)"),
                    "console");
        res.status = 401;
        return;
      }
      if (need == ConsoleRole::kOperator && role != ConsoleRole::kOperator) {
        AnswerError(
            res,
            absl::PermissionDeniedError(
                options.tokens.operator_.empty()
                    ? "this console is read-only: start it with "
                      "--operator-token-file FILE to run benches and the "
                      "doctor from the page, then enter that token here"
                    : "running a bench or the doctor needs the operator "
                      "token: enter it on the page"),
            "console");
        res.status = 403;
        return;
      }
      handler(req, res);
    };
  }

  // One client for every read, kept while the cluster answers: a fresh one
  // per poll would wait up to its connect bound for a worker that is gone.
  // Reads take turns on it (client_mutex).
  std::mutex client_mutex;
  std::unique_ptr<ClusterClient> reader;

  // The reader, following the world as it is now and switched to `group`;
  // caller holds client_mutex.
  absl::StatusOr<ClusterClient*> Reader(const std::string& group) {
    if (reader != nullptr) {
      if (auto world = reader->RefreshWorld(); !world.ok()) {
        reader.reset();
        return world.status();
      }
    } else {
      Globals globals = options.globals;
      globals.timeout = kPollTimeout;
      auto client = Connect(globals);
      if (!client.ok()) return client.status();
      reader = *std::move(client);
    }
    if (reader->group() != group) {
      if (absl::Status s = reader->UseGroup(group); !s.ok()) return s;
    }
    return reader.get();
  }

  void Session(const httplib::Request& req, httplib::Response& res) {
    Answer(res, 200,
           {{"role", ConsoleRoleName(Role(req))},
            {"operator_enabled", !options.tokens.operator_.empty()},
            {"viewer_token_required", !options.tokens.viewer.empty()},
            {"coordinator", ResolveCoordinator(options.globals)}});
  }

  void World(const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(client_mutex);
    auto client = Reader("world");
    if (!client.ok()) return AnswerError(res, client.status());
    json document = WorldDocument(**client);
    document["coordinator"] = (*client)->options().coordinator;
    Answer(res, 200, document);
  }

  void Ops(const httplib::Request& req, httplib::Response& res) {
    const std::string group =
        req.has_param("group") ? req.get_param_value("group") : "world";
    int limit = 20;
    if (req.has_param("limit") &&
        (!absl::SimpleAtoi(req.get_param_value("limit"), &limit) || limit < 0 ||
         limit > 10000)) {
      return AnswerError(res, absl::InvalidArgumentError(
                                  "limit must be a count from 0 to 10000"));
    }
    if (!IsName(group)) {
      return AnswerError(res, absl::InvalidArgumentError("bad group name"));
    }
    std::lock_guard<std::mutex> lock(client_mutex);
    auto client = Reader(group);
    if (!client.ok()) return AnswerError(res, client.status());
    Answer(res, 200, OpsDocument(**client, limit));
  }

  void Trace(const httplib::Request& req, httplib::Response& res) {
    std::vector<std::string> argv = {"debug", "trace", "--out", "-"};
    const std::string limit =
        req.has_param("limit") ? req.get_param_value("limit") : "200";
    if (!IsCount(limit)) {
      return AnswerError(res, absl::InvalidArgumentError(
                                  "limit must be a count from 0 to 100000"));
    }
    argv.insert(argv.end(), {"-n", limit});
    if (req.has_param("groups") && !req.get_param_value("groups").empty()) {
      const std::string groups = req.get_param_value("groups");
      static const std::regex kGroups("^[A-Za-z0-9_.,-]{1,1000}$");
      if (!std::regex_match(groups, kGroups)) {
        return AnswerError(res, absl::InvalidArgumentError("bad group names"));
      }
      argv.insert(argv.end(), {"--groups", groups});
    }
    auto trace = jobs->RunNow(argv, kTraceLimit);
    if (!trace.ok()) return AnswerError(res, trace.status());
    Answer(res, 200, *trace);
  }

  void StartJob(const std::string& kind, const httplib::Request& req,
                httplib::Response& res) {
    json body = json::object();
    if (!req.body.empty()) {
      try {
        body = json::parse(req.body);
      } catch (const json::exception&) {
        return AnswerError(
            res, absl::InvalidArgumentError("the request body is not JSON"));
      }
      if (!body.is_object()) {
        return AnswerError(res, absl::InvalidArgumentError(
                                    "the request body is not a JSON object"));
      }
    }
    auto argv = kind == "bench" ? BenchArgv(body) : DoctorArgv(body);
    if (!argv.ok()) return AnswerError(res, argv.status());
    auto id =
        jobs->Start(kind, *argv,
                    kind == "bench" ? std::chrono::milliseconds(kBenchLimit)
                                    : std::chrono::milliseconds(kDoctorLimit));
    if (!id.ok()) return AnswerError(res, id.status(), "console");
    Answer(res, 202, {{"id", *id}, {"kind", kind}, {"args", *argv}});
  }

  void Job(const httplib::Request& req, httplib::Response& res) {
    int64_t id = 0;
    if (!absl::SimpleAtoi(req.matches[1].str(), &id)) {
      return AnswerError(res, absl::InvalidArgumentError("bad job id"));
    }
    auto job = jobs->Get(id);
    if (!job.ok()) return AnswerError(res, job.status(), "console");
    Answer(res, 200, *job);
  }

  void Routes() {
    for (const ConsoleAsset* asset = kConsoleAssets; asset->path != nullptr;
         ++asset) {
      http.Get(asset->path,
               [asset](const httplib::Request&, httplib::Response& res) {
                 res.set_header("Cache-Control", "no-cache");
                 res.set_content(reinterpret_cast<const char*>(asset->data),
                                 asset->size, asset->content_type);
               });
    }
    const auto viewer = ConsoleRole::kViewer;
    const auto op = ConsoleRole::kOperator;
    auto bind = [this](void (Impl::*method)(const httplib::Request&,
                                            httplib::Response&)) {
      return
          [this, method](const httplib::Request& req, httplib::Response& res) {
            (this->*method)(req, res);
          };
    };
    http.Get("/api/session", bind(&Impl::Session));
    http.Get("/api/world", Guard(viewer, bind(&Impl::World)));
    http.Get("/api/ops", Guard(viewer, bind(&Impl::Ops)));
    http.Get("/api/trace", Guard(viewer, bind(&Impl::Trace)));
    http.Get("/api/jobs", Guard(viewer, [this](const httplib::Request&,
                                               httplib::Response& res) {
               Answer(res, 200, {{"jobs", jobs->List()}});
             }));
    http.Get(R"(/api/jobs/(\d+))", Guard(viewer, bind(&Impl::Job)));
    http.Post("/api/bench", Guard(op, [this](const httplib::Request& req,
                                             httplib::Response& res) {
                StartJob("bench", req, res);
              }));
    http.Post("/api/doctor", Guard(op, [this](const httplib::Request& req,
                                              httplib::Response& res) {
                StartJob("doctor", req, res);
              }));
    // Every answer: no framing by other sites, scripts and styles from the
    // console alone (the pages fetch nothing from the internet).
    http.set_post_routing_handler(
        [](const httplib::Request&, httplib::Response& res) {
          res.set_header("X-Frame-Options", "DENY");
          res.set_header("X-Content-Type-Options", "nosniff");
          res.set_header("Content-Security-Policy",
                         "default-src 'self'; img-src 'self' data:; "
                         "style-src 'self'");
        });
    http.set_error_handler([](const httplib::Request& req,
                              httplib::Response& res) {
      if (!res.body.empty()) return;
      const int status = res.status;
      AnswerError(res,
                  absl::NotFoundError(absl::StrCat(
                      "no such page or endpoint: ", req.method, " ", req.path,
                      " (the endpoints are listed in docs/console.md)")),
                  "console");
      res.status = status;
    });
    http.set_payload_max_length(64 * 1024);
  }
};

absl::StatusOr<std::unique_ptr<ConsoleServer>> ConsoleServer::Start(
    Options options) {
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->jobs = std::make_unique<ConsoleJobs>(impl->options.ccctl_path,
                                             impl->options.child_globals);
  impl->Routes();
  const std::string& host = impl->options.host;
  if (impl->options.port == 0) {
    impl->port = impl->http.bind_to_any_port(host);
  } else if (impl->http.bind_to_port(host, impl->options.port)) {
    impl->port = impl->options.port;
  } else {
    impl->port = -1;
  }
  if (impl->port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", impl->options.port,
                     " (in use, or not an address of this machine)"));
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->http.listen_after_bind(); });
  return std::unique_ptr<ConsoleServer>(new ConsoleServer(std::move(impl)));
}

ConsoleServer::ConsoleServer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

ConsoleServer::~ConsoleServer() { Stop(); }

int ConsoleServer::port() const { return impl_->port; }

void ConsoleServer::Stop() {
  if (!impl_->thread.joinable()) return;
  impl_->http.stop();
  impl_->thread.join();
  impl_->jobs.reset();
}

namespace {

struct ConsoleArgs {
  std::string listen = "127.0.0.1:29480";
  std::string viewer_token_file, operator_token_file, port_file;
};

// The flags a ccctl child needs to reach the same cluster the same way.
std::vector<std::string> ChildGlobals(const Globals& globals) {
  std::vector<std::string> argv = {"--coordinator", ResolveCoordinator(globals),
                                   "--timeout", globals.timeout};
  const SecurityOptions& o = globals.security.options;
  const std::pair<const char*, const std::string*> flags[] = {
      {"--tls-cert", &o.tls_cert},
      {"--tls-key", &o.tls_key},
      {"--tls-ca", &o.tls_ca},
      {"--tls-server-name", &o.tls_server_name},
      {"--token-file", &globals.security.token_files.full}};
  for (const auto& [flag, value] : flags) {
    if (!value->empty()) argv.insert(argv.end(), {flag, *value});
  }
  return argv;
}

int RunConsole(Globals& globals, const ConsoleArgs& args) {
  ConsoleServer::Options options;
  const auto colon = args.listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(args.listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
                    "--listen '", args.listen, "': expected HOST:PORT")),
                true);
  }
  options.host = args.listen.substr(0, colon);
  if (options.host.size() > 2 && options.host.front() == '[') {
    options.host = options.host.substr(1, options.host.size() - 2);
  }
  options.port = port;
  auto viewer = ResolveSecret(args.viewer_token_file, "CCL_CONSOLE_TOKEN");
  if (!viewer.ok()) return Fail(viewer.status(), true);
  auto operator_token =
      ResolveSecret(args.operator_token_file, "CCL_CONSOLE_OPERATOR_TOKEN");
  if (!operator_token.ok()) return Fail(operator_token.status(), true);
  options.tokens = {*viewer, *operator_token};
  auto security = ResolveSecurity(globals);
  if (!security.ok()) return Fail(security.status(), true);
  if (absl::Status s = CheckConsoleSettings(args.listen, options.tokens,
                                            security->tokens.full);
      !s.ok()) {
    return Fail(s, true);
  }
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  options.ccctl_path = error ? "ccctl" : self.string();
  options.globals = globals;
  options.child_globals = ChildGlobals(globals);

  // SIGINT and SIGTERM end the console through sigwait below, on this
  // thread; blocked before any thread starts, so every thread inherits it.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  auto server = ConsoleServer::Start(options);
  if (!server.ok()) return Fail(server.status());
  const std::string url =
      absl::StrCat("http://",
                   options.host.find(':') != std::string::npos
                       ? absl::StrCat("[", options.host, "]")
                       : options.host,
                   ":", (*server)->port(), "/");
  std::cout << "ccctl console on " << url << " for the cluster at "
            << ResolveCoordinator(globals) << " ("
            << (options.tokens.operator_.empty()
                    ? "read-only: --operator-token-file lets the page run "
                      "benches and the doctor"
                    : "benches and the doctor with the operator token")
            << "); Ctrl-C ends it" << std::endl;
  if (!args.port_file.empty()) {
    const std::string partial = args.port_file + ".partial";
    std::ofstream(partial) << (*server)->port() << "\n";
    std::filesystem::rename(partial, args.port_file, error);
  }
  int signal = 0;
  sigwait(&stop_signals, &signal);
  (*server)->Stop();
  return kExitOk;
}

}  // namespace

void AddConsoleCommand(CLI::App& app, Globals& globals, int& exit_code) {
  auto args = std::make_shared<ConsoleArgs>();
  auto* console = app.add_subcommand(
      "console",
      "serve a web console on the cluster: world, ops, timeline, bench, "
      "doctor (docs/console.md)");
  console
      ->add_option("--listen", args->listen,
                   "HOST:PORT to serve on (port 0: any free port)")
      ->capture_default_str();
  console->add_option("--viewer-token-file", args->viewer_token_file,
                      "file with the token a browser must give to view; "
                      "required off loopback (env CCL_CONSOLE_TOKEN_FILE or "
                      "CCL_CONSOLE_TOKEN)");
  console->add_option("--operator-token-file", args->operator_token_file,
                      "file with the token that lets a browser run benches "
                      "and the doctor; without it the console is read-only "
                      "(env CCL_CONSOLE_OPERATOR_TOKEN_FILE or "
                      "CCL_CONSOLE_OPERATOR_TOKEN)");
  console->add_option("--port-file", args->port_file,
                      "write the port served on to FILE once listening");
  console->callback([&, args] { exit_code = RunConsole(globals, *args); });
}

}  // namespace ccl::ctl
