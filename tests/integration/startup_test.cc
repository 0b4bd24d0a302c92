// What the real binaries say about themselves before and at start: --help
// and --version of kvserve, kvctl and kvmodel; the CPU and ISA cap
// (KVSERVE_MAX_ISA) as GetModelInfo and kvserve_build_info report them; the
// KV cache budget, default and explicit, and its start-up lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/client.h"
#include "core/util/cpu_features.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"

namespace kvserve::testing {
namespace {

std::string Kvserve() { return BinDir() + "/kvserve"; }

CommandResult RunTool(const std::vector<std::string>& argv) {
  absl::StatusOr<CommandResult> result = RunCommand(argv, absl::Seconds(60));
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : CommandResult{};
}

// "NAME 0.8.0 (commit abc123def456)\n": the version and commit, checked.
struct VersionLine {
  std::string version, commit;
};
VersionLine ParseVersion(const std::string& program, const std::string& out) {
  absl::string_view line = out;
  EXPECT_TRUE(absl::ConsumePrefix(&line, program + " ")) << out;
  EXPECT_TRUE(absl::ConsumeSuffix(&line, ")\n")) << out;
  std::vector<std::string> parts = absl::StrSplit(line, " (commit ");
  EXPECT_EQ(parts.size(), 2u) << out;
  if (parts.size() != 2) return {};
  // MAJOR.MINOR.PATCH
  std::vector<absl::string_view> numbers = absl::StrSplit(parts[0], '.');
  EXPECT_EQ(numbers.size(), 3u) << out;
  for (absl::string_view n : numbers) {
    int value;
    EXPECT_TRUE(absl::SimpleAtoi(n, &value)) << out;
  }
  // 12 hex digits, or "unknown" outside a git checkout.
  const std::string& commit = parts[1];
  EXPECT_TRUE(
      commit == "unknown" ||
      (commit.size() == 12 &&
       commit.find_first_not_of("0123456789abcdef") == std::string::npos))
      << out;
  return {parts[0], commit};
}

TEST(KvserveCommandLineTest, HelpListsTheServerFlagsAndExitsZero) {
  CommandResult result = RunTool({Kvserve(), "--help"});
  EXPECT_EQ(result.status.code, 0) << result.err;
  EXPECT_FALSE(absl::StrContains(result.out, "No flags matched")) << result.out;
  for (const char* flag : {"--kv_cache_bytes", "--model", "--listen",
                           "--max_context", "--kv_dtype"}) {
    EXPECT_TRUE(absl::StrContains(result.out, flag)) << flag << result.out;
  }
  EXPECT_TRUE(absl::StrContains(result.out, "KV cache budget in bytes"))
      << result.out;
  EXPECT_TRUE(absl::StrContains(result.out, "Flags from server/main.cc"))
      << result.out;
  EXPECT_TRUE(absl::StrContains(result.out, "KVSERVE_MAX_ISA")) << result.out;
  // Abseil's own flags only with --helpfull.
  EXPECT_FALSE(absl::StrContains(result.out, "--flagfile")) << result.out;
}

TEST(KvserveCommandLineTest, VersionPrintsVersionAndCommit) {
  CommandResult result = RunTool({Kvserve(), "--version"});
  EXPECT_EQ(result.status.code, 0) << result.err;
  EXPECT_FALSE(absl::StrContains(result.out, "Debug build")) << result.out;
  ParseVersion("kvserve", result.out);
}

TEST(KvserveCommandLineTest, UnknownFlagStillFails) {
  CommandResult result = RunTool({Kvserve(), "--no_such_flag=1"});
  EXPECT_NE(result.status.code, 0);
  EXPECT_TRUE(absl::StrContains(result.err, "no_such_flag")) << result.err;
}

TEST(KvctlCommandLineTest, VersionMatchesTheServers) {
  CommandResult kvctl = RunTool({BinDir() + "/kvctl", "--version"});
  EXPECT_EQ(kvctl.status.code, 0) << kvctl.err;
  const VersionLine client = ParseVersion("kvctl", kvctl.out);
  const VersionLine server =
      ParseVersion("kvserve", RunTool({Kvserve(), "--version"}).out);
  EXPECT_EQ(client.version, server.version);
  EXPECT_EQ(client.commit, server.commit);
}

TEST(KvmodelCommandLineTest, HelpAndVersionExitZero) {
  CommandResult help = RunTool({BinDir() + "/kvmodel", "--help"});
  EXPECT_EQ(help.status.code, 0) << help.err;
  EXPECT_TRUE(absl::StrContains(help.out, "--n_kv_heads")) << help.out;
  EXPECT_TRUE(absl::StrContains(help.out, "Flags from tools/kvmodel.cc"))
      << help.out;
  CommandResult version = RunTool({BinDir() + "/kvmodel", "--version"});
  EXPECT_EQ(version.status.code, 0) << version.err;
  ParseVersion("kvmodel", version.out);
}

// The features `cpu` lists are those the level `isa` names: all of them,
// and none of the next level's.
void ExpectCpuMatchesIsa(const std::string& cpu, const std::string& isa) {
  ASSERT_FALSE(cpu.empty());
  const std::vector<std::string> features = absl::StrSplit(cpu, ',');
  auto has = [&](const char* f) {
    return std::find(features.begin(), features.end(), f) != features.end();
  };
  const bool avx2 = has("avx2") && has("fma") && has("f16c");
  const bool avx512 =
      has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq");
  const bool bf16 = has("avx512_bf16");
  const bool amx = has("amx_tile");
  if (isa == "scalar") {
    EXPECT_EQ(cpu, "scalar");
  } else if (isa == "avx2") {
    EXPECT_TRUE(avx2 && !has("avx512f")) << cpu;
  } else if (isa == "avx512") {
    EXPECT_TRUE(avx2 && avx512 && !bf16) << cpu;
  } else if (isa == "avx512_bf16") {
    EXPECT_TRUE(avx2 && avx512 && bf16 && !amx) << cpu;
  } else {
    EXPECT_EQ(isa, "native");
    EXPECT_TRUE(avx2 && avx512 && bf16 && amx) << cpu;
  }
}

// A kvserve with KVSERVE_MAX_ISA=`cap` in its environment (through
// /usr/bin/env, so this process's environment stays as it is).
absl::StatusOr<std::unique_ptr<ServerProcess>> StartCapped(
    const std::string& cap) {
  ServerProcess::Options options;
  options.binary = "/usr/bin/env";
  options.extra_flags = {"KVSERVE_MAX_ISA=" + cap, Kvserve()};
  for (const std::string& flag : TestServerFlags()) {
    options.extra_flags.push_back(flag);
  }
  return ServerProcess::Start(options);
}

// The first line of /proc/PID/FILE.
std::string ProcLine(pid_t pid, const char* file) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/", file));
  std::string line;
  std::getline(in, line);
  return line;
}

// kvserve re-executes itself to default OMP_WAIT_POLICY to passive; the
// re-executed process was named "exe" (exec of /proc/self/exe), so ps, top,
// pgrep and pidof (README's `kill -HUP $(pidof kvserve)`) missed it.
TEST(ProcessNameTest, IsKvserveAfterTheWaitPolicyReexecution) {
  ServerProcess::Options options;
  options.binary = "/usr/bin/env";
  options.extra_flags = {"-u", "OMP_WAIT_POLICY", Kvserve()};
  for (const std::string& flag : TestServerFlags()) {
    options.extra_flags.push_back(flag);
  }
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  // It did re-execute: the policy is in its environment now.
  std::ifstream environ(absl::StrCat("/proc/", (*server)->pid(), "/environ"));
  const std::string env((std::istreambuf_iterator<char>(environ)),
                        std::istreambuf_iterator<char>());
  EXPECT_TRUE(
      absl::StrContains(env, std::string("OMP_WAIT_POLICY=passive\0",
                                         sizeof("OMP_WAIT_POLICY=passive"))));
  EXPECT_EQ(ProcLine((*server)->pid(), "comm"), "kvserve");
  CommandResult pidof = RunTool({"/bin/sh", "-c", "pidof kvserve"});
  EXPECT_TRUE(absl::StrContains(absl::StrCat(" ", pidof.out),
                                absl::StrCat(" ", (*server)->pid())))
      << "pidof kvserve: " << pidof.out;
}

// gRPC (SO_REUSEPORT by default) and the HTTP server (cpp-httplib's, as it
// was, set it too) let a second kvserve start on a running one's ports, and
// the kernel split the connections, and so the sessions, between them.
// Each port refuses to start when taken, naming the address.
TEST(PortTest, ASecondServerOnATakenPortRefusesToStart) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> first =
      ServerProcess::Start({"--threads=1", "--http_listen=127.0.0.1:0"});
  ASSERT_TRUE(first.ok()) << first.status();
  const int http = (*first)->http_port();
  ASSERT_GT(http, 0);
  const std::string grpc_taken = (*first)->grpc_address();
  const std::string http_taken = absl::StrCat("127.0.0.1:", http);

