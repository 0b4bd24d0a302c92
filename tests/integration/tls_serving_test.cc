// TLS and mutual TLS on the gRPC port, with certificates made at test time
// by Debian's openssl: a CA, a server certificate for 127.0.0.1 and
// localhost, a client certificate, and a second CA with its own client
// certificate that the server must not accept.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"
#include "tests/testing/server_process.h"

namespace kvserve::testing {
namespace {

constexpr char kMakeCertificates[] = R"(set -e
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1"; }
ca() {  # NAME
  key $1.key
  openssl req -x509 -new -key $1.key -out $1.crt -days 2 -subj "/CN=kvserve test $1"
}
leaf() {  # NAME CA EXTENSIONS
  key $1.key
  openssl req -new -key $1.key -out $1.csr -subj "/CN=$1"
  printf '%s\n' "$3" > $1.ext
  openssl x509 -req -in $1.csr -CA $2.crt -CAkey $2.key -CAcreateserial \
    -out $1.crt -days 2 -extfile $1.ext
}
ca ca
ca other_ca
leaf server ca 'subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth'
leaf client ca 'extendedKeyUsage=clientAuth'
leaf stranger other_ca 'extendedKeyUsage=clientAuth'
)";

// The certificates of the whole binary, made once.
class Certificates {
 public:
  static const Certificates& Get() {
    static const Certificates* certificates = new Certificates();
    return *certificates;
  }
  bool ok() const { return ok_; }
  std::string error() const { return error_; }
  std::string File(absl::string_view name) const { return dir_.File(name); }

 private:
  Certificates() {
    if (dir_.path().empty()) {
      error_ = "mkdtemp failed";
      return;
    }
    absl::StatusOr<CommandResult> made = RunCommand(
        {"/bin/sh", "-c",
         absl::StrCat("cd ", dir_.path(), " && ", kMakeCertificates)},
        absl::Seconds(60));
    ok_ = made.ok() && made->status.success();
    if (!ok_) {
      error_ = made.ok()
                   ? absl::StrCat(made->status.ToString(), ": ", made->err)
                   : made.status().ToString();
    }
  }

  ScratchDir dir_;
  bool ok_ = false;
  std::string error_;
};

class TlsServingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Certificates& certs = Certificates::Get();
    ASSERT_TRUE(certs.ok())
        << "openssl could not make the certificates: " << certs.error();
  }

  static std::string File(absl::string_view name) {
    return Certificates::Get().File(name);
  }

  // A server with TLS; with `mutual`, client certificates from ca.crt are
  // required.
  static std::unique_ptr<ServerProcess> StartServer(bool mutual) {
    std::vector<std::string> flags = TestServerFlags();
    flags.push_back("--tls_cert=" + File("server.crt"));
    flags.push_back("--tls_key=" + File("server.key"));
    if (mutual) flags.push_back("--tls_client_ca=" + File("ca.crt"));
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start(flags);
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
  }

  static ConnectOptions Trusting(absl::string_view ca) {
    ConnectOptions options;
    options.tls_ca_file = File(absl::StrCat(ca, ".crt"));
    return options;
  }
  static ConnectOptions WithCertificate(absl::string_view name) {
    ConnectOptions options = Trusting("ca");
    options.tls_cert_file = File(absl::StrCat(name, ".crt"));
    options.tls_key_file = File(absl::StrCat(name, ".key"));
    return options;
  }

  // GetModelInfo over a client with `options`: its status.
  static absl::Status Call(const ServerProcess& server,
                           const ConnectOptions& options) {
    absl::StatusOr<std::unique_ptr<Client>> client =
        ConnectClient(server, options);
    if (!client.ok()) return client.status();
    CallOptions call;
    call.timeout = absl::Seconds(10);
    return (*client)->GetModelInfo(call).status();
  }
};

