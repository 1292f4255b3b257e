// The token policy (who may call what), the credentials factory's rules on
// binds and options, and the request limits, without a network.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "common/auth.h"
#include "common/credentials.h"
#include "server/rpc/request_limits.h"

namespace ccl {
namespace {

RoleTokens Tokens() {
  RoleTokens tokens;
  tokens.full = "full-secret";
  tokens.read_only = "read-secret";
  tokens.join = "join-secret";
  return tokens;
}

absl::StatusCode Code(const std::string& method,
                      std::optional<std::string> header) {
  std::optional<absl::string_view> view;
  if (header) view = *header;
  return Authorize(Tokens(), method, view).code();
}

TEST(AuthorizeTest, NoTokenConfiguredLetsEveryoneIn) {
  EXPECT_TRUE(
      Authorize(RoleTokens(), "/ccl.v1.Worker/Submit", std::nullopt).ok());
}

TEST(AuthorizeTest, MissingOrWrongTokenIsUnauthenticated) {
  EXPECT_EQ(Code("/ccl.v1.Worker/GetInfo", std::nullopt),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code("/ccl.v1.Worker/GetInfo", "full-secret"),
            absl::StatusCode::kUnauthenticated);  // no "Bearer "
  EXPECT_EQ(Code("/ccl.v1.Worker/GetInfo", "Bearer full-secreT"),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code("/ccl.v1.Worker/GetInfo", "Bearer "),
            absl::StatusCode::kUnauthenticated);
}

TEST(AuthorizeTest, RolesGrantTheirMethodsOnly) {
  EXPECT_EQ(Code("/ccl.v1.Worker/Submit", "Bearer full-secret"),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code("/ccl.v1.Coordinator/GetUniqueId", "Bearer full-secret"),
            absl::StatusCode::kOk);
  for (const char* read :
       {"/ccl.v1.Worker/GetInfo", "/ccl.v1.Worker/ReadTensor",
        "/ccl.v1.Coordinator/GetWorld"}) {
    EXPECT_EQ(Code(read, "Bearer read-secret"), absl::StatusCode::kOk) << read;
  }
  for (const char* write :
       {"/ccl.v1.Worker/Submit", "/ccl.v1.Worker/AllocTensor",
        "/ccl.v1.Worker/Bench", "/ccl.v1.Coordinator/Register",
        "/ccl.v1.Coordinator/RegisterHost", "/ccl.v1.Coordinator/GetUniqueId",
        "/ccl.v1.Coordinator/KvGet"}) {
    EXPECT_EQ(Code(write, "Bearer read-secret"),
              absl::StatusCode::kPermissionDenied)
        << write;
  }
  EXPECT_EQ(Code("/ccl.v1.Coordinator/Register", "Bearer join-secret"),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code("/ccl.v1.Coordinator/RegisterHost", "Bearer join-secret"),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code("/ccl.v1.Coordinator/GetUniqueId", "Bearer join-secret"),
            absl::StatusCode::kOk);
  EXPECT_EQ(Code("/ccl.v1.Worker/Submit", "Bearer join-secret"),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code("/ccl.v1.Coordinator/ReserveSequence", "Bearer join-secret"),
            absl::StatusCode::kPermissionDenied);
}

TEST(AuthorizeTest, UnknownMethodsNeedFullAccessAndHealthIsOpen) {
  EXPECT_EQ(Code("/ccl.v1.Worker/NotYetInvented", "Bearer read-secret"),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code("/grpc.health.v1.Health/Check", std::nullopt),
            absl::StatusCode::kOk);
}

TEST(AuthorizeTest, ConstantTimeEqualsCompares) {
  EXPECT_TRUE(ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEquals("abc", "abcd"));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
}

TEST(AuthorizeTest, RoleTokensMustFitTogether) {
  RoleTokens tokens;
  tokens.read_only = "r";
  EXPECT_EQ(ValidateRoleTokens(tokens).code(),
            absl::StatusCode::kInvalidArgument);
  tokens.full = "r";
  EXPECT_EQ(ValidateRoleTokens(tokens).code(),
            absl::StatusCode::kInvalidArgument);
  tokens.full = "f";
  EXPECT_TRUE(ValidateRoleTokens(tokens).ok());
}

TEST(CredentialsTest, LoopbackAddresses) {
  for (const char* yes : {"127.0.0.1:0", "127.1.2.3:80", "localhost:1",
                          "[::1]:5", "::1", "LOCALHOST:2"}) {
    EXPECT_TRUE(IsLoopbackAddress(yes)) << yes;
  }
  for (const char* no :
       {"0.0.0.0:0", "[::]:1", "10.0.0.1:2", "example.com:3", ":4"}) {
    EXPECT_FALSE(IsLoopbackAddress(no)) << no;
  }
}

TEST(CredentialsTest, PlaintextOnlyOnLoopbackUnlessAskedFor) {
  SecurityOptions options;
  EXPECT_TRUE(MakeServerCredentials(options, "127.0.0.1:0").ok());
  auto refused = MakeServerCredentials(options, "0.0.0.0:0");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  options.insecure = true;
  auto warned = MakeServerCredentials(options, "0.0.0.0:0");
  ASSERT_TRUE(warned.ok());
  EXPECT_EQ(warned->warnings.size(), 2u);  // plaintext, and no token
  options.tokens.full = "t";
  warned = MakeServerCredentials(options, "0.0.0.0:0");
  ASSERT_TRUE(warned.ok());
  EXPECT_EQ(warned->warnings.size(), 1u);  // plaintext
}

TEST(CredentialsTest, BadTlsOptionsFailClearly) {
  SecurityOptions options;
  options.tls_cert = "/nonexistent/cert.pem";
  EXPECT_EQ(MakeServerCredentials(options, "127.0.0.1:0").status().code(),
            absl::StatusCode::kInvalidArgument);  // no key
  options.tls_key = "/nonexistent/key.pem";
  EXPECT_EQ(MakeServerCredentials(options, "127.0.0.1:0").status().code(),
            absl::StatusCode::kInvalidArgument);  // unreadable
  SecurityOptions client;
  client.tls_ca = "/nonexistent/ca.pem";
  EXPECT_EQ(ChannelFactory::Create(client).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CredentialsTest, TokensComeFromFilesThenEnvironment) {
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/ccl-token-test";
  std::ofstream(file) << "  from-file\n";
  setenv("CCL_TOKEN", "from-env", 1);
  setenv("CCL_READ_ONLY_TOKEN", "read-env", 1);
  unsetenv("CCL_TOKEN_FILE");
  unsetenv("CCL_READ_ONLY_TOKEN_FILE");
  unsetenv("CCL_JOIN_TOKEN");
  unsetenv("CCL_JOIN_TOKEN_FILE");
  SecurityOptions options;
  TokenFiles files;
  files.full = file;
  ASSERT_TRUE(ResolveSecurityOptions(files, &options).ok());
  EXPECT_EQ(options.tokens.full, "from-file");
  EXPECT_EQ(options.tokens.read_only, "read-env");
  EXPECT_TRUE(options.tokens.join.empty());

  setenv("CCL_JOIN_TOKEN_FILE", file.c_str(), 1);
  SecurityOptions from_env;
  ASSERT_TRUE(ResolveSecurityOptions(TokenFiles(), &from_env).ok());
  EXPECT_EQ(from_env.tokens.full, "from-env");
  EXPECT_EQ(from_env.tokens.join, "from-file");

  std::ofstream(file, std::ios::trunc) << "\n";
  SecurityOptions empty;
  EXPECT_EQ(ResolveSecurityOptions(TokenFiles(), &empty).code(),
            absl::StatusCode::kInvalidArgument);
  unsetenv("CCL_TOKEN");
  unsetenv("CCL_READ_ONLY_TOKEN");
  unsetenv("CCL_JOIN_TOKEN_FILE");
  std::filesystem::remove(file);
}

v1::AllocTensorRequest Alloc(std::vector<int64_t> shape) {
  v1::AllocTensorRequest request;
  request.mutable_spec()->set_name("t");
  request.mutable_spec()->set_dtype(v1::DTYPE_FLOAT32);
  for (int64_t dim : shape) request.mutable_spec()->add_shape(dim);
  return request;
}

TEST(RequestLimitsTest, AllocLimitsAreNamed) {
  RequestLimits limits;
  limits.max_shape_rank = 3;
  limits.max_tensor_elements = 1000;
  limits.max_tensors = 2;
  EXPECT_TRUE(ValidateRequest(Alloc({10, 10}), limits).ok());

  absl::Status rank = ValidateRequest(Alloc({1, 1, 1, 1}), limits);
  EXPECT_EQ(rank.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(rank.message().find("--max-shape-rank"), absl::string_view::npos);

  absl::Status elements = ValidateRequest(Alloc({100, 100}), limits);
  EXPECT_EQ(elements.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(elements.message().find("--max-tensor-elements"),
            absl::string_view::npos);

  absl::Status overflow =
      ValidateRequest(Alloc({int64_t{1} << 40, int64_t{1} << 40}), limits);
  EXPECT_EQ(overflow.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.message().find("overflow"), absl::string_view::npos);

  EXPECT_EQ(ValidateRequest(Alloc({-1}), limits).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RequestLimitsTest, NamesHaveALengthAndACharset) {
  RequestLimits limits;
  limits.max_name_length = 8;
  EXPECT_TRUE(ValidateName("a-b_c.d/", "tensor name", limits).ok());
  absl::Status long_name = ValidateName("123456789", "tensor name", limits);
  EXPECT_EQ(long_name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(long_name.message().find("--max-name-length"),
            absl::string_view::npos);
  EXPECT_EQ(ValidateName("a b", "tensor name", limits).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateName(std::string("a\0b", 3), "tensor name", limits).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateName("", "tensor name", limits).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RequestLimitsTest, OpsAndStreamsAreChecked) {
  RequestLimits limits;
  v1::OpRequest op;
  op.set_kind(v1::OP_KIND_ALL_REDUCE);
  op.set_input("x");
  EXPECT_TRUE(ValidateRequest(op, limits).ok());
  op.set_kind(static_cast<v1::OpKind>(999));
  EXPECT_EQ(ValidateRequest(op, limits).code(),
            absl::StatusCode::kInvalidArgument);
  op.set_kind(v1::OP_KIND_ALL_REDUCE);
  op.set_timeout_ms(limits.max_timeout_ms + 1);
  EXPECT_EQ(ValidateRequest(op, limits).code(),
            absl::StatusCode::kInvalidArgument);
  op.set_timeout_ms(0);
  op.set_seq(INT64_MAX);  // would overflow the executor's counter
  EXPECT_EQ(ValidateRequest(op, limits).code(),
            absl::StatusCode::kInvalidArgument);
  op.set_seq(0);
  op.set_output("bad name!");
  EXPECT_EQ(ValidateRequest(op, limits).code(),
            absl::StatusCode::kInvalidArgument);

  v1::WriteTensorChunk chunk;
  chunk.set_offset_bytes(INT64_MAX);
  chunk.set_data("xy");
  EXPECT_EQ(ValidateRequest(chunk, limits).code(),
            absl::StatusCode::kInvalidArgument);

  v1::ReadTensorRequest read;
  read.set_name("x");
  read.set_offset(INT64_MAX);
  read.set_count(INT64_MAX);
  EXPECT_EQ(ValidateRequest(read, limits).code(),
            absl::StatusCode::kInvalidArgument);

  v1::BenchRequest bench;
  *bench.mutable_op() = v1::OpRequest();
  bench.mutable_op()->set_kind(v1::OP_KIND_BARRIER);
  bench.set_iters(0);
  EXPECT_EQ(ValidateRequest(bench, limits).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ccl