  CommandResult grpc = RunTool({Kvserve(), "--threads=1",
                                "--listen=" + grpc_taken, "--metrics_listen="});
  EXPECT_TRUE(grpc.status.exited) << grpc.status.ToString();
  EXPECT_NE(grpc.status.code, 0);
  EXPECT_TRUE(absl::StrContains(grpc.err, "cannot listen on " + grpc_taken))
      << grpc.err;
  EXPECT_FALSE(absl::StrContains(grpc.err, "listening grpc=")) << grpc.err;

  CommandResult http_run =
      RunTool({Kvserve(), "--threads=1", "--listen=127.0.0.1:0",
               "--metrics_listen=", "--http_listen=" + http_taken});
  EXPECT_TRUE(http_run.status.exited) << http_run.status.ToString();
  EXPECT_NE(http_run.status.code, 0);
  EXPECT_TRUE(absl::StrContains(http_run.err, "--http_listen")) << http_run.err;
  EXPECT_TRUE(absl::StrContains(http_run.err, "cannot listen on " + http_taken))
      << http_run.err;
  EXPECT_FALSE(absl::StrContains(http_run.err, "listening grpc="))
      << http_run.err;
  EXPECT_TRUE((*first)->running());
}

v1::ModelInfo GetInfo(const ServerProcess& server) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect(server.grpc_address());
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  absl::StatusOr<v1::ModelInfo> info = (*client)->GetModelInfo();
  EXPECT_TRUE(info.ok()) << info.status();
  return info.ok() ? *info : v1::ModelInfo();
}

TEST(CpuTest, ModelInfoReportsTheCpuAndIsaAndStartUpPrintsThem) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(TestServerFlags());
  ASSERT_TRUE(server.ok()) << server.status();
  const v1::ModelInfo info = GetInfo(**server);
  ExpectCpuMatchesIsa(info.cpu(), info.isa());
  // The same machine and environment as this test: the same answer.
  EXPECT_EQ(info.isa(), std::string(IsaLevelName(EffectiveIsa())));
  EXPECT_EQ(info.cpu(), CpuFeatureString(Cpu()));
  EXPECT_TRUE(absl::StrContains((*server)->stderr_text(),
                                "kvserve: " + CpuSummary() + "; oneDNN ISA "))
      << (*server)->stderr_text();
}

TEST(CpuTest, MaxIsaAvx2CapsWhatTheServerUses) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server = StartCapped("avx2");
  ASSERT_TRUE(server.ok()) << server.status();
  const v1::ModelInfo info = GetInfo(**server);
  const IsaLevel expected = std::min(DetectedIsa(), IsaLevel::kAvx2);
  EXPECT_EQ(info.isa(), std::string(IsaLevelName(expected)));
  EXPECT_FALSE(absl::StrContains(info.cpu(), "avx512")) << info.cpu();
  EXPECT_FALSE(absl::StrContains(info.cpu(), "amx")) << info.cpu();
  ExpectCpuMatchesIsa(info.cpu(), info.isa());
  EXPECT_TRUE(absl::StrContains(
      (*server)->stderr_text(),
      absl::StrCat("effective ", info.isa(), " (", info.cpu(), ")")))
      << (*server)->stderr_text();

  // kvserve_build_info says the same.
  absl::StatusOr<std::string> metrics =
      HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(MetricSum(*metrics, "kvserve_build_info",
                      {absl::StrCat("isa=\"", info.isa(), "\"")}),
            1)
      << *metrics;
}

TEST(CpuTest, BogusMaxIsaRefusesToStart) {
  CommandResult result =
      RunTool({"/usr/bin/env", "KVSERVE_MAX_ISA=bogus", Kvserve(),
               "--threads=1", "--listen=127.0.0.1:0", "--metrics_listen="});
  EXPECT_TRUE(result.status.exited) << result.status.ToString();
  EXPECT_NE(result.status.code, 0);
  EXPECT_TRUE(absl::StrContains(result.err, "KVSERVE_MAX_ISA")) << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "bogus")) << result.err;
  EXPECT_FALSE(absl::StrContains(result.err, "listening")) << result.err;
}

