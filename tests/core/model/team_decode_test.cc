// Decode steps run as one team (Model::DecodeInTeam: one parallel region,
// spin barriers) compute exactly what the per-operation path computes, for
// block-format weights, batches of several sequences and any positions.
#include <omp.h>

#include <memory>
#include <string>
#include <vector>

#include "core/kv/block_table.h"
#include "core/model/gguf_random_model.h"
#include "core/model/loader.h"
#include "core/model/model.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

class TeamDecodeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TeamDecodeTest, SameLogitsAsThePerOperationPath) {
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "needs 2 OpenMP threads";
  RandomModelOptions ro;
  ro.n_layers = 2;
  ro.dim = 256;
  ro.n_heads = 8;
  ro.n_kv_heads = 2;
  ro.hidden_dim = 512;
  ro.context_length = 256;
  ro.dtype = GetParam();
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(ro);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string bytes = (*w)->Serialize();
  absl::StatusOr<LoadedModel> files = LoadModelFromFile(
      MappedFile::FromBytes(bytes, "team.gguf"), LoadOptions{});
  ASSERT_TRUE(files.ok()) << files.status();
  const ModelConfig& c = files->weights->config;
  std::vector<std::vector<float>> logits[2];
  for (int team = 0; team < 2; ++team) {
    std::unique_ptr<BlockPool> pool = *BlockPool::Create(
        {.n_layers = c.n_layers,
         .n_kv_heads = c.n_kv_heads,
         .head_dim = c.head_dim,
         .block_tokens = 16,
         .capacity_bytes = 3 * 256 * c.KvBytesPerToken(DType::kF32)});
    std::unique_ptr<Model> model = *Model::Create(
        files->weights.get(), pool.get(), {.decode_in_team = team == 1});
    // Three sequences with prompts of 5, 17 and 40 tokens, then 6 steps
    // decoding all three together (the second one wants no logits at the
    // third step).
    std::vector<BlockTable> kv;
    kv.reserve(3);
    std::vector<std::vector<int32_t>> tokens = {{1, 5, 9, 13, 17},
                                                std::vector<int32_t>(17, 42),
                                                std::vector<int32_t>(40, 7)};
    for (int s = 0; s < 3; ++s) {
      kv.emplace_back(pool.get());
      ASSERT_TRUE(kv.back().Extend(tokens[s].size()).ok());
      const SeqChunk chunk{&kv.back(), 0, tokens[s], true};
      ASSERT_TRUE(model->Forward({chunk}).ok());
    }
    for (int step = 0; step < 6; ++step) {
      std::vector<SeqChunk> chunks;
      std::vector<int32_t> next(3);
      for (int s = 0; s < 3; ++s) {
        next[s] = (step * 31 + s * 7) % c.vocab_size;
        const int64_t pos = tokens[s].size();
        ASSERT_TRUE(kv[s].Extend(pos + 1).ok());
        chunks.push_back(SeqChunk{&kv[s], pos, absl::MakeConstSpan(&next[s], 1),
                                  !(step == 2 && s == 1)});
      }
      absl::StatusOr<absl::Span<const float>> l = model->Forward(chunks);
      ASSERT_TRUE(l.ok()) << l.status();
      logits[team].emplace_back(l->begin(), l->end());
      for (int s = 0; s < 3; ++s) tokens[s].push_back(next[s]);
    }
  }
  ASSERT_EQ(logits[0].size(), logits[1].size());
  for (size_t i = 0; i < logits[0].size(); ++i) {
    EXPECT_EQ(logits[0][i], logits[1][i]) << "step " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, TeamDecodeTest,
                         ::testing::Values("q8_0", "q4_k_m", "f16", "bf16"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvserve
