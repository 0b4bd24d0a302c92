#include "server/tls.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

TEST(IsLoopbackHostTest, LoopbackAddressesAndNames) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "LocalHost",
                           "[::1]", "::1", "[::ffff:127.0.0.1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host :
       {"0.0.0.0", "[::]", "10.0.0.1", "128.0.0.1", "192.168.1.1",
        "kvserve-0.kvserve-headless", "localhost.example.com", "[::1",
        "[::ffff:10.0.0.1]", ""}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

TEST(CheckListenSecurityTest, PlaintextBeyondLoopbackNeedsInsecure) {
  const HostPort any{"0.0.0.0", 50051};
  absl::Status s = CheckListenSecurity("0.0.0.0:50051", any, false, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--listen=0.0.0.0:50051"));
  EXPECT_THAT(s.message(), HasSubstr("--insecure"));
  EXPECT_THAT(s.message(), HasSubstr("KVSERVE_INSECURE=1"));
  EXPECT_THAT(s.message(), HasSubstr("--tls_cert"));
  EXPECT_TRUE(CheckListenSecurity("0.0.0.0:50051", any, false, true).ok());
  EXPECT_TRUE(CheckListenSecurity("0.0.0.0:50051", any, true, false).ok());
  EXPECT_TRUE(
      CheckListenSecurity("127.0.0.1:0", HostPort{"127.0.0.1", 0}, false, false)
          .ok());
}

class MakeServerCredentialsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(
        absl::StrCat(::testing::TempDir(), "/tls_test_", getpid()));
    // Two self-signed certificates with their keys.
    const std::string script = absl::StrCat(
        "set -e; mkdir -p ", *dir_, "; cd ", *dir_,
        "; for n in a b; do openssl req -x509 -newkey rsa:2048 -nodes "
        "-keyout $n.key -out $n.crt -days 1 -subj /CN=$n "
        ">/dev/null 2>&1; done");
    ok_ = std::system(script.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    std::system(absl::StrCat("rm -rf ", *dir_).c_str());
  }
  void SetUp() override {
    if (!ok_) GTEST_SKIP() << "openssl could not make test certificates";
  }
  static std::string File(const char* name) {
    return absl::StrCat(*dir_, "/", name);
  }

  static inline std::string* dir_ = nullptr;
  static inline bool ok_ = false;
};

TEST_F(MakeServerCredentialsTest, GoodFilesGiveCredentials) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
      MakeServerCredentials(
          {.cert_file = File("a.crt"), .key_file = File("a.key")});
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_NE(*creds, nullptr);
  creds = MakeServerCredentials({.cert_file = File("a.crt"),
                                 .key_file = File("a.key"),
                                 .client_ca_file = File("b.crt")});
  ASSERT_TRUE(creds.ok()) << creds.status();
  EXPECT_TRUE(MakeServerCredentials({}).ok());  // plaintext
}

TEST_F(MakeServerCredentialsTest, BadFilesAreNamed) {
  struct Case {
    TlsOptions options;
    std::string reason;
  };
  for (const Case& c : std::vector<Case>{
           {{.cert_file = File("a.crt")}, "both --tls_cert"},
           {{.key_file = File("a.key")}, "both --tls_cert"},
           {{.client_ca_file = File("b.crt")}, "--tls_client_ca needs TLS"},
           {{.cert_file = File("none.crt"), .key_file = File("a.key")},
            "--tls_cert=" + File("none.crt") + ": cannot read it"},
           {{.cert_file = File("a.key"), .key_file = File("a.key")},
            "--tls_cert=" + File("a.key") + ": not a PEM certificate"},
           {{.cert_file = File("a.crt"), .key_file = File("a.crt")},
            "--tls_key=" + File("a.crt") + ": not a PEM private key"},
           {{.cert_file = File("a.crt"), .key_file = File("b.key")},
            "is not the private key of the certificate"},
           {{.cert_file = File("a.crt"),
           .key_file = File("a.key"),
           .client_ca_file = File("a.key")},
            "--tls_client_ca=" + File("a.key") + ": no PEM certificate"},
       }) {
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds =
        MakeServerCredentials(c.options);
    ASSERT_FALSE(creds.ok()) << c.reason;
    EXPECT_EQ(creds.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(creds.status().message(), HasSubstr(c.reason));
  }
}

}  // namespace
}  // namespace kvserve
