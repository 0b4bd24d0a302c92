#include "server/settings.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// Flags of this test only; their variables have the prefix kPrefix.
ABSL_FLAG(int64_t, settings_test_bytes, 7, "an integer flag");
ABSL_FLAG(std::string, settings_test_name, "unset", "a string flag");
ABSL_FLAG(bool, settings_test_switch, false, "a boolean flag");

namespace kvserve {
namespace {

using ::testing::HasSubstr;

constexpr char kPrefix[] = "KVSERVE_TEST_";

// Sets an environment variable for the scope of one test.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    setenv(name, value, 1);
  }
  ~ScopedEnv() { unsetenv(name_.c_str()); }

 private:
  std::string name_;
};

class EnvironmentFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::SetFlag(&FLAGS_settings_test_bytes, 7);
    absl::SetFlag(&FLAGS_settings_test_name, "unset");
    absl::SetFlag(&FLAGS_settings_test_switch, false);
  }
};

TEST_F(EnvironmentFlagsTest, NoVariablesChangeNothing) {
  ASSERT_TRUE(ApplyEnvironmentFlags(kPrefix).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_bytes), 7);
  EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_name), "unset");
  EXPECT_FALSE(absl::GetFlag(FLAGS_settings_test_switch));
}

TEST_F(EnvironmentFlagsTest, SetsEachFlagFromItsCapitalizedVariable) {
  ScopedEnv bytes("KVSERVE_TEST_SETTINGS_TEST_BYTES", "1000000000");
  ScopedEnv name("KVSERVE_TEST_SETTINGS_TEST_NAME", "a b=c");
  ScopedEnv on("KVSERVE_TEST_SETTINGS_TEST_SWITCH", "true");
  ASSERT_TRUE(ApplyEnvironmentFlags(kPrefix).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_bytes), 1000000000);
  EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_name), "a b=c");
  EXPECT_TRUE(absl::GetFlag(FLAGS_settings_test_switch));
}

TEST_F(EnvironmentFlagsTest, OtherPrefixesAndLowerCaseNamesAreIgnored) {
  ScopedEnv other("OTHER_SETTINGS_TEST_BYTES", "5");
  ScopedEnv lower("KVSERVE_TEST_settings_test_bytes", "6");
  ASSERT_TRUE(ApplyEnvironmentFlags(kPrefix).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_bytes), 7);
}

TEST_F(EnvironmentFlagsTest, EmptyValueSetsAnEmptyString) {
  ScopedEnv name("KVSERVE_TEST_SETTINGS_TEST_NAME", "");
  ASSERT_TRUE(ApplyEnvironmentFlags(kPrefix).ok());
  EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_name), "");
}

TEST_F(EnvironmentFlagsTest, BadValueNamesTheVariableAndTheValue) {
  for (const char* bad : {"lots", "12x", "", "99999999999999999999"}) {
    ScopedEnv bytes("KVSERVE_TEST_SETTINGS_TEST_BYTES", bad);
    absl::Status s = ApplyEnvironmentFlags(kPrefix);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr(std::string("KVSERVE_TEST_SETTINGS_"
                                                   "TEST_BYTES=\"") +
                                       bad + "\""));
    EXPECT_EQ(absl::GetFlag(FLAGS_settings_test_bytes), 7) << bad;
  }
  ScopedEnv on("KVSERVE_TEST_SETTINGS_TEST_SWITCH", "maybe");
  absl::Status s = ApplyEnvironmentFlags(kPrefix);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("KVSERVE_TEST_SETTINGS_TEST_SWITCH"));
  EXPECT_THAT(s.message(), HasSubstr("maybe"));
}

TEST(ParseHostPortTest, GoodAddresses) {
  absl::StatusOr<HostPort> hp = ParseHostPort("127.0.0.1:50051");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "127.0.0.1");
  EXPECT_EQ(hp->port, 50051);

  hp = ParseHostPort("[::1]:0");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "[::1]");  // brackets kept
  EXPECT_EQ(hp->port, 0);

  hp = ParseHostPort("0.0.0.0:9464");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "0.0.0.0");
  EXPECT_EQ(hp->port, 9464);

  hp = ParseHostPort("localhost:65535");
  ASSERT_TRUE(hp.ok()) << hp.status();
  EXPECT_EQ(hp->host, "localhost");
  EXPECT_EQ(hp->port, 65535);
}

TEST(ParseHostPortTest, BadAddressesAreNamedInTheError) {
  for (const char* bad : {"", "50051", ":50051", "localhost:", "localhost:http",
                          "localhost:-1", "localhost:65536", "[::1]"}) {
    absl::StatusOr<HostPort> hp = ParseHostPort(bad);
    ASSERT_FALSE(hp.ok()) << bad;
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(hp.status().message(),
                HasSubstr(std::string("\"") + bad + "\" is not HOST:PORT"));
  }
}

TEST(TerminationSignalsTest, BlockedSignalsAreReceivedByTheWaiter) {
  BlockTerminationSignals();
  sigset_t blocked;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &blocked), 0);
  EXPECT_EQ(sigismember(&blocked, SIGTERM), 1);
  EXPECT_EQ(sigismember(&blocked, SIGINT), 1);
  // Blocked, so pending until received rather than killing the test.
  ASSERT_EQ(pthread_kill(pthread_self(), SIGTERM), 0);
  EXPECT_EQ(WaitForTerminationSignal(), SIGTERM);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);
  EXPECT_EQ(WaitForTerminationSignal(), SIGINT);
}

TEST(TerminationSignalsTest, HangupsCallTheReloadAndKeepWaiting) {
  BlockTerminationSignals();
  sigset_t blocked;
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, nullptr, &blocked), 0);
  EXPECT_EQ(sigismember(&blocked, SIGHUP), 1);
  int hangups = 0;
  ASSERT_EQ(pthread_kill(pthread_self(), SIGHUP), 0);
  // Pending signals are taken lowest number first: SIGHUP (1) before
  // SIGTERM (15).
  ASSERT_EQ(pthread_kill(pthread_self(), SIGTERM), 0);
  EXPECT_EQ(WaitForTerminationSignal([&] { ++hangups; }), SIGTERM);
  EXPECT_EQ(hangups, 1);
  // Without a callback a SIGHUP is taken and ignored.
  ASSERT_EQ(pthread_kill(pthread_self(), SIGHUP), 0);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);
  EXPECT_EQ(WaitForTerminationSignal(), SIGINT);
}

}  // namespace
}  // namespace kvserve