// --numerics=llama (llama.cpp's attention to the bit) needs an f32 KV
// cache; a bf16 one, or a value that is neither auto nor llama, is refused
// at start naming the flags.
TEST(NumericsFlagTest, LlamaNeedsAnF32CacheAndBogusValuesAreRefused) {
  CommandResult bf16 =
      RunTool({Kvserve(), "--threads=1", "--listen=127.0.0.1:0",
               "--metrics_listen=", "--numerics=llama", "--kv_dtype=bf16"});
  EXPECT_TRUE(bf16.status.exited) << bf16.status.ToString();
  EXPECT_NE(bf16.status.code, 0);
  EXPECT_TRUE(absl::StrContains(bf16.err, "--numerics=llama")) << bf16.err;
  EXPECT_TRUE(absl::StrContains(bf16.err, "--kv_dtype=bf16")) << bf16.err;
  EXPECT_FALSE(absl::StrContains(bf16.err, "listening")) << bf16.err;
  CommandResult bogus =
      RunTool({Kvserve(), "--threads=1", "--listen=127.0.0.1:0",
               "--metrics_listen=", "--numerics=exact"});
  EXPECT_NE(bogus.status.code, 0);
  EXPECT_TRUE(absl::StrContains(bogus.err, "--numerics=exact")) << bogus.err;
}

// q8_0 and q4_0 KV caches keep blocks of 32 elements of a head: a model
// whose head_dim is not a multiple of 32 (stories260K's is 8) is refused at
// start naming the type and the head_dim; a type that does not exist too.
TEST(KvDtypeFlagTest, QuantizedCachesNeedWholeBlocksAndBogusTypesAreRefused) {
  for (const std::string dtype : {"q8_0", "q4_0"}) {
    CommandResult r = RunTool(
        {Kvserve(), "--threads=1", "--listen=127.0.0.1:0", "--metrics_listen=",
         "--model=" + SharedDir() + "/models/stories260K.gguf",
         "--kv_dtype=" + dtype});
    EXPECT_TRUE(r.status.exited) << r.status.ToString();
    EXPECT_NE(r.status.code, 0);
    EXPECT_TRUE(absl::StrContains(r.err, "head_dim 8")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, dtype)) << r.err;
    EXPECT_FALSE(absl::StrContains(r.err, "listening")) << r.err;
  }
  CommandResult bogus =
      RunTool({Kvserve(), "--threads=1", "--listen=127.0.0.1:0",
               "--metrics_listen=", "--kv_dtype=q5_0"});
  EXPECT_NE(bogus.status.code, 0);
  EXPECT_TRUE(absl::StrContains(bogus.err, "--kv_dtype")) << bogus.err;
  EXPECT_TRUE(absl::StrContains(bogus.err, "q8_0 or q4_0")) << bogus.err;
}

TEST(BuildInfoTest, MetricHasVersionCommitAndIsa) {
  const VersionLine version =
      ParseVersion("kvserve", RunTool({Kvserve(), "--version"}).out);
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(TestServerFlags());
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::string> metrics =
      HttpGet((*server)->metrics_port(), "/metrics");
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_TRUE(HasMetricFamily(*metrics, "kvserve_build_info")) << *metrics;
  EXPECT_EQ(MetricSum(*metrics, "kvserve_build_info",
                      {absl::StrCat("version=\"", version.version, "\""),
                       absl::StrCat("commit=\"", version.commit, "\""),
                       absl::StrCat("isa=\"",
                                    std::string(IsaLevelName(EffectiveIsa())),
                                    "\"")}),
            1)
      << *metrics;
}

// The line of `log` that contains `part`; empty when none does.
std::string LineWith(const std::string& log, absl::string_view part) {
  for (absl::string_view line : absl::StrSplit(log, '\n')) {
    if (absl::StrContains(line, part)) return std::string(line);
  }
  return "";
}

// The integer after the first `prefix` in `text`; -1 when absent.
int64_t NumberAfter(const std::string& text, absl::string_view prefix) {
  const size_t at = text.find(std::string(prefix));
  if (at == std::string::npos) return -1;
  return std::strtoll(text.c_str() + at + prefix.size(), nullptr, 10);
}

