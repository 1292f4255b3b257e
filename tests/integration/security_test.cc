// The cluster lets in only the right people and processes: TLS, mTLS, token
// roles and the join token, against real cccoord and ccworker processes
// with certificates made at test time. Every rejection is checked for its
// gRPC code, and after it the honest client still gets its work done.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "ccl/v1/coordinator.grpc.pb.h"
#include "ccl/v1/worker.grpc.pb.h"
#include "common/credentials.h"
#include "common/grpc_status.h"
#include "tests/testing/certs.h"
#include "tests/testing/local_cluster.h"

namespace ccl {
namespace {

using ::ccl::testing::LocalCluster;
using ::ccl::testing::LocalClusterOptions;
using ::ccl::testing::Subprocess;
using ::ccl::testing::TestCerts;

constexpr char kFullToken[] = "full-0123456789abcdef";
constexpr char kReadToken[] = "read-0123456789abcdef";
constexpr char kJoinToken[] = "join-0123456789abcdef";

client::Op AllReduce(const std::string& name) {
  client::Op op;
  op.kind = OpKind::kAllReduce;
  op.input = name;
  return op;
}

// The same op as a hand-made request, for stubs dialled with a bad token.
v1::OpRequest WireAllReduce(const std::string& name) {
  v1::OpRequest op;
  op.set_kind(v1::OP_KIND_ALL_REDUCE);
  op.set_input(name);
  op.set_reduce_op(v1::REDUCE_OP_SUM);
  return op;
}

// Allocates, all-reduces and reads back on every rank: what an honest user
// does, and what every test checks still works after its rejections.
void ExpectHonestClientWorks(const LocalCluster& cluster) {
  auto client = cluster.Client(std::chrono::seconds(10));
  ASSERT_TRUE(client.ok()) << client.status();
  const std::string name = "honest";
  for (int rank : (*client)->AllRanks()) {
    (void)(*client)->Free(rank, name);
    auto info = (*client)->Alloc(
        rank, client::TensorSpec{name, DType::kFloat32, {4}, Device{}},
        client::Fill{client::FillKind::kOnes});
    ASSERT_TRUE(info.ok()) << info.status();
  }
  for (const auto& r : (*client)->Collective(AllReduce(name))) {
    ASSERT_TRUE(r.result.ok())
        << "rank " << r.rank << ": " << r.result.status();
  }
  auto bytes = (*client)->Read(0, name, 0, 0);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  ASSERT_EQ(bytes->size(), 4 * sizeof(float));
  float first = 0;
  std::memcpy(&first, bytes->data(), sizeof(first));
  EXPECT_EQ(first, static_cast<float>(cluster.size()));
}

absl::StatusCode GetWorldCode(const std::string& address,
                              const SecurityOptions& security) {
  auto channel = MakeChannel(address, security);
  EXPECT_TRUE(channel.ok()) << channel.status();
  if (!channel.ok()) return channel.status().code();
  auto stub = v1::Coordinator::NewStub(*channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  v1::World world;
  return FromGrpcStatus(stub->GetWorld(&context, v1::GetWorldRequest(), &world))
      .code();
}

class TlsClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto certs = ccl::testing::MakeTestCerts();
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = certs->release();
    const std::string full =
        ccl::testing::WriteTestFile(certs_->dir, "full.token", kFullToken);
    const std::string read = ccl::testing::WriteTestFile(
        certs_->dir, "read.token", std::string(kReadToken) + "\n");
    const std::string join =
        ccl::testing::WriteTestFile(certs_->dir, "join.token", kJoinToken);
    const std::vector<std::string> server_args = {"--tls-cert",
                                                  certs_->server_cert,
                                                  "--tls-key",
                                                  certs_->server_key,
                                                  "--tls-ca",
                                                  certs_->ca,
                                                  "--tls-require-client-cert",
                                                  "--token-file",
                                                  full,
                                                  "--read-only-token-file",
                                                  read,
                                                  "--join-token-file",
                                                  join};
    LocalClusterOptions options;
    options.coordinator_args = server_args;
    options.worker_args = server_args;
    options.client_security = Honest();
    auto cluster = LocalCluster::Start(options);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = cluster->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override {
    if (cluster_ == nullptr) GTEST_SKIP() << "the cluster did not start";
  }
  void TearDown() override {
    if (cluster_ != nullptr) ExpectHonestClientWorks(*cluster_);
  }

  static SecurityOptions Honest() {
    SecurityOptions security;
    security.tls_ca = certs_->ca;
    security.tls_cert = certs_->client_cert;
    security.tls_key = certs_->client_key;
    security.tokens.full = kFullToken;
    return security;
  }
  static SecurityOptions WithToken(const std::string& token) {
    SecurityOptions security = Honest();
    security.tokens.full = token;
    return security;
  }
  // A worker stub for rank 0 with `security`.
  static std::unique_ptr<v1::Worker::Stub> WorkerStub(
      const SecurityOptions& security) {
    auto client = cluster_->Client();
    EXPECT_TRUE(client.ok()) << client.status();
    std::string address;
    for (const auto& member : (*client)->world().members) {
      if (member.rank == 0) address = member.address;
    }
    auto channel = MakeChannel(address, security);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return v1::Worker::NewStub(*channel);
  }
  static std::unique_ptr<grpc::ClientContext> Context() {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(5));
    return context;
  }
  const std::string& address() const { return cluster_->coordinator_address(); }

