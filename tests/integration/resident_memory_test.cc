// How much memory the real kvserve holds for a model: after one Generate,
// the server's resident set (VmRSS) stays within the file's size plus the KV
// budget plus a fixed allowance for the runtime (oneDNN, OpenMP, gRPC, the
// activations), and GetModelInfo's weight_bytes is the file's tensor bytes.
//
// The models are the benchmarks' synthetic shape (bench/): 8 layers, dim
// 1024, 16 heads over 4 KV heads, hidden 2816, context 4352, in q4_k_m
// (about 55 MB), made with `kvmodel make` in a temp dir; and the same shape
// in f32 with 2 layers (about 92 MB), whose mapped pages the loader releases
// once oneDNN has reordered them into its packed copy.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "client/client.h"
#include "core/model/gguf.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"
#include "tests/testing/sanitizers.h"

namespace kvserve::testing {
namespace {

constexpr int64_t kMiB = 1 << 20;
constexpr int64_t kKvCacheBytes = 16 * kMiB;
// The runtime's own resident memory beside weights and KV: code, oneDNN's
// and OpenMP's buffers, gRPC, activations of one step.
constexpr int64_t kRuntimeAllowanceBytes = 64 * kMiB;
// VmRSS of `pid` in bytes (from /proc/PID/status, which gives kB).
absl::StatusOr<int64_t> ResidentBytes(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "VmRSS:")) continue;
    rest = absl::StripAsciiWhitespace(rest);
    int64_t kb = 0;
    if (!absl::ConsumeSuffix(&rest, " kB") || !absl::SimpleAtoi(rest, &kb)) {
      return absl::InternalError(absl::StrCat("cannot parse '", line, "'"));
    }
    return kb * 1024;
  }
  return absl::NotFoundError(absl::StrCat("no VmRSS for pid ", pid));
}

// ASan's shadow memory, redzones and quarantine of freed blocks (256 MiB by
// default) are resident too, and quantizing the model takes minutes.
constexpr char kSanitizedSkip[] =
    "under AddressSanitizer the server's resident set measures ASan";

struct ModelFile {
  std::string path;
  int64_t file_bytes = 0;
  int64_t tensor_bytes = 0;  // Σ n_bytes of its tensors
};

// `kvmodel make` of the benchmarks' shape with `n_layers` and `dtype`.
ModelFile MakeModel(int n_layers, const std::string& dtype) {
  ModelFile m;
  m.path = absl::StrCat(::testing::TempDir(), "/resident_memory_", getpid(),
                        "_", dtype, ".gguf");
  absl::StatusOr<CommandResult> made =
      RunCommand({BinDir() + "/kvmodel", "make", "--out=" + m.path,
                  absl::StrCat("--n_layers=", n_layers), "--dim=1024",
                  "--n_heads=16", "--n_kv_heads=4", "--hidden_dim=2816",
                  "--context_length=4352", "--dtype=" + dtype},
                 absl::Seconds(60));
  EXPECT_TRUE(made.ok()) << made.status();
  if (!made.ok()) return m;
  EXPECT_TRUE(made->status.success()) << made->err;
  struct stat st;
  if (stat(m.path.c_str(), &st) == 0) m.file_bytes = st.st_size;
  absl::StatusOr<GgufFile> g = GgufFile::Open(m.path);
  EXPECT_TRUE(g.ok()) << g.status();
  if (g.ok()) {
    for (const GgufTensorInfo& t : g->tensors()) m.tensor_bytes += t.n_bytes;
  }
  return m;
}

// Checks the server's resident set against `m`'s file after `what`.
void ExpectResident(const ServerProcess& server, const ModelFile& m,
                    const std::string& what) {
  absl::StatusOr<int64_t> rss = ResidentBytes(server.pid());
  ASSERT_TRUE(rss.ok()) << rss.status();
  const int64_t limit = static_cast<int64_t>(1.05 * m.file_bytes) +
                        kKvCacheBytes + kRuntimeAllowanceBytes;
  std::printf(
      "resident memory %s after %s: VmRSS %.1f MiB, file %.1f MiB (ratio "
      "%.2f), limit %.1f MiB\n",
      m.path.c_str(), what.c_str(), static_cast<double>(*rss) / kMiB,
      static_cast<double>(m.file_bytes) / kMiB,
      static_cast<double>(*rss) / m.file_bytes,
      static_cast<double>(limit) / kMiB);
  EXPECT_LE(*rss, limit) << "VmRSS " << *rss << " bytes after " << what
                         << " for a " << m.file_bytes << "-byte file";
}

// Greedy tokens after a prompt of `prompt_tokens` byte-level tokens.
void Generate(Client& client, int prompt_tokens, int max_tokens) {
  std::vector<int32_t> prompt = {1};  // BOS
  for (int i = 1; i < prompt_tokens; ++i) prompt.push_back(3 + 'a' + i % 26);
  v1::GenerateRequest request = GreedyRequest(max_tokens);
  SetTokens(prompt, request.mutable_prompt());
  absl::StatusOr<Generated> generated = GenerateAll(client, request);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_EQ(generated->ids.size(), static_cast<size_t>(max_tokens));
}

// Serves `m` and checks weight_bytes and the resident set after a Generate
// of 16 tokens whose prefill runs the matrix-vector kernels (4 prompt
// tokens), then after one whose prefill runs the batched path (64 tokens:
// more than the block formats' gemv_max_rows, so dequantized panels and a
// oneDNN sgemm; for f32 oneDNN's matmul at m = 64).
void ExpectResidentWithinFile(const ModelFile& m) {
  ASSERT_GT(m.file_bytes, 0);
  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--model=" + m.path);
  flags.push_back(absl::StrCat("--kv_cache_bytes=", kKvCacheBytes));
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Connect((*server)->grpc_address());
  ASSERT_TRUE(client.ok()) << client.status();

  absl::StatusOr<v1::ModelInfo> info = (*client)->GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_LE(info->weight_bytes(), m.file_bytes);
  EXPECT_NEAR(static_cast<double>(info->weight_bytes()),
              static_cast<double>(m.tensor_bytes), 0.05 * m.tensor_bytes);

  ASSERT_NO_FATAL_FAILURE(Generate(**client, 4, 16));
  ExpectResident(**server, m, "a 4-token prompt and 16 tokens");
  ASSERT_NO_FATAL_FAILURE(Generate(**client, 64, 16));
  ExpectResident(**server, m, "a 64-token prompt and 16 tokens");
}

TEST(ResidentMemoryTest, Q4KMModelIsHeldAsStored) {
  if (kAddressSanitizer) GTEST_SKIP() << kSanitizedSkip;
  const ModelFile m = MakeModel(8, "q4_k_m");
  ExpectResidentWithinFile(m);
  std::remove(m.path.c_str());
}

TEST(ResidentMemoryTest, F32ModelIsNotHeldTwice) {
  if (kAddressSanitizer) GTEST_SKIP() << kSanitizedSkip;
  const ModelFile m = MakeModel(2, "f32");
  ExpectResidentWithinFile(m);
  std::remove(m.path.c_str());
}

}  // namespace
}  // namespace kvserve::testing