TEST(KvBudgetTest, DefaultBudgetIsPrintedAndIsWhatThePoolHas) {
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(TestServerFlags());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string log = (*server)->stderr_text();
  const std::string line = LineWith(log, "kvserve: KV cache budget ");
  ASSERT_FALSE(line.empty()) << log;
  EXPECT_TRUE(absl::StrContains(line, "--kv_cache_bytes sets it")) << line;
  const v1::ModelInfo info = GetInfo(**server);
  // The built-in model is small: 8 full contexts fit on any test machine.
  EXPECT_TRUE(absl::StrContains(
      line, absl::StrCat("8 full contexts of ", info.context_length())))
      << line;
  const int64_t printed_bytes = NumberAfter(line, " (");
  EXPECT_EQ(printed_bytes,
            8 * int64_t{info.context_length()} * info.kv_bytes_per_token())
      << line;
  EXPECT_EQ(info.kv_cache_capacity_bytes(), printed_bytes);
  EXPECT_EQ(NumberAfter(line, "bytes, "), 8 * int64_t{info.context_length()})
      << line;
  EXPECT_FALSE(absl::StrContains(log, "warning")) << log;
}

TEST(KvBudgetTest, TinyExplicitBudgetStartsWithAWarning) {
  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--kv_block_tokens=16");
  flags.push_back("--kv_cache_bytes=100000");  // a few blocks of 16 tokens
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  const v1::ModelInfo info = GetInfo(**server);
  const int64_t block_bytes = 16 * info.kv_bytes_per_token();
  ASSERT_GT(block_bytes, 0);
  ASSERT_LE(block_bytes, 100000) << "the budget must hold one block";
  // The pool keeps whole blocks only.
  EXPECT_EQ(info.kv_cache_capacity_bytes(), 100000 / block_bytes * block_bytes);
  const int64_t tokens =
      info.kv_cache_capacity_bytes() / info.kv_bytes_per_token();
  ASSERT_LT(tokens, info.context_length());
  const std::string log = (*server)->stderr_text();
  EXPECT_TRUE(absl::StrContains(
      log, absl::StrCat("kvserve: warning: the KV cache holds ", tokens,
                        " tokens, less than one full context of ",
                        info.context_length())))
      << log;
  EXPECT_TRUE(absl::StrContains(LineWith(log, "kvserve: KV cache budget "),
                                "(100000 bytes,"))
      << log;
}

TEST(KvBudgetTest, LlamaSizedKvStartsWithDefaultFlags) {
  // The KV geometry of Llama-3.1-8B (32 layers, 8 KV heads, head_dim 128,
  // 128k context: 262144 bytes per token in f32, 256 GiB for 8 contexts)
  // with thin matrices, so the file stays small.
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/llama_kv_shape_", getpid(), ".gguf");
  CommandResult made =
      RunTool({BinDir() + "/kvmodel", "make", "--out=" + path, "--n_layers=32",
               "--dim=1024", "--n_heads=8", "--n_kv_heads=8", "--hidden_dim=32",
               "--context_length=131072", "--dtype=bf16"});
  ASSERT_EQ(made.status.code, 0) << made.err;
  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--model=" + path);
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(flags);
  std::remove(path.c_str());
  ASSERT_TRUE(server.ok()) << server.status();
  const v1::ModelInfo info = GetInfo(**server);
  EXPECT_EQ(info.kv_bytes_per_token(), 262144);
  EXPECT_EQ(info.context_length(), 131072);
  EXPECT_LE(info.kv_cache_capacity_bytes(), int64_t{274877906944});
  // At least one block for each of the 64 sequences --max_running allows.
  EXPECT_GE(info.kv_cache_capacity_bytes(), int64_t{64} * 128 * 262144);
  const std::string line =
      LineWith((*server)->stderr_text(), "kvserve: KV cache budget ");
  EXPECT_FALSE(line.empty()) << (*server)->stderr_text();
  EXPECT_GE(NumberAfter(line, " ("), info.kv_cache_capacity_bytes()) << line;
}

TEST(KvBudgetTest, UnallocatableBudgetNamesTheFlags) {
  // 256 TiB, more than x86-64's 128 TiB of user address space, so the
  // allocation fails whatever the overcommit policy; in large blocks, so
  // the pool's block lists stay small.
  CommandResult result =
      RunTool({Kvserve(), "--threads=1", "--listen=127.0.0.1:0",
               "--metrics_listen=", "--kv_block_tokens=65536",
               "--kv_cache_bytes=281474976710656"});
  EXPECT_NE(result.status.code, 0);
  for (const char* part :
       {"RESOURCE_EXHAUSTED", "cannot allocate", "bytes per token",
        "--kv_cache_bytes", "--max_context", "--kv_dtype"}) {
    EXPECT_TRUE(absl::StrContains(result.err, part)) << part << result.err;
  }
}

}  // namespace
}  // namespace kvserve::testing
