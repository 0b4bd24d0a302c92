// llama.cpp's byte-level BPE reference suites (tests/testing/vocab_suite.h)
// through the path a user takes: `kvmodel make --vocab_from=VOCAB.gguf`, the
// real kvserve serving that model on loopback, and for every case
// `kvctl tokenize --add_bos --json -- TEXT`; with its leading BOS dropped,
// the ids must be the reference's exactly.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/gguf.h"
#include "core/model/gguf_vocab.h"
#include "tests/integration/integration_util.h"
#include "tests/testing/paths.h"
#include "tests/testing/server_process.h"
#include "tests/testing/vocab_suite.h"

namespace kvserve::testing {
namespace {

class VocabSuiteServingTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabSuiteServingTest, KvctlTokenizeMatchesTheReference) {
  const std::string vocab_path = VocabSuiteGguf(GetParam());
  std::optional<std::vector<VocabCase>> cases = ReadVocabSuite(vocab_path);
  if (!cases.has_value()) GTEST_SKIP() << "no suite at " << vocab_path;
  absl::StatusOr<GgufFile> gguf = GgufFile::Open(vocab_path);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  absl::StatusOr<Vocab> vocab = VocabFromGguf(*gguf);
  ASSERT_TRUE(vocab.ok()) << vocab.status();

  // A model as small as the vocabulary allows: tokenizing never runs it.
  ScratchDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string model = dir.File("model.gguf");
  absl::StatusOr<CommandResult> made = RunCommand(
      {BinDir() + "/kvmodel", "make", "--out=" + model,
       "--vocab_from=" + vocab_path, "--n_layers=1", "--dim=32", "--n_heads=2",
       "--n_kv_heads=1", "--hidden_dim=64", "--context_length=256"},
      absl::Seconds(120));
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_TRUE(made->status.success()) << made->err;

  std::vector<std::string> flags = TestServerFlags();
  flags.push_back("--model=" + model);
  absl::StatusOr<std::unique_ptr<ServerProcess>> server =
      ServerProcess::Start(flags);
  ASSERT_TRUE(server.ok()) << server.status();

  // One kvctl per case, four at a time (each mostly waits on its process
  // start and its RPC).
  std::vector<absl::StatusOr<CommandResult>> runs(
      cases->size(), absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < cases->size();) {
        runs[i] = RunCommand(
            {BinDir() + "/kvctl", "--addr=" + (*server)->grpc_address(),
             "tokenize", "--add_bos", "--json", "--", (*cases)[i].text},
            absl::Seconds(30));
      }
    });
  }
  for (std::thread& w : workers) w.join();

  size_t passed = 0;
  for (size_t i = 0; i < cases->size(); ++i) {
    const VocabCase& c = (*cases)[i];
    const absl::StatusOr<CommandResult>& run = runs[i];
    ASSERT_TRUE(run.ok()) << run.status();
    ASSERT_TRUE(run->status.success())
        << "text \"" << c.text << "\": " << run->err;
    std::optional<Json> json = JsonParser::Parse(run->out);
    ASSERT_TRUE(json.has_value() && json->is_object()) << run->out;
    std::vector<int32_t> ids;
    if (json->has("token_ids")) {  // proto3 JSON leaves an empty list out
      for (const Json& id : (*json)["token_ids"].array()) {
        ids.push_back(static_cast<int32_t>(id.integer()));
      }
    }
    if (vocab->add_bos && vocab->bos_id >= 0) {
      ASSERT_FALSE(ids.empty()) << "no BOS for \"" << c.text << "\"";
      EXPECT_EQ(ids[0], vocab->bos_id);
    }
    if (!ids.empty() && ids[0] == vocab->bos_id) ids.erase(ids.begin());
    EXPECT_EQ(ids, c.ids) << "text \"" << c.text << "\"";
    if (ids == c.ids) ++passed;
  }
  std::printf("[ suite    ] %s via kvctl: %zu/%zu cases match\n",
              GetParam().c_str(), passed, cases->size());
  RecordProperty("passed", static_cast<int>(passed));
  RecordProperty("cases", static_cast<int>(cases->size()));
}

INSTANTIATE_TEST_SUITE_P(Vocabs, VocabSuiteServingTest,
                         ::testing::ValuesIn(VocabSuiteNames()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace kvserve::testing
