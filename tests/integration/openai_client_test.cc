// The OpenAI-compatible HTTP API (--http_listen) driven by a client nobody
// here wrote: the official `openai` npm package, run by Node on
// tests/integration/openai_node/openai_checks.mjs against the real server
// with the built-in model. The script prints one PASS or FAIL line per
// check; this test wants every check of kChecks to pass and node to exit 0.
//
// The package (the exact version pinned in openai_node/package.json) is
// installed once into BinDir()/openai_node with npm; the install is redone
// only when package.json changes. No lock file is written or kept. Without
// node or npm, or when the install fails (no registry reachable), the test
// is skipped and says why.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {
namespace {

namespace fs = std::filesystem;

// The checks the script must report as passed (it may report more).
constexpr const char* kChecks[] = {
    "models.list",
    "chat.nonstreaming",
    "chat.greedy_repeatable",
    "chat.streaming",
    "chat.stop",
    "error.unknown_model",
    "error.unknown_model_streaming",
    "error.bad_temperature",
    "error.no_messages",
    "sessions",
    "completions",
    "completions.streaming",
    "chat.n_choices",
    "completions.prompt_list",
    "chat.json_object",
    "chat.json_schema",
    "chat.tool_calls",
    "chat.tool_calls.streaming",
    "chat.run_tools",
};

constexpr int kMinNodeMajor = 20;  // package.json's "engines"

// tests/integration/openai_node in the source tree. CMake compiles this file
// by its absolute path, so __FILE__ names the source tree.
fs::path ScriptSourceDir() {
  return fs::path(__FILE__).parent_path() / "openai_node";
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The last `n` characters of `text`, for messages.
std::string Tail(absl::string_view text, size_t n = 4000) {
  return std::string(text.size() > n ? text.substr(text.size() - n) : text);
}

// The absolute path of `tool` on PATH; empty if there is none.
std::string FindOnPath(const std::string& tool) {
  absl::StatusOr<CommandResult> result =
      RunCommand({"/bin/sh", "-c", "command -v \"$TOOL\""}, absl::Seconds(10),
                 {absl::StrCat("TOOL=", tool)});
  if (!result.ok() || !result->status.success()) return "";
  const std::string path(absl::StripAsciiWhitespace(result->out));
  return absl::StartsWith(path, "/") ? path : "";
}

// Holds an exclusive flock on `path` (created if missing) while alive, so
// that two test processes do not install into the cache at once.
class FileLock {
 public:
  explicit FileLock(const fs::path& path)
      : fd_(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~FileLock() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  bool locked() const { return fd_ >= 0; }

 private:
  int fd_;
};

// How preparing the Node side went: a reason to skip, or an error.
struct NodeSetup {
  std::string node;  // the node binary
  fs::path dir;      // the cache: package.json, node_modules, the scripts
  std::string skip;  // non-empty: why the test cannot run here
  std::string error;
};

// Finds node and npm, installs the pinned package into the cache unless the
// cache already holds it, and copies the scripts in beside node_modules (an
// ES module resolves `import 'openai'` from its own directory).
NodeSetup PrepareNode() {
  NodeSetup setup;
  setup.node = FindOnPath("node");
  const std::string npm = FindOnPath("npm");
  if (setup.node.empty()) {
    setup.skip = "node is not on PATH";
    return setup;
  }
  if (npm.empty()) {
    setup.skip = "npm is not on PATH";
    return setup;
  }
  absl::StatusOr<CommandResult> version =
      RunCommand({setup.node, "--version"}, absl::Seconds(30));
  int major = 0;
  const std::string version_text =
      version.ok() ? std::string(absl::StripAsciiWhitespace(version->out)) : "";
  const std::vector<std::string> parts = absl::StrSplit(
      absl::StripPrefix(version_text, "v"), absl::MaxSplits('.', 1));
  if (!absl::SimpleAtoi(parts[0], &major) || major < kMinNodeMajor) {
    setup.skip = absl::StrCat("node ", setup.node, " is '", version_text,
                              "'; the openai package here needs v",
                              kMinNodeMajor, " or later");
    return setup;
  }

  const fs::path source = ScriptSourceDir();
  const std::string package_json = ReadText(source / "package.json");
  if (package_json.empty()) {
    setup.error =
        absl::StrCat("cannot read ", (source / "package.json").string());
    return setup;
  }
  setup.dir = fs::path(BinDir()) / "openai_node";
  std::error_code ec;
  fs::create_directories(setup.dir, ec);
  if (ec) {
    setup.error =
        absl::StrCat("cannot create ", setup.dir.string(), ": ", ec.message());
    return setup;
  }
  FileLock lock(setup.dir / ".lock");
  if (!lock.locked()) {
    setup.error = absl::StrCat("cannot lock ", setup.dir.string(), "/.lock");
    return setup;
  }
  // The stamp is the package.json of the last install that succeeded.
  const fs::path stamp = setup.dir / "installed-package.json";
  if (!fs::exists(setup.dir / "node_modules/openai/package.json") ||
      ReadText(stamp) != package_json) {
    fs::remove(stamp, ec);
    if (!WriteTextFile((setup.dir / "package.json").string(), package_json)) {
      setup.error =
          absl::StrCat("cannot write ", setup.dir.string(), "/package.json");
      return setup;
    }
    const absl::Duration timeout = absl::Minutes(5);
    absl::StatusOr<CommandResult> install = RunCommand(
        {"/bin/sh", "-c",
         "cd \"$DIR\" && exec \"$NPM\" install --no-audit --no-fund "
         "--no-package-lock --fetch-retries=1"},
        timeout,
        {absl::StrCat("DIR=", setup.dir.string()), absl::StrCat("NPM=", npm),
         "npm_config_update_notifier=false"});
    if (!install.ok()) {
      setup.skip = absl::StrCat("npm install did not finish: ",
                                install.status().ToString());
      return setup;
    }
    if (!install->status.success()) {
      setup.skip =
          absl::StrCat("npm install failed (", install->status.ToString(),
                       "; is the registry reachable?):\n", Tail(install->err));
      return setup;
    }
    if (!WriteTextFile(stamp.string(), package_json)) {
      setup.error = absl::StrCat("cannot write ", stamp.string());
      return setup;
    }
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(source)) {
    if (entry.path().extension() != ".mjs") continue;
    fs::copy_file(entry.path(), setup.dir / entry.path().filename(),
                  fs::copy_options::overwrite_existing, ec);
    if (ec) {
      setup.error = absl::StrCat("cannot copy ", entry.path().string(), ": ",
                                 ec.message());
      return setup;
    }
  }
  return setup;
}

TEST(OpenAiClientTest, OfficialNodeClientPassesEveryCheck) {
  const NodeSetup setup = PrepareNode();
  if (!setup.skip.empty()) GTEST_SKIP() << setup.skip;
  ASSERT_TRUE(setup.error.empty()) << setup.error;

  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--http_listen=127.0.0.1:0");
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->http_port();
  ASSERT_GT(port, 0)
      << "no 'HTTP listening on HOST:PORT' in the server's stderr:\n"
      << (*server)->stderr_text();

  absl::StatusOr<CommandResult> run =
      RunCommand({setup.node, (setup.dir / "openai_checks.mjs").string(),
                  absl::StrCat("http://127.0.0.1:", port)},
                 absl::Minutes(5));
  ASSERT_TRUE(run.ok()) << run.status();
  std::fputs(run->out.c_str(), stdout);
  std::fflush(stdout);

  std::set<std::string> passed;
  for (absl::string_view line : absl::StrSplit(run->out, '\n')) {
    if (absl::StartsWith(line, "FAIL ")) ADD_FAILURE() << line;
    if (absl::ConsumePrefix(&line, "PASS ")) {
      passed.emplace(line.substr(0, line.find(' ')));
    }
  }
  for (const char* check : kChecks) {
    EXPECT_EQ(passed.count(check), 1u) << "check " << check << " did not pass";
  }
  EXPECT_TRUE(run->status.success())
      << "node: " << run->status.ToString() << "\nstdout:\n"
      << run->out << "\nstderr:\n"
      << Tail(run->err);
}

}  // namespace
}  // namespace kvserve::testing