  static TestCerts* certs_;
  static LocalCluster* cluster_;
};

TestCerts* TlsClusterTest::certs_ = nullptr;
LocalCluster* TlsClusterTest::cluster_ = nullptr;

TEST_F(TlsClusterTest, HonestClientIsServed) {
  EXPECT_EQ(GetWorldCode(address(), Honest()), absl::StatusCode::kOk);
}

TEST_F(TlsClusterTest, ClientWithoutCertificateIsRejected) {
  SecurityOptions security = Honest();
  security.tls_cert.clear();
  security.tls_key.clear();
  EXPECT_EQ(GetWorldCode(address(), security), absl::StatusCode::kUnavailable);
}

TEST_F(TlsClusterTest, ClientCertificateFromAnotherCaIsRejected) {
  SecurityOptions security = Honest();
  security.tls_cert = certs_->other_cert;
  security.tls_key = certs_->other_key;
  EXPECT_EQ(GetWorldCode(address(), security), absl::StatusCode::kUnavailable);
}

TEST_F(TlsClusterTest, ServerNotSignedByTheClientsCaIsRejected) {
  SecurityOptions security = Honest();
  security.tls_ca = certs_->other_ca;
  EXPECT_EQ(GetWorldCode(address(), security), absl::StatusCode::kUnavailable);
}

TEST_F(TlsClusterTest, ExpiredClientCertificateIsRejected) {
  SecurityOptions security = Honest();
  security.tls_cert = certs_->expired_cert;
  security.tls_key = certs_->expired_key;
  EXPECT_EQ(GetWorldCode(address(), security), absl::StatusCode::kUnavailable);
}

TEST_F(TlsClusterTest, PlaintextClientIsRejected) {
  SecurityOptions plaintext;
  plaintext.tokens.full = kFullToken;
  EXPECT_EQ(GetWorldCode(address(), plaintext), absl::StatusCode::kUnavailable);
  auto stub = WorkerStub(plaintext);
  v1::WorkerInfo info;
  EXPECT_EQ(
      stub->GetInfo(Context().get(), v1::GetInfoRequest(), &info).error_code(),
      grpc::StatusCode::UNAVAILABLE);
}

TEST_F(TlsClusterTest, MissingTokenIsUnauthenticated) {
  EXPECT_EQ(GetWorldCode(address(), WithToken("")),
            absl::StatusCode::kUnauthenticated);
  auto stub = WorkerStub(WithToken(""));
  v1::WorkerInfo info;
  EXPECT_EQ(
      stub->GetInfo(Context().get(), v1::GetInfoRequest(), &info).error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TlsClusterTest, WrongTokenIsUnauthenticated) {
  EXPECT_EQ(GetWorldCode(address(), WithToken("full-0123456789abcdeX")),
            absl::StatusCode::kUnauthenticated);
  auto stub = WorkerStub(WithToken("not-a-token"));
  v1::OpResponse response;
  EXPECT_EQ(stub->Submit(Context().get(), WireAllReduce("honest"), &response)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TlsClusterTest, ReadOnlyTokenReadsButMayNotRunCollectives) {
  EXPECT_EQ(GetWorldCode(address(), WithToken(kReadToken)),
            absl::StatusCode::kOk);
  auto stub = WorkerStub(WithToken(kReadToken));
  v1::WorkerInfo info;
  EXPECT_TRUE(stub->GetInfo(Context().get(), v1::GetInfoRequest(), &info).ok());
  v1::ListTensorsResponse list;
  EXPECT_TRUE(
      stub->ListTensors(Context().get(), v1::ListTensorsRequest(), &list).ok());

  v1::OpResponse response;
  grpc::Status submitted =
      stub->Submit(Context().get(), WireAllReduce("honest"), &response);
  EXPECT_EQ(submitted.error_code(), grpc::StatusCode::PERMISSION_DENIED)
      << submitted.error_message();
  v1::AllocTensorRequest alloc;
  alloc.mutable_spec()->set_name("sneaky");
  v1::TensorInfo tensor;
  EXPECT_EQ(stub->AllocTensor(Context().get(), alloc, &tensor).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::FreeTensorRequest free;
  free.set_name("honest");
  v1::FreeTensorResponse freed;
  EXPECT_EQ(stub->FreeTensor(Context().get(), free, &freed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(TlsClusterTest, RegisterNeedsTheJoinToken) {
  v1::RegisterRequest request;
  request.set_address("127.0.0.1:1");
  request.set_host("intruder");
  request.mutable_device()->set_kind(v1::DEVICE_KIND_CPU);
  request.set_worker_id("intruder");
  request.set_timeout_ms(100);
  for (const auto& [token, code] :
       {std::pair<std::string, grpc::StatusCode>{
            "", grpc::StatusCode::UNAUTHENTICATED},
        {"wrong-token", grpc::StatusCode::UNAUTHENTICATED},
        {kReadToken, grpc::StatusCode::PERMISSION_DENIED}}) {
    auto channel = MakeChannel(address(), WithToken(token));
    ASSERT_TRUE(channel.ok());
    auto stub = v1::Coordinator::NewStub(*channel);
    v1::RegisterResponse response;
    EXPECT_EQ(stub->Register(Context().get(), request, &response).error_code(),
              code)
        << "token '" << token << "'";
    // Nor may it read the NCCL unique id, a secret of the world.
    v1::GetUniqueIdRequest id;
    id.set_timeout_ms(100);
    v1::GetUniqueIdResponse id_response;
    EXPECT_EQ(stub->GetUniqueId(Context().get(), id, &id_response).error_code(),
              code)
        << "token '" << token << "'";
  }
  // The join token takes a worker in, yet drives nothing on the workers.
  auto stub = WorkerStub(WithToken(kJoinToken));
  v1::OpResponse response;
  EXPECT_EQ(stub->Submit(Context().get(), WireAllReduce("honest"), &response)
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(TlsClusterTest, WorkerWithWrongJoinTokenCannotTakeARank) {
  auto ccworker = ccl::testing::BinaryPath("ccworker");
  ASSERT_TRUE(ccworker.ok());
  const std::string bad = ccl::testing::WriteTestFile(
      certs_->dir, "bad-join.token", "join-wrong-secret");
  auto worker = Subprocess::Start(
      *ccworker,
      {"--coordinator", address(), "--listen", "127.0.0.1:0", "--tls-cert",
       certs_->server_cert, "--tls-key", certs_->server_key, "--tls-ca",
       certs_->ca, "--join-token-file", bad, "--register-timeout-ms", "2000"});
  ASSERT_TRUE(worker.ok()) << worker.status();
  auto exit = (*worker)->WaitForExit(std::chrono::seconds(20));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->code != 0) << exit->ToString();
  EXPECT_NE((*worker)->ReadLog().find("UNAUTHENTICATED"), std::string::npos)
      << (*worker)->ReadLog();
}

TEST_F(TlsClusterTest, ServerNameMustMatchTheCertificate) {
  SecurityOptions security = Honest();
  security.tls_server_name = "not-the-server.example";
  EXPECT_EQ(GetWorldCode(address(), security), absl::StatusCode::kUnavailable);
}

TEST_F(TlsClusterTest, RequestsOverALimitAreRefusedByName) {
  auto client = cluster_->Client();
  ASSERT_TRUE(client.ok()) << client.status();
  client::TensorSpec spec{"deep", DType::kFloat32, std::vector<int64_t>(9, 1)};
  auto deep = (*client)->Alloc(0, spec);
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("--max-shape-rank"),
            absl::string_view::npos)
      << deep.status();

  spec.shape = {int64_t{1} << 40};
  auto huge = (*client)->Alloc(0, spec);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("--max-tensor-elements"),
            absl::string_view::npos)
      << huge.status();

  spec.name = std::string(300, 'n');
  spec.shape = {1};
  auto named = (*client)->Alloc(0, spec);
  EXPECT_EQ(named.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(named.status().message().find("--max-name-length"),
            absl::string_view::npos)
      << named.status();
}

// A rotated certificate is served without a restart.
TEST(CertificateReloadTest, RotatedServerCertificateIsPickedUp) {
  auto certs = ccl::testing::MakeTestCerts();
  ASSERT_TRUE(certs.ok()) << certs.status();
  const std::string dir = (*certs)->dir;
  const std::string cert = dir + "/serving.pem";
  const std::string key = dir + "/serving.key";
  std::filesystem::copy_file((*certs)->server_cert, cert);
  std::filesystem::copy_file((*certs)->server_key, key);
  auto cccoord = ccl::testing::BinaryPath("cccoord");
  ASSERT_TRUE(cccoord.ok());
  auto coordinator = Subprocess::Start(
      *cccoord, {"--world-size", "1", "--listen", "127.0.0.1:0", "--tls-cert",
                 cert, "--tls-key", key, "--cert-refresh-s", "1"});
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  ASSERT_TRUE((*coordinator)->WaitForPort(std::chrono::seconds(20)).ok());
  const std::string address = (*coordinator)->loopback_address();
  SecurityOptions old_ca;
  old_ca.tls_ca = (*certs)->ca;
  SecurityOptions new_ca;
  new_ca.tls_ca = (*certs)->other_ca;
  EXPECT_EQ(GetWorldCode(address, old_ca), absl::StatusCode::kOk);
  EXPECT_EQ(GetWorldCode(address, new_ca), absl::StatusCode::kUnavailable);

  // Replaced by rename, as a secret volume update does.
  std::filesystem::copy_file((*certs)->other_cert, cert + ".new");
  std::filesystem::copy_file((*certs)->other_key, key + ".new");
  std::filesystem::rename(key + ".new", key);
  std::filesystem::rename(cert + ".new", cert);
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (code != absl::StatusCode::kOk &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    code = GetWorldCode(address, new_ca);
  }
  EXPECT_EQ(code, absl::StatusCode::kOk);
}

// Plaintext with tokens, on loopback: the same processor guards the calls.
TEST(PlaintextTokenTest, TokensAreCheckedWithoutTls) {
  auto certs = ccl::testing::MakeTestCerts();
  ASSERT_TRUE(certs.ok()) << certs.status();
  const std::string full =
      ccl::testing::WriteTestFile((*certs)->dir, "full.token", kFullToken);
  const std::string read =
      ccl::testing::WriteTestFile((*certs)->dir, "read.token", kReadToken);
  LocalClusterOptions options;
  options.coordinator_args = {"--token-file", full, "--read-only-token-file",
                              read};
  options.worker_args = options.coordinator_args;
  options.client_security.tokens.full = kFullToken;
  auto cluster = LocalCluster::Start(options);
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string address = (*cluster)->coordinator_address();
  SecurityOptions none;
  EXPECT_EQ(GetWorldCode(address, none), absl::StatusCode::kUnauthenticated);
  SecurityOptions read_only;
  read_only.tokens.full = kReadToken;
  EXPECT_EQ(GetWorldCode(address, read_only), absl::StatusCode::kOk);
  ExpectHonestClientWorks(**cluster);
}

TEST(BindTest, PlaintextOnANonLoopbackAddressNeedsInsecure) {
  auto cccoord = ccl::testing::BinaryPath("cccoord");
  ASSERT_TRUE(cccoord.ok());
  auto refused = Subprocess::Start(
      *cccoord, {"--world-size", "1", "--listen", "0.0.0.0:0"});
  ASSERT_TRUE(refused.ok());
  auto exit = (*refused)->WaitForExit(std::chrono::seconds(10));
  ASSERT_TRUE(exit.ok()) << exit.status();
  EXPECT_TRUE(exit->exited && exit->code == 2) << exit->ToString();
  EXPECT_NE((*refused)->ReadLog().find("refusing to serve plaintext"),
            std::string::npos)
      << (*refused)->ReadLog();

  auto allowed = Subprocess::Start(
      *cccoord, {"--world-size", "1", "--listen", "0.0.0.0:0", "--insecure"});
  ASSERT_TRUE(allowed.ok());
  auto port = (*allowed)->WaitForPort(std::chrono::seconds(10));
  ASSERT_TRUE(port.ok()) << port.status();
  const std::string log = (*allowed)->ReadLog();
  EXPECT_NE(log.find("serving plaintext"), std::string::npos) << log;
  EXPECT_NE(log.find("no token configured"), std::string::npos) << log;
}

}  // namespace
}  // namespace ccl
