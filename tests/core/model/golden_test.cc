// stories260K (a real trained GQA Llama) against the reference
// implementation's greedy output and logits in ../shared/golden.
#include <cmath>
#include <cstdio>
#include <regex>

#include "core/model/loader.h"
#include "core/model/model.h"
#include "gtest/gtest.h"
#include "tests/testing/golden_json.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

using ::kvserve::testing::JsonIntArray;
using ::kvserve::testing::ReadWholeFile;
using ::kvserve::testing::SharedDir;

struct GoldenLogit {
  int pos;
  int id;
  double logit;
};

struct Golden {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  std::vector<GoldenLogit> logits;
};

std::optional<Golden> ReadGolden() {
  auto json = ReadWholeFile(SharedDir() + "/golden/stories260K_greedy.json");
  if (!json) return std::nullopt;
  Golden g;
  g.prompt = JsonIntArray(*json, "prompt_token_ids");
  g.generated = JsonIntArray(*json, "generated_token_ids");
  // "pos": P ... then entries {"id": I, "piece": ..., "logit": L}.
  const std::string tail = json->substr(json->find("first_logits_top5"));
  std::regex item(
      R"re("pos":\s*(\d+)|"id":\s*(\d+)[^}]*"logit":\s*([-0-9.eE]+))re");
  int pos = -1;
  for (auto it = std::sregex_iterator(tail.begin(), tail.end(), item);
       it != std::sregex_iterator(); ++it) {
    if ((*it)[1].matched) {
      pos = std::stoi((*it)[1]);
    } else {
      g.logits.push_back({pos, std::stoi((*it)[2]), std::stod((*it)[3])});
    }
  }
  return g;
}

struct Case {
  const char* name;
  const char* model;
  const char* tokenizer;
  const char* weight_dtype;
  DType kv_dtype;
};

// Names the case in test listings (ctest shows parameters).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class GoldenTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    auto golden = ReadGolden();
    if (!golden) GTEST_SKIP() << "no " << SharedDir() << "/golden: skipped";
    golden_ = *golden;
    ASSERT_EQ(golden_.prompt.size(), 5u);
    ASSERT_EQ(golden_.generated.size(), 64u);
    ASSERT_EQ(golden_.logits.size(), 15u);
    const Case& c = GetParam();
    LoadOptions options{
        .model_path = SharedDir() + "/models/" + c.model,
        .tokenizer_path =
            c.tokenizer[0] ? SharedDir() + "/models/" + c.tokenizer : "",
        .weight_dtype = c.weight_dtype};
    auto loaded = LoadModel(options);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    model_files_ = *std::move(loaded);
    const ModelConfig& cfg = model_files_.weights->config;
    pool_ =
        *BlockPool::Create({.n_layers = cfg.n_layers,
                            .n_kv_heads = cfg.n_kv_heads,
                            .head_dim = cfg.head_dim,
                            .block_tokens = 16,
                            .dtype = c.kv_dtype,
                            .capacity_bytes = cfg.context_length *
                                              cfg.KvBytesPerToken(c.kv_dtype)});
    auto model = Model::Create(model_files_.weights.get(), pool_.get());
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *std::move(model);
  }

  // Greedy continuation of the golden prompt; logits_at[pos] kept.
  std::vector<int32_t> Greedy(int n,
                              std::map<int, std::vector<float>>* logits_at) {
    BlockTable kv(pool_.get());
    std::vector<int32_t> tokens = golden_.prompt;
    std::vector<int32_t> out;
    int64_t done = 0;
    while (static_cast<int>(out.size()) < n) {
      const int64_t end = tokens.size();
      EXPECT_TRUE(kv.Extend(end).ok());
      SeqChunk chunk{&kv, done,
                     absl::MakeConstSpan(tokens).subspan(done, end - done),
                     true};
      auto logits = model_->Forward({chunk});
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (!logits.ok()) return out;
      (*logits_at)[end - 1] =
          std::vector<float>(logits->begin(), logits->end());
      const int32_t next =
          std::max_element(logits->begin(), logits->end()) - logits->begin();
      out.push_back(next);
      tokens.push_back(next);
      done = end;
    }
    return out;
  }

  Golden golden_;
  LoadedModel model_files_;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Model> model_;
};

TEST_P(GoldenTest, EncodesThePromptToTheGoldenIds) {
  EXPECT_EQ(model_files_.tokenizer->Encode("Once upon a time", {}),
            golden_.prompt);
}

TEST_P(GoldenTest, GreedyTokensAndLogitsMatchTheReference) {
  const Case& c = GetParam();
  const bool exact =
      std::string(c.weight_dtype) != "bf16" && c.kv_dtype == DType::kF32;
  std::map<int, std::vector<float>> logits_at;
  const int n = exact ? 64 : 16;
  std::vector<int32_t> got = Greedy(n, &logits_at);
  std::vector<int32_t> want(golden_.generated.begin(),
                            golden_.generated.begin() + n);
  EXPECT_EQ(got, want);
  double max_diff = 0;
  for (const GoldenLogit& g : golden_.logits) {
    ASSERT_TRUE(logits_at.contains(g.pos)) << g.pos;
    max_diff = std::max(max_diff, std::abs(logits_at[g.pos][g.id] - g.logit));
  }
  std::printf("%s: max |logit - golden| over the golden top-5s = %.3g\n",
              c.name, max_diff);
  EXPECT_LT(max_diff, exact ? 1e-4 : 0.15);
}

INSTANTIATE_TEST_SUITE_P(
    Stories260K, GoldenTest,
    ::testing::Values(
        Case{"gguf_f32", "stories260K.gguf", "", "auto", DType::kF32},
        Case{"llama2c_f32", "stories260K.bin", "tok512.bin", "auto",
             DType::kF32},
        Case{"gguf_kv_bf16", "stories260K.gguf", "", "auto", DType::kBF16},
        Case{"gguf_weights_bf16", "stories260K.gguf", "", "bf16", DType::kF32},
        Case{"llama2c_all_bf16", "stories260K.bin", "tok512.bin", "bf16",
             DType::kBF16}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvserve
