#include "client/ccctl/console.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "client/ccctl/console_jobs.h"

namespace ccl::ctl {
namespace {

TEST(ConsoleRoleTest, TokensGiveRoles) {
  const ConsoleTokens tokens{"view-secret", "operate-secret"};
  EXPECT_EQ(RoleOf(tokens, "Bearer view-secret"), ConsoleRole::kViewer);
  EXPECT_EQ(RoleOf(tokens, "Bearer operate-secret"), ConsoleRole::kOperator);
  EXPECT_EQ(RoleOf(tokens, "Bearer wrong"), ConsoleRole::kNone);
  EXPECT_EQ(RoleOf(tokens, ""), ConsoleRole::kNone);
  // The scheme is part of the header: a bare token is not a bearer token.
  EXPECT_EQ(RoleOf(tokens, "view-secret"), ConsoleRole::kNone);
  EXPECT_EQ(RoleOf(tokens, "Bearer "), ConsoleRole::kNone);
}

TEST(ConsoleRoleTest, WithoutAViewerTokenAnyoneViewsButOnlyTheOperatorRuns) {
  const ConsoleTokens open{"", "operate-secret"};
  EXPECT_EQ(RoleOf(open, ""), ConsoleRole::kViewer);
  EXPECT_EQ(RoleOf(open, "Bearer wrong"), ConsoleRole::kViewer);
  EXPECT_EQ(RoleOf(open, "Bearer operate-secret"), ConsoleRole::kOperator);
  // No operator token configured: no header makes an operator.
  const ConsoleTokens read_only{"", ""};
  EXPECT_EQ(RoleOf(read_only, "Bearer "), ConsoleRole::kViewer);
  EXPECT_EQ(RoleOf(read_only, "Bearer anything"), ConsoleRole::kViewer);
}

TEST(ConsoleSettingsTest, OffLoopbackNeedsAViewerToken) {
  EXPECT_TRUE(CheckConsoleSettings("127.0.0.1:0", {"", ""}, "").ok());
  EXPECT_TRUE(CheckConsoleSettings("localhost:8080", {"", "op"}, "").ok());
  const absl::Status open =
      CheckConsoleSettings("0.0.0.0:8080", {"", "op"}, "");
  EXPECT_EQ(open.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(open.message().find("--viewer-token-file"), std::string::npos)
      << open;
  EXPECT_TRUE(CheckConsoleSettings("0.0.0.0:8080", {"view", "op"}, "").ok());
}

TEST(ConsoleSettingsTest, TokensMustBeTheConsolesOwn) {
  EXPECT_EQ(CheckConsoleSettings("127.0.0.1:0", {"same", "same"}, "").code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status shared =
      CheckConsoleSettings("127.0.0.1:0", {"view", "cluster"}, "cluster");
  EXPECT_EQ(shared.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(shared.message().find("cluster's own token"), std::string::npos)
      << shared;
  EXPECT_TRUE(
      CheckConsoleSettings("127.0.0.1:0", {"view", "op"}, "cluster").ok());
}

TEST(ConsoleAssetsTest, ThePagesAreBuiltIn) {
  bool index = false, script = false, style = false;
  for (const ConsoleAsset* a = kConsoleAssets; a->path != nullptr; ++a) {
    const std::string body(reinterpret_cast<const char*>(a->data), a->size);
    if (std::string(a->path) == "/") {
      index = body.find("<title>ccctl console</title>") != std::string::npos;
    }
    if (std::string(a->path) == "/console.js") {
      script =
          body.find("\"use strict\"") != std::string::npos &&
          std::string(a->content_type).find("javascript") != std::string::npos;
    }
    if (std::string(a->path) == "/console.css") style = a->size > 100;
  }
  EXPECT_TRUE(index);
  EXPECT_TRUE(script);
  EXPECT_TRUE(style);
}

TEST(RunChildTest, CapturesOutputErrorsAndExitCode) {
  std::vector<std::string> lines;
  auto result =
      RunChild({"/bin/sh", "-c",
                "echo out; echo 'ccctl: NOT_FOUND: no tensor x' >&2; "
                "exit 1"},
               std::chrono::seconds(10),
               [&](const std::string& line) { lines.push_back(line); });
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->exit_code, 1);
  EXPECT_EQ(result->out, "out\n");
  EXPECT_FALSE(result->timed_out);
  EXPECT_EQ(lines, std::vector<std::string>{"ccctl: NOT_FOUND: no tensor x"});
  EXPECT_EQ(ChildError(*result), "NOT_FOUND: no tensor x");
}

TEST(RunChildTest, AChildPastItsLimitIsKilled) {
  const auto started = std::chrono::steady_clock::now();
  auto result = RunChild({"/bin/sleep", "30"}, std::chrono::milliseconds(200));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->timed_out);
  EXPECT_EQ(result->exit_code, -1);
  EXPECT_LT(std::chrono::steady_clock::now() - started,
            std::chrono::seconds(20));
  EXPECT_NE(ChildError(*result).find("DEADLINE_EXCEEDED"), std::string::npos);
}

TEST(RunChildTest, AMissingBinaryIsAnError) {
  auto result =
      RunChild({"/nonexistent/ccctl"}, std::chrono::milliseconds(1000));
  EXPECT_FALSE(result.ok());
}

TEST(ConsoleJobsTest, OneRunAtATimeAndItsDocumentIsKept) {
  // A stand-in ccctl: prints a JSON document after a moment.
  ConsoleJobs jobs("/bin/sh", {});
  auto first =
      jobs.Start("bench", {"-c", "sleep 0.5; echo '{\"rows\": [1, 2]}'"},
                 std::chrono::seconds(10));
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      jobs.Start("doctor", {"-c", "echo '{}'"}, std::chrono::seconds(10));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  nlohmann::json job;
  for (int i = 0; i < 200; ++i) {
    job = *jobs.Get(*first);
    if (job["state"] != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(job["state"], "done") << job.dump();
  EXPECT_EQ(job["result"]["rows"].size(), 2u);
  EXPECT_EQ(jobs.Get(12345).status().code(), absl::StatusCode::kNotFound);
  auto failed =
      jobs.Start("bench", {"-c", "echo 'ccctl: UNAVAILABLE: gone' >&2; exit 1"},
                 std::chrono::seconds(10));
  ASSERT_TRUE(failed.ok()) << failed.status();
  for (int i = 0; i < 200; ++i) {
    job = *jobs.Get(*failed);
    if (job["state"] != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(job["state"], "failed");
  EXPECT_EQ(job["error"], "UNAVAILABLE: gone");
}

}  // namespace
}  // namespace ccl::ctl