TEST_F(TlsServingTest, AClientTrustingTheCaGetsEveryService) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(absl::StrContains(server->stderr_text(),
                                "kvserve: TLS on the gRPC port\n"));
  absl::StatusOr<std::unique_ptr<Client>> client =
      ConnectClient(*server, Trusting("ca"));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->GetModelInfo().ok());
  absl::StatusOr<ServingStatus> health = (*client)->Health();
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ServingStatus::kServing);
  v1::GenerateRequest request = GreedyRequest(4);
  request.mutable_prompt()->set_text("Once upon a time");
  absl::StatusOr<Generated> generated = GenerateAll(**client, request);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_EQ(generated->ids.size(), 4u);

  // "localhost" is in the certificate too.
  absl::StatusOr<std::unique_ptr<Client>> by_name = Client::Connect(
      absl::StrCat("localhost:", server->grpc_port()), Trusting("ca"));
  ASSERT_TRUE(by_name.ok());
  EXPECT_TRUE((*by_name)->GetModelInfo().ok());
}

TEST_F(TlsServingTest, PlaintextAndUntrustingClientsFail) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  absl::Status plaintext = Call(*server, {});
  EXPECT_EQ(plaintext.code(), absl::StatusCode::kUnavailable) << plaintext;
  // The server's certificate is not signed by other_ca.
  absl::Status untrusting = Call(*server, Trusting("other_ca"));
  EXPECT_EQ(untrusting.code(), absl::StatusCode::kUnavailable) << untrusting;
  // The server still serves the right clients.
  EXPECT_TRUE(Call(*server, Trusting("ca")).ok());
}

TEST_F(TlsServingTest, MutualTlsRefusesClientsWithoutAnAcceptedCertificate) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(
      absl::StrContains(server->stderr_text(), "client certificates required"));
  EXPECT_FALSE(Call(*server, Trusting("ca")).ok());  // no certificate
  EXPECT_FALSE(Call(*server, WithCertificate("stranger")).ok());
  EXPECT_FALSE(Call(*server, {}).ok());  // plaintext
  absl::Status with_certificate = Call(*server, WithCertificate("client"));
  EXPECT_TRUE(with_certificate.ok()) << with_certificate;
}

TEST_F(TlsServingTest, KvctlSpeaksTlsAndMutualTls) {
  std::unique_ptr<ServerProcess> server = StartServer(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  const std::vector<std::string> tls = {
      BinDir() + "/kvctl", "--addr=" + server->grpc_address(),
      "--tls_ca=" + File("ca.crt"), "--tls_cert=" + File("client.crt"),
      "--tls_key=" + File("client.key")};
  std::vector<std::string> health = tls;
  health.push_back("health");
  absl::StatusOr<CommandResult> result = RunCommand(health);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->status.success()) << result->err;
  EXPECT_EQ(result->out, "SERVING\n");

  std::vector<std::string> generate = tls;
  for (const char* arg : {"generate", "--max_tokens=3", "--ignore_eos",
                          "--json", "Once upon a time"}) {
    generate.push_back(arg);
  }
  result = RunCommand(generate);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->status.success()) << result->err;
  EXPECT_TRUE(absl::StrContains(result->out, "\"finish_reason\":\"length\""))
      << result->out;

  // Without the client certificate the call fails (UNAVAILABLE: exit 3).
  result = RunCommand({BinDir() + "/kvctl", "--addr=" + server->grpc_address(),
                       "--tls_ca=" + File("ca.crt"), "--timeout=10s", "info"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->status.code, 3) << result->err;

  // A certificate without its key is a usage error.
  result = RunCommand({BinDir() + "/kvctl", "--addr=" + server->grpc_address(),
                       "--tls_ca=" + File("ca.crt"),
                       "--tls_cert=" + File("client.crt"), "info"});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->status.code, 1);
  EXPECT_TRUE(absl::StrContains(result->err, "--tls_cert and --tls_key"))
      << result->err;
}

}  // namespace
}  // namespace kvserve::testing
