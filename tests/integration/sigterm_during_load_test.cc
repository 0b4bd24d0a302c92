// SIGTERM (or Ctrl-C) while kvserve is still starting (loading its model,
// or starting the engine, which reorders every f32 matrix into oneDNN's
// packed layout) ends it at once, exit 0, saying so, instead of once it has
// started. The model is a 690 MB f32 file (`kvmodel make`, 16 layers of
// dim 1024) whose start takes over a second.
//
// The server is started by hand (fork/exec), not by ServerProcess, which
// waits for the ready line a server stopped while starting never prints.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs kvserve with `flags`, its stderr to `stderr_path`; -1 on failure.
pid_t Spawn(const std::vector<std::string>& flags,
            const std::string& stderr_path) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  const int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || dup2(fd, STDERR_FILENO) < 0) _exit(127);
  std::vector<std::string> args = {BinDir() + "/kvserve"};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

// Waits up to `timeout` for `pid` to end; its wait status, or nullopt.
std::optional<int> WaitFor(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));
  }
}

// One model for the suite (making it takes a second or two).
// A signal, the stderr line after which it is sent, and the phase it
// stops.
struct Case {
  int signal;
  const char* after;
  const char* phase;
};

// One model for the suite (making it takes a few seconds).
class SigtermDuringLoadTest : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    scratch_ = new ScratchDir;
    const std::string model = scratch_->File("big.gguf");
    absl::StatusOr<CommandResult> made = RunCommand(
        {BinDir() + "/kvmodel", "make", "--out=" + model, "--n_layers=16",
         "--dim=1024", "--n_heads=16", "--n_kv_heads=4", "--hidden_dim=2816",
         "--context_length=4352", "--dtype=f32"},
        absl::Seconds(60));
    if (made.ok() && made->status.success()) model_ = new std::string(model);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete scratch_;
  }
  static inline ScratchDir* scratch_ = nullptr;
  static inline std::string* model_ = nullptr;  // null: kvmodel failed
};

TEST_P(SigtermDuringLoadTest, ExitsPromptlyWithZero) {
  const Case c = GetParam();
  ASSERT_NE(model_, nullptr) << "kvmodel make failed";
  const std::string log = scratch_->File(absl::StrCat("stderr_", c.signal));
  const pid_t pid =
      Spawn({"--model=" + *model_, "--threads=1", "--listen=127.0.0.1:0",
             "--metrics_listen=", "--kv_cache_bytes=16000000"},
            log);
  ASSERT_GT(pid, 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!absl::StrContains(ReadAll(log), c.after) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
  }
  ASSERT_TRUE(absl::StrContains(ReadAll(log), c.after)) << ReadAll(log);
  const bool started = absl::StrContains(ReadAll(log), "listening");

  const absl::Time sent = absl::Now();
  ASSERT_EQ(kill(pid, c.signal), 0);
  const std::optional<int> status = WaitFor(pid, absl::Seconds(20));
  const absl::Duration took = absl::Now() - sent;
  if (!status.has_value()) kill(pid, SIGKILL);
  ASSERT_TRUE(status.has_value()) << "still running 20 s after the signal";
  if (started) GTEST_SKIP() << "kvserve started before the signal was sent";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
      << "wait status " << *status;
  EXPECT_LT(took, absl::Seconds(1))
      << "exited " << took << " after signal " << c.signal;
  const std::string text = ReadAll(log);
  EXPECT_TRUE(absl::StrContains(
      text,
      absl::StrCat("signal ", c.signal, " during ", c.phase, ": stopped")))
      << text;
  EXPECT_FALSE(absl::StrContains(text, "listening")) << text;
}

INSTANTIATE_TEST_SUITE_P(
    Signals, SigtermDuringLoadTest,
    ::testing::Values(
        // Sent as the load begins (it maps the file: a tenth of a second).
        Case{SIGTERM, "oneDNN ISA", "the model load"},
        // Sent as the engine starts (the f32 reorder: over a second).
        Case{SIGINT, "KV cache budget", "the engine's start"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.signal == SIGTERM ? "SigtermDuringLoad"
                                                      : "SigintDuringStart");
    });

}  // namespace
}  // namespace kvserve::testing
