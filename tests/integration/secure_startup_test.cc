// The security flags at start: a gRPC port reachable from other machines
// is served in plaintext only with --insecure (or KVSERVE_INSECURE=1);
// incomplete TLS flags and bad keys files stop the server with exit code 2
// and a message naming what is wrong, before the model loads.
#include <gtest/gtest.h>

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

// kvserve with `flags`, expected to refuse to start.
CommandResult Refused(std::vector<std::string> flags,
                      const std::vector<std::string>& env = {}) {
  flags.insert(flags.begin(), BinDir() + "/kvserve");
  flags.push_back("--metrics_listen=127.0.0.1:0");
  absl::StatusOr<CommandResult> result =
      RunCommand(flags, absl::Seconds(30), env);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  EXPECT_TRUE(result->status.exited) << result->status.ToString();
  EXPECT_EQ(result->status.code, 2) << result->err;
  // Refused before the model is loaded.
  EXPECT_FALSE(absl::StrContains(result->err, "weights")) << result->err;
  return *result;
}

TEST(SecureStartupTest, PlaintextBeyondLoopbackNeedsInsecure) {
  for (const char* listen : {"0.0.0.0:0", "[::]:0"}) {
    CommandResult result = Refused({absl::StrCat("--listen=", listen)});
    EXPECT_TRUE(absl::StrContains(
        result.err, absl::StrCat("--listen=", listen,
                                 " is reachable from other machines and TLS "
                                 "is off")))
        << result.err;
    EXPECT_TRUE(absl::StrContains(result.err, "--insecure")) << result.err;
    EXPECT_TRUE(absl::StrContains(result.err, "KVSERVE_INSECURE=1"))
        << result.err;
  }
  // The environment's listen address is checked the same way.
  CommandResult result = Refused({}, {"KVSERVE_LISTEN=0.0.0.0:0"});
  EXPECT_TRUE(absl::StrContains(result.err, "--listen=0.0.0.0:0"))
      << result.err;
}

TEST(SecureStartupTest, InsecureServesPlaintextWithAWarning) {
  struct Case {
    std::vector<std::string> flags;
    std::vector<std::string> env;
  };
  for (const Case& c :
       std::vector<Case>{{{"--insecure"}, {}}, {{}, {"KVSERVE_INSECURE=1"}}}) {
    ServerProcess::Options options;
    options.extra_flags = TestServerFlags();
    options.extra_flags.insert(options.extra_flags.end(), c.flags.begin(),
                               c.flags.end());
    options.env = c.env;
    options.listen = "0.0.0.0:0";
    absl::StatusOr<std::unique_ptr<ServerProcess>> server =
        ServerProcess::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    EXPECT_TRUE(absl::StrContains((*server)->stderr_text(),
                                  "kvserve: warning: --listen=0.0.0.0:0 "
                                  "serves plaintext gRPC to other machines"))
        << (*server)->stderr_text();
    EXPECT_TRUE(absl::StrContains((*server)->stderr_text(),
                                  "without --api_keys_file anyone"));
    absl::StatusOr<std::unique_ptr<Client>> client = ConnectClient(**server);
    ASSERT_TRUE(client.ok());
    absl::StatusOr<ServingStatus> health = (*client)->Health();
    ASSERT_TRUE(health.ok()) << health.status();
    EXPECT_EQ(*health, ServingStatus::kServing);
  }
}

TEST(SecureStartupTest, LoopbackNeedsNeitherTlsNorInsecure) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(TestServerFlags());
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE(absl::StrContains((*server)->stderr_text(), "plaintext"));
}

TEST(SecureStartupTest, IncompleteOrUnreadableTlsFlagsAreRefused) {
  EXPECT_TRUE(absl::StrContains(Refused({"--tls_cert=/etc/hostname"}).err,
                                "TLS needs both --tls_cert"));
  EXPECT_TRUE(absl::StrContains(Refused({"--tls_client_ca=/etc/hostname"}).err,
                                "--tls_client_ca needs TLS"));
  EXPECT_TRUE(absl::StrContains(
      Refused({"--tls_cert=/nonexistent.crt", "--tls_key=/nonexistent.key"})
          .err,
      "--tls_cert=/nonexistent.crt: cannot read it"));
}

TEST(SecureStartupTest, ABadKeysFileIsRefusedNamingTheLine) {
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string keys = dir.File("keys");
  ASSERT_TRUE(WriteTextFile(
      keys,
      absl::StrCat("# ok so far\nalice ", Sha256Hex("k"), "\nbob 12345\n")));
  CommandResult result = Refused({"--api_keys_file=" + keys});
  EXPECT_TRUE(absl::StrContains(result.err, keys + ":3: ")) << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "not 64 hex digits")) << result.err;

  result = Refused({"--api_keys_file=" + dir.File("missing")});
  EXPECT_TRUE(absl::StrContains(result.err, dir.File("missing"))) << result.err;
}

}  // namespace
}  // namespace kvserve::testing
