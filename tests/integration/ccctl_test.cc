// Runs the real ccctl binary against a real local cluster: every subcommand,
// table and JSON output, exit codes, and every example in examples/.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/local_cluster.h"

namespace ccl {
namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Names of ccctl's temporaries ("ccctl.*") that `tensor ls -o json` lists,
// as "rank:name".
std::vector<std::string> Temporaries(const std::string& ls_json) {
  std::vector<std::string> found;
  for (const auto& rank : nlohmann::json::parse(ls_json)) {
    if (!rank.contains("tensors")) continue;
    for (const auto& tensor : rank["tensors"]) {
      const std::string name = tensor["spec"]["name"].get<std::string>();
      if (name.rfind("ccctl.", 0) == 0) {
        found.push_back(absl::StrCat(rank["rank"].get<int>(), ":", name));
      }
    }
  }
  return found;
}

// How many times `needle` occurs in `text`.
int CountOf(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

class CcctlTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::LocalClusterOptions options;
    options.workers = 4;
    options.worker_args = {"--op-timeout-ms", "10000", "--seq-gap-timeout-ms",
                           "5000"};
    auto cluster = testing::LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
    dir_ = fs::temp_directory_path() / absl::StrCat("ccctl_test.", getpid());
    fs::create_directories(dir_);
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    fs::remove_all(dir_);
  }

  // Runs ccctl with `args` against the cluster (or `coordinator`), `env`
  // ("NAME=value ...") in its environment.
  Result Ccctl(const std::string& args, const std::string& coordinator = "",
               const std::string& env = "") {
    auto binary = testing::BinaryPath("ccctl");
    EXPECT_TRUE(binary.ok()) << binary.status();
    const std::string out = (dir_ / "out").string(),
                      err = (dir_ / "err").string();
    const std::string command = absl::StrCat(
        "CCCTL_STATE_DIR=", (dir_ / "state").string(), " ", env, " ", *binary,
        " --coordinator ",
        coordinator.empty() ? cluster_->coordinator_address() : coordinator,
        " ", args, " >", out, " 2>", err, " </dev/null");
    const int status = std::system(command.c_str());
    Result result;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = Slurp(out);
    result.err = Slurp(err);
    return result;
  }

  void TearDown() override {
    if (HasFailure()) cluster_->DumpLogsOnFailure();
  }

  static testing::LocalCluster* cluster_;
  static fs::path dir_;
};

testing::LocalCluster* CcctlTest::cluster_ = nullptr;
fs::path CcctlTest::dir_;

TEST_F(CcctlTest, StatusTableAndJson) {
  Result table = Ccctl("status");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("world size:  4 (complete)"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("gloo"), std::string::npos);
  Result json = Ccctl("status -o json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto document = nlohmann::json::parse(json.out);
  EXPECT_EQ(document["world_size"], 4);
  EXPECT_EQ(document["members"].size(), 4u);
  EXPECT_EQ(document["workers"].size(), 4u);
}

TEST_F(CcctlTest, HelloWorldAllReducePrintsTenOnEveryRank) {
  Result table = Ccctl("allreduce --op sum");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  std::istringstream lines(table.out);
  std::string line;
  int rows = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("RANK", 0) == 0) continue;
    EXPECT_NE(line.find("[10.0]"), std::string::npos) << line;
    ++rows;
  }
  EXPECT_EQ(rows, 4);
  Result json = Ccctl("allreduce --op max -o json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  for (const auto& entry : nlohmann::json::parse(json.out)) {
    EXPECT_EQ(entry["values"][0], 4.0);
    EXPECT_TRUE(entry.contains("time_us"));
    EXPECT_TRUE(entry.contains("rank"));
  }
  // The same with ops as unary calls, and with a client that polls.
  for (const char* env :
       {"CCL_CLIENT_OP_STREAMS=0", "CCL_CLIENT_BUSY_POLL_US=500"}) {
    Result other = Ccctl("allreduce --op sum -o json", "", env);
    ASSERT_EQ(other.exit_code, 0) << env << ": " << other.err;
    int ranks = 0;
    for (const auto& entry : nlohmann::json::parse(other.out)) {
      EXPECT_EQ(entry["values"][0], 10.0) << env;
      ++ranks;
    }
    EXPECT_EQ(ranks, 4) << env;
  }
}

TEST_F(CcctlTest, EveryCollectiveSubcommand) {
  struct Expect {
    std::string args;
    std::string value;  // printed on every rank whose result is defined
  };
  const std::vector<Expect> cases = {
      {"broadcast --src 2", "[3.0]"},
      {"reduce --op sum --dst 1", "[10.0]"},
      {"allgather", "[1.0, 2.0, 3.0, 4.0]"},
      {"reducescatter --op sum", "[10.0]"},
      {"gather --dst 0", "[1.0, 2.0, 3.0, 4.0]"},
      {"scatter --src 3", "[4.0]"},
      {"alltoall", "[1.0, 2.0, 3.0, 4.0]"},
      {"allreduce --op avg --dtype float64", "[2.5]"},
      {"allreduce --op prod --dtype int32", "[24]"},
      {"allreduce --op min --count 3", "[1.0, 1.0, 1.0]"},
  };
  for (const auto& c : cases) {
    Result r = Ccctl(c.args);
    ASSERT_EQ(r.exit_code, 0) << c.args << ": " << r.err;
    EXPECT_NE(r.out.find(c.value), std::string::npos) << c.args << ":\n"
                                                      << r.out;
  }
  Result barrier = Ccctl("barrier");
  EXPECT_EQ(barrier.exit_code, 0) << barrier.err;
}

TEST_F(CcctlTest, TensorLifecycleSendRecvAndAsync) {
  ASSERT_EQ(Ccctl("tensor alloc t --shape 2,3 --dtype float32 --fill rank+1")
                .exit_code,
            0);
  Result ls = Ccctl("tensor ls");
  EXPECT_NE(ls.out.find("[2,3]"), std::string::npos) << ls.out;
  ASSERT_EQ(Ccctl("tensor write t --rank 0 --values 1,2,3,4,5,6").exit_code, 0);
  Result sent = Ccctl("send --tensor t --from 0 --to 3");
  ASSERT_EQ(sent.exit_code, 0) << sent.err;
  Result read = Ccctl("tensor read t --rank 3");
  EXPECT_NE(read.out.find("[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]"), std::string::npos)
      << read.out;

  Result async = Ccctl("allreduce --tensor t --op sum --async -o json");
  ASSERT_EQ(async.exit_code, 0) << async.err;
  std::vector<std::string> ids;
  for (const auto& entry : nlohmann::json::parse(async.out)) {
    ids.push_back(entry["work"].get<std::string>());
  }
  ASSERT_EQ(ids.size(), 4u);
  Result waited = Ccctl("wait " + absl::StrJoin(ids, " "));
  ASSERT_EQ(waited.exit_code, 0) << waited.err;
  EXPECT_NE(waited.out.find("completed"), std::string::npos) << waited.out;
  // Ranks 1..3 held rank+1 = 2, 3, 4 and rank 3 had received 1..6 from rank 0.
  Result summed = Ccctl("tensor read t --rank 0 -o json");
  auto values = nlohmann::json::parse(summed.out)[0]["values"];
  EXPECT_EQ(values[0], 1 + 2 + 3 + 1.0);
  ASSERT_EQ(Ccctl("tensor free t").exit_code, 0);
  EXPECT_EQ(Ccctl("tensor ls").out.find(" t "), std::string::npos);
}

// Integers go through the CLI exactly (issue 15, item 7): an int64 past
// 2^53 is written and read back to the digit, in the table and in JSON, and
// a value the dtype cannot hold is refused (exit 2) without touching the
// tensor.
TEST_F(CcctlTest, IntegersRoundTripExactlyAndOutOfRangeIsRefused) {
  ASSERT_EQ(
      Ccctl("tensor alloc big --shape 3 --dtype int64 --ranks 0").exit_code, 0);
  Result wrote = Ccctl(
      "tensor write big --rank 0 --values "
      "9007199254740993,-9223372036854775807,7");
  ASSERT_EQ(wrote.exit_code, 0) << wrote.err;
  Result table = Ccctl("tensor read big --ranks 0");
  EXPECT_NE(table.out.find("[9007199254740993, -9223372036854775807, 7]"),
            std::string::npos)
      << table.out;
  Result json = Ccctl("tensor read big --ranks 0 -o json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  auto values = nlohmann::json::parse(json.out)[0]["values"];
  EXPECT_EQ(values[0].get<int64_t>(), int64_t{9007199254740993});
  EXPECT_EQ(values[1].get<int64_t>(), int64_t{-9223372036854775807});

  ASSERT_EQ(Ccctl("tensor alloc small --shape 2 --dtype int8 --fill ones "
                  "--ranks 0")
                .exit_code,
            0);
  Result refused = Ccctl("tensor write small --rank 0 --values 5,128");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("value 128 does not fit int8 (-128..127)"),
            std::string::npos)
      << refused.err;
  Result untouched = Ccctl("tensor read small --ranks 0");
  EXPECT_NE(untouched.out.find("[1, 1]"), std::string::npos) << untouched.out;
  EXPECT_EQ(Ccctl("tensor free big --ranks 0").exit_code, 0);
  EXPECT_EQ(Ccctl("tensor free small --ranks 0").exit_code, 0);
}

// A collective's output shows its int64 results as exactly as `tensor read`
// does: 2^53 + 1 summed with zeros stays 2^53 + 1, not the double nearest.
TEST_F(CcctlTest, CollectiveOutputShowsInt64Exactly) {
  ASSERT_EQ(
      Ccctl("tensor alloc wide --shape 2 --dtype int64 --fill zeros").exit_code,
      0);
  ASSERT_EQ(Ccctl("tensor write wide --rank 0 --values 9007199254740993,-3")
                .exit_code,
            0);
  Result table = Ccctl("allreduce --tensor wide --op sum");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("[9007199254740993, -3]"), std::string::npos)
      << table.out;
  Result json = Ccctl("allreduce --tensor wide --op max -o json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const auto document = nlohmann::json::parse(json.out);
  ASSERT_EQ(document.size(), 4u) << json.out;
  for (const auto& entry : document) {
    EXPECT_EQ(entry["values"][0].get<int64_t>(), int64_t{9007199254740993})
        << json.out;
  }
  EXPECT_EQ(Ccctl("tensor free wide").exit_code, 0);
}

TEST_F(CcctlTest, ExitCodes) {
  // Bad usage: 2, before any RPC.
  EXPECT_EQ(Ccctl("allreduce --op xor").exit_code, 2);
  EXPECT_EQ(Ccctl("no-such-command").exit_code, 2);
  EXPECT_EQ(Ccctl("tensor alloc x --dtype float7").exit_code, 2);
  EXPECT_EQ(Ccctl("broadcast --src 9").exit_code, 2);
  // RPC errors: 1, with the status name on stderr.
  Result unknown = Ccctl("tensor read nope");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("NOT_FOUND"), std::string::npos) << unknown.err;
  ASSERT_EQ(Ccctl("tensor alloc m --shape 3").exit_code, 0);
  Result mismatch = Ccctl("alltoall --tensor m");
  EXPECT_EQ(mismatch.exit_code, 1);
  EXPECT_NE(mismatch.err.find("INVALID_ARGUMENT"), std::string::npos)
      << mismatch.err;
  EXPECT_EQ(Ccctl("tensor free m").exit_code, 0);
  // The cluster still works after the refused op.
  EXPECT_EQ(Ccctl("allreduce").exit_code, 0);
  Result down = Ccctl("status --timeout 2s", "127.0.0.1:1");
  EXPECT_EQ(down.exit_code, 1);
  EXPECT_NE(down.err.find("UNAVAILABLE"), std::string::npos) << down.err;
}

TEST_F(CcctlTest, BenchPrintsNcclTestsColumns) {
  Result bench = Ccctl("bench all_reduce -b 8 -e 64K -f 8 -n 3 -w 1 -c 1");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_NE(bench.out.find("busbw"), std::string::npos);
  EXPECT_NE(bench.out.find("# Out of bounds values : 0 OK"), std::string::npos)
      << bench.out;
  EXPECT_NE(bench.out.find("# Avg bus bandwidth"), std::string::npos);
  Result json = Ccctl("bench all_gather -b 1K -e 4K -n 2 -w 1 -c 1 -o json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["rows"].size(), 3u);
}

// The doctor's run on a live cluster: every directed pair measured and
// checked, its outputs written, nothing left behind. Whether this busy
// machine's pairs look alike is not asserted (the finder's verdicts on
// planted faults are doctor_judge_test's); a throttled worker is.
TEST_F(CcctlTest, DoctorMeasuresEveryPairAndNamesAThrottledRank) {
  const std::string svg = (dir_ / "doctor.svg").string();
  const std::string prom = (dir_ / "doctor.prom").string();
  const std::string baseline = (dir_ / "baseline.json").string();
  const std::string sizes =
      "--size 4M -n 20 -w 1 --latency-iters 100 --skew-ops 5";
  Result healthy =
      Ccctl(absl::StrCat("doctor ", sizes, " -o json --svg ", svg, " --prom ",
                         prom, " --save-baseline ", baseline));
  ASSERT_TRUE(healthy.exit_code == 0 || healthy.exit_code == 3)
      << healthy.exit_code << healthy.err;
  const auto document = nlohmann::json::parse(healthy.out);
  EXPECT_EQ(document["healthy"].get<bool>(), healthy.exit_code == 0);
  ASSERT_EQ(document["ranks"].size(), 4u);
  ASSERT_EQ(document["cells"].size(), 12u);
  for (const auto& cell : document["cells"]) {
    EXPECT_GT(cell["bandwidth_gbps"].get<double>(), 0) << cell;
    EXPECT_GT(cell["latency_us"].get<double>(), 0) << cell;
    EXPECT_EQ(cell["wrong"].get<int>(), 0) << cell;
    EXPECT_FALSE(cell.contains("error")) << cell;
  }
  EXPECT_EQ(document["skew"].size(), 4u);
  EXPECT_EQ(nlohmann::json::parse(Slurp(baseline))["cells"], document["cells"]);
  const std::string picture = Slurp(svg);
  EXPECT_EQ(picture.rfind("<svg", 0), 0u) << picture.substr(0, 80);
  EXPECT_GE(CountOf(picture, "<rect"), 16);
  EXPECT_EQ(CountOf(Slurp(prom), "ccl_doctor_bandwidth_gbps{"), 12);
  Result ls = Ccctl("tensor ls -o json");
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_EQ(absl::StrJoin(Temporaries(ls.out), " "), "");

  // The worker of one rank runs a twelfth of the time (stopped 22 ms of
  // every 24; each pair's bench spans many such cycles): its pairs are
  // slow, the others' are not, on a busy machine too.
  auto client = cluster_->Client();
  ASSERT_TRUE(client.ok()) << client.status();
  const int throttled_worker = 2;
  int throttled_rank = -1;
  for (const auto& member : (*client)->world().members) {
    if (member.address ==
        cluster_->worker(throttled_worker).loopback_address()) {
      throttled_rank = member.rank;
    }
  }
  ASSERT_GE(throttled_rank, 0);
  std::atomic<bool> throttling{true};
  const pid_t pid = cluster_->worker(throttled_worker).pid();
  std::thread throttle([&] {
    while (throttling) {
      kill(pid, SIGSTOP);
      std::this_thread::sleep_for(std::chrono::milliseconds(22));
      kill(pid, SIGCONT);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  Result slow = Ccctl(absl::StrCat("doctor ", sizes, " -o json"));
  Result against =
      Ccctl(absl::StrCat("doctor ", sizes, " --baseline ", baseline));
  throttling = false;
  throttle.join();
  kill(pid, SIGCONT);
  // The throttled rank is named, as a rank. Not necessarily first: findings
  // sort on how far a figure is from normal, and under this test's load (2
  // cores, another test's clusters beside it) the throttle shows as about
  // 6x, while one pair's latency was once 6.5x its peers' in the matrix,
  // again in the confirmation and next to its controls (CI: 1 -> 0, 968 us
  // against 148 us). What the doctor promises is to name what it measured
  // twice, the throttled rank among it; doctor_judge_test holds the order
  // on planted faults.
  ASSERT_EQ(slow.exit_code, 3) << slow.out << slow.err;
  const auto findings = nlohmann::json::parse(slow.out)["findings"];
  const bool named = std::any_of(
      findings.begin(), findings.end(), [&](const nlohmann::json& finding) {
        return finding["blame"] == "rank" &&
               finding["ranks"] == nlohmann::json::array({throttled_rank});
      });
  EXPECT_TRUE(named) << findings;
  EXPECT_EQ(against.exit_code, 3) << against.out << against.err;
  bool named_against = false;
  for (int place = 1; place <= 20; ++place) {
    named_against |=
        against.out.find(absl::StrCat("\n", place, ". rank ", throttled_rank,
                                      " ")) != std::string::npos;
  }
  EXPECT_TRUE(named_against) << against.out;
  EXPECT_NE(against.out.find("judged against the baseline"), std::string::npos);
  // Bad input: a baseline that is not one, sizes that differ from it.
  std::ofstream(dir_ / "not.json") << "{]";
  EXPECT_EQ(
      Ccctl("doctor --baseline " + (dir_ / "not.json").string()).exit_code, 2);
  Result other_size = Ccctl("doctor --size 1M --baseline " + baseline);
  EXPECT_EQ(other_size.exit_code, 2);
  EXPECT_NE(other_size.err.find("--size"), std::string::npos) << other_size.err;
}

TEST_F(CcctlTest, EveryExamplePasses) {
  int examples = 0;
  for (const auto& entry : fs::directory_iterator(CCL_EXAMPLES_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    ++examples;
    Result run = Ccctl("run " + entry.path().string());
    EXPECT_EQ(run.exit_code, 0) << entry.path() << "\n" << run.out << run.err;
  }
  EXPECT_GE(examples, 10);
}

// Consecutive sync ops (and repeats of them) go to the workers as plans;
// the report is still one entry per step, and the checks after them see
// every op's effect.
TEST_F(CcctlTest, RunSendsConsecutiveOpsAsPlans) {
  const fs::path file = dir_ / "plans.yaml";
  std::ofstream(file) << R"(name: plans
steps:
  - alloc: {name: p, shape: [2], fill: rank+1}
  - allreduce: p
  - repeat:
      times: 3
      steps:
        - allreduce: {tensor: p, op: max}
        - broadcast: {tensor: p, src: 1}
  - send: {tensor: p, from: 0, to: 1}
  - assert: {tensor: p, equal: [world_size * (world_size + 1) / 2, 10]}
)";
  Result run = Ccctl("-o json run " + file.string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto document = nlohmann::json::parse(run.out);
  EXPECT_TRUE(document["ok"]) << run.out;
  int planned = 0, ops = 0;
  for (const auto& step : document["steps"]) {
    const std::string kind = step["kind"];
    if (kind == "allreduce" || kind == "broadcast" || kind == "send") {
      ++ops;
      if (step.contains("plan_steps")) {
        ++planned;
        EXPECT_EQ(step["plan_steps"], 8) << step;
      }
    }
  }
  EXPECT_EQ(ops, 8);
  EXPECT_EQ(planned, 8) << run.out;
}

// A step the workers refuse inside a run of ops still fails as itself: the
// plan is refused whole, and its ops run one by one up to the bad one.
TEST_F(CcctlTest, ARefusedPlanNamesTheStepAtFault) {
  const fs::path file = dir_ / "refused.yaml";
  std::ofstream(file) << R"(steps:
  - alloc: {name: q, shape: [2], fill: rank+1}
  - allreduce: q
  - allreduce: no.such.tensor
  - allreduce: q
)";
  Result run = Ccctl("run " + file.string());
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_NE(run.err.find("step 3 (line 4"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("NOT_FOUND"), std::string::npos) << run.err;
  EXPECT_NE(run.out.find("[2/4] allreduce sum q ... ok"), std::string::npos)
      << run.out;
}

// A run's int64 values never pass through a double: 2^53 + 1 is written,
// summed and asserted exactly (2^53 would be the same double), and an
// assertion off by one fails, naming both values.
TEST_F(CcctlTest, RunWritesAndAssertsInt64Exactly) {
  const fs::path file = dir_ / "wide.yaml";
  std::ofstream(file) << R"(steps:
  - alloc: {name: wide, shape: [2], dtype: int64, fill: zeros}
  - write: {tensor: wide, values: ["2**53 + 1", -3], ranks: [0]}
  - allreduce: wide
  - assert: {tensor: wide, equal: ["2**53 + 1", -3]}
)";
  Result run = Ccctl("-o json run " + file.string());
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  const auto document = nlohmann::json::parse(run.out);
  const auto& assertion = document["steps"].back();
  ASSERT_EQ(assertion["kind"], "assert") << run.out;
  for (const auto& rank : assertion["ranks"]) {
    EXPECT_EQ(rank["values"][0].get<int64_t>(), int64_t{9007199254740993})
        << run.out;
  }

  const fs::path off = dir_ / "off_by_one.yaml";
  std::ofstream(off) << R"(steps:
  - alloc: {name: wide2, shape: [1], dtype: int64, fill: zeros}
  - write: {tensor: wide2, values: ["2**53 + 1"]}
  - assert: {tensor: wide2, equal: ["2**53"]}
)";
  Result wrong = Ccctl("run " + off.string());
  EXPECT_EQ(wrong.exit_code, 1) << wrong.out << wrong.err;
  EXPECT_NE((wrong.out + wrong.err)
                .find("is 9007199254740993, expected 9007199254740992"),
            std::string::npos)
      << wrong.out << wrong.err;
}

TEST_F(CcctlTest, LoneRecvSendWithoutRecvAndTest) {
  ASSERT_EQ(Ccctl("tensor alloc lone --shape 3").exit_code, 0);
  // The tutorial's trap, bounded: a recv whose sender never sends.
  Result recv = Ccctl("--timeout 2s recv --tensor lone --rank 1 --from 0");
  EXPECT_EQ(recv.exit_code, 1);
  EXPECT_NE(recv.err.find("DEADLINE_EXCEEDED"), std::string::npos) << recv.err;
  EXPECT_NE(recv.err.find("rank 0 posted no matching send"), std::string::npos)
      << recv.err;
  // The next command just works (issue 42): no wait, no retry. It waits for
  // the re-formed world itself and says so in one line on stderr.
  Result next = Ccctl("allreduce --op sum");
  EXPECT_EQ(next.exit_code, 0) << next.out << next.err;
  EXPECT_EQ(CountOf(next.out, "[10.0]"), 4) << next.out;
  EXPECT_NE(next.err.find("ccctl: world re-forming after rank 1's "
                          "communicator broke"),
            std::string::npos)
      << next.err;
  // The worker still answers, and `test` reports on async work.
  Result read = Ccctl("tensor read lone --rank 1");
  EXPECT_EQ(read.exit_code, 0) << read.err;
  Result bad_id = Ccctl("test 1:999999");
  EXPECT_EQ(bad_id.exit_code, 1);
  EXPECT_NE(bad_id.err.find("NOT_FOUND"), std::string::npos) << bad_id.err;
  EXPECT_EQ(Ccctl("test nonsense").exit_code, 2);
}

TEST_F(CcctlTest, CompletionScript) {
  Result completion = Ccctl("completion bash");
  EXPECT_EQ(completion.exit_code, 0);
  EXPECT_NE(completion.out.find("complete -F _ccctl ccctl"), std::string::npos);
}

// `ccctl cluster up` / `down` with their own state folder: the README's main
// command in small, and the same with the workers behind host agents.
TEST(CcctlClusterTest, UpRunsACollectiveAndDownStopsEverything) {
  auto binary = testing::BinaryPath("ccctl");
  ASSERT_TRUE(binary.ok()) << binary.status();
  for (const std::string hosts : {"", " --hosts 2"}) {
    SCOPED_TRACE("cluster up" + hosts);
    const fs::path state = fs::temp_directory_path() /
                           absl::StrCat("ccctl_cluster_test.", getpid());
    const std::string prefix =
        absl::StrCat("CCCTL_STATE_DIR=", state.string(), " ", *binary, " ");
    const std::string out = (state / "out.txt").string();
    fs::create_directories(state);
    auto run = [&](const std::string& args) {
      const int status = std::system(
          (prefix + args + " >" + out + " 2>&1 </dev/null").c_str());
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    };
    ASSERT_EQ(run("cluster up --workers 2 --wait 60s" + hosts), 0)
        << Slurp(out);
    EXPECT_EQ(run("allreduce --op sum"), 0) << Slurp(out);
    EXPECT_NE(Slurp(out).find("[3.0]"), std::string::npos) << Slurp(out);
    std::ifstream state_file(state / "state.json");
    const nlohmann::json document = nlohmann::json::parse(state_file);
    std::vector<pid_t> pids = {document["coordinator_pid"].get<pid_t>()};
    for (const auto& pid : document["workers"]) {
      pids.push_back(pid.get<pid_t>());
    }
    EXPECT_EQ(document["host_agents"].size(), hosts.empty() ? 0u : 2u);
    for (const auto& pid : document["host_agents"]) {
      pids.push_back(pid.get<pid_t>());
    }
    EXPECT_EQ(run("cluster down"), 0) << Slurp(out);
    for (pid_t pid : pids) {
      // Gone, or a zombie waiting for its (exited) parent's reaper.
      const bool gone =
          kill(pid, 0) != 0 ||
          Slurp("/proc/" + std::to_string(pid) + "/stat").find(" Z ") !=
              std::string::npos;
      EXPECT_TRUE(gone) << "process " << pid << " still runs";
    }
    EXPECT_FALSE(fs::exists(state / "state.json"));
    // Without a cluster, commands fail with the status name, not a hang.
    EXPECT_EQ(run("--timeout 1s status"), 1);
    fs::remove_all(state);
  }
}

// Commands that make temporary tensors free them, and several ccctl at once
// never collide on a name (the names were once the PID, and every ccctl in a
// container is PID 1).
// Its own cluster: the shared one may be re-forming after an earlier test's
// lone recv, and an op then fails for reasons that are not this test's.
TEST(CcctlCleanupTest, TemporariesAreUniqueAndFreed) {
  testing::LocalClusterOptions options;
  options.workers = 4;
  auto started = testing::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<testing::LocalCluster> cluster = *std::move(started);
  const fs::path dir = fs::temp_directory_path() /
                       absl::StrCat("ccctl_temporaries_test.", getpid());
  fs::create_directories(dir);
  const auto binary = testing::BinaryPath("ccctl");
  ASSERT_TRUE(binary.ok()) << binary.status();
  auto ccctl = [&](const std::string& args) {
    const std::string out = (dir / "out").string(),
                      err = (dir / "err").string();
    const int status = std::system(
        absl::StrCat("CCCTL_STATE_DIR=", (dir / "state").string(), " ", *binary,
                     " --coordinator ", cluster->coordinator_address(), " ",
                     args, " >", out, " 2>", err, " </dev/null")
            .c_str());
    return Result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out),
                  Slurp(err)};
  };
  std::string script;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(
        &script, *binary, " --coordinator ", cluster->coordinator_address(),
        " allreduce --op sum --count 1000 >", (dir / "par").string(), i,
        " 2>&1 </dev/null & pids=\"$pids $!\"; ");
  }
  // Exit 1 unless all four succeeded. Each by its pid: `wait -n` answers 127
  // for a child that already ended and was reaped, which a fast one may be.
  absl::StrAppend(&script, "ok=0; for p in $pids; do wait $p || ok=1; done; ",
                  "exit $ok");
  const int status = std::system(("bash -c '" + script + "'").c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (int i = 0; i < 4; ++i) {
    const std::string out = Slurp((dir / absl::StrCat("par", i)).string());
    EXPECT_NE(out.find("[10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, ...]"),
              std::string::npos)
        << out;
  }
  EXPECT_EQ(ccctl("allgather").exit_code, 0);
  EXPECT_EQ(ccctl("alltoall --async").exit_code, 0);
  EXPECT_EQ(ccctl("bench reduce_scatter -b 64 -e 256 -n 1 -w 0").exit_code, 0);
  const fs::path experiment = dir / "bench.yaml";
  std::ofstream(experiment)
      << "name: bench\nsteps:\n"
         "  - bench: {op: all_reduce, minbytes: 64, maxbytes: 128}\n";
  Result run = ccctl("run " + experiment.string());
  EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
  Result ls = ccctl("tensor ls -o json");
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_TRUE(Temporaries(ls.out).empty())
      << absl::StrJoin(Temporaries(ls.out), " ");
  if (::testing::Test::HasFailure()) cluster->DumpLogsOnFailure();
  fs::remove_all(dir);
}

// A hello-world op or a bench whose allocation fails on one rank only (its
// quota is too small) frees what the others allocated, so the next run is
// not refused with ALREADY_EXISTS and no memory is left held.
TEST(CcctlCleanupTest, PartialAllocationFailureFreesEveryRank) {
  testing::LocalClusterOptions options;
  options.workers = 2;
  options.coordinator_args = {"--heartbeat-interval-ms", "200",
                              "--heartbeat-timeout-ms", "1500"};
  auto started = testing::LocalCluster::Start(options);
  ASSERT_TRUE(started.ok()) << started.status();
  std::unique_ptr<testing::LocalCluster> cluster = *std::move(started);
  // Rank 1 holds at most 64 bytes: 16 float32.
  auto generation = cluster->WaitUntilReady(std::chrono::seconds(30));
  ASSERT_TRUE(generation.ok()) << generation.status();
  ASSERT_TRUE(cluster->worker(1).Signal(SIGKILL).ok());
  ASSERT_TRUE(cluster->RestartWorker(1, {"--quota-bytes", "64"}).ok());
  ASSERT_TRUE(
      cluster->WaitUntilReady(std::chrono::seconds(60), *generation + 1).ok());

  auto binary = testing::BinaryPath("ccctl");
  ASSERT_TRUE(binary.ok()) << binary.status();
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("ccctl_cleanup_test.", getpid());
  fs::create_directories(dir);
  auto ccctl = [&](const std::string& args) {
    const std::string out = (dir / "out").string(),
                      err = (dir / "err").string();
    const int status = std::system(
        absl::StrCat("CCCTL_STATE_DIR=", (dir / "state").string(), " ", *binary,
                     " --coordinator ", cluster->coordinator_address(), " ",
                     args, " >", out, " 2>", err, " </dev/null")
            .c_str());
    return Result{WIFEXITED(status) ? WEXITSTATUS(status) : -1, Slurp(out),
                  Slurp(err)};
  };
  auto held = [&] {
    Result ls = ccctl("tensor ls -o json");
    EXPECT_EQ(ls.exit_code, 0) << ls.err;
    return absl::StrJoin(Temporaries(ls.out), " ");
  };

  // The input fails on rank 1; rank 0 had it.
  Result big = ccctl("allreduce --op sum --count 100");
  EXPECT_EQ(big.exit_code, 1);
  EXPECT_NE(big.err.find("RESOURCE_EXHAUSTED"), std::string::npos) << big.err;
  EXPECT_NE(big.err.find("rank 1"), std::string::npos) << big.err;
  EXPECT_EQ(held(), "");
  // The input fits everywhere, the output (2 x 8 floats) not on rank 1.
  Result gather = ccctl("allgather --count 8");
  EXPECT_EQ(gather.exit_code, 1);
  EXPECT_NE(gather.err.find("RESOURCE_EXHAUSTED"), std::string::npos)
      << gather.err;
  EXPECT_EQ(held(), "");
  // A bench runs its small sizes, then fails at one that no longer fits.
  Result bench = ccctl("bench all_reduce -b 8 -e 1K -n 1 -w 0");
  EXPECT_EQ(bench.exit_code, 1);
  EXPECT_NE(bench.err.find("RESOURCE_EXHAUSTED"), std::string::npos)
      << bench.err;
  EXPECT_EQ(held(), "");
  // And what fits still runs, again and again.
  for (int i = 0; i < 2; ++i) {
    Result small = ccctl("allreduce --op sum --count 4");
    EXPECT_EQ(small.exit_code, 0) << small.err;
    EXPECT_NE(small.out.find("[3.0, 3.0, 3.0, 3.0]"), std::string::npos)
        << small.out;
  }
  EXPECT_EQ(held(), "");
  if (::testing::Test::HasFailure()) cluster->DumpLogsOnFailure();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ccl
