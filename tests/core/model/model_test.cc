// The batched forward pass against the plain double-precision reference
// (tests/testing/greedy_reference.h), written from the math.
#include "core/model/model.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/model/builtin_model.h"
#include "core/model/gguf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/greedy_reference.h"

namespace kvserve {
namespace {

RandomModelOptions SmallModel() {
  RandomModelOptions o;
  o.n_layers = 2;
  o.dim = 64;
  o.hidden_dim = 96;
  o.n_heads = 8;
  o.n_kv_heads = 2;
  o.context_length = 128;
  o.seed = 7;
  return o;
}

using testing::ReferenceLogits;
using testing::RelativeError;

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = LoadRandomModel(SmallModel());
    ASSERT_TRUE(model.ok()) << model.status();
    model_files_ = *std::move(model);
    weights_ = model_files_.weights.get();
    const ModelConfig& c = weights_->config;
    BlockPoolOptions o{
        .n_layers = c.n_layers,
        .n_kv_heads = c.n_kv_heads,
        .head_dim = c.head_dim,
        .block_tokens = 4,
        .dtype = DType::kF32,
        .capacity_bytes = 64 * c.KvBytesPerToken(DType::kF32) * 4};
    pool_ = *BlockPool::Create(o);
    model_ = *Model::Create(weights_, pool_.get());
    tokens_ = {1, 17, 3, 42, 8, 8, 23, 49, 0, 5, 11, 30, 2};
    reference_ = ReferenceLogits(*weights_, tokens_);
  }

  // Feeds tokens_ to a fresh sequence in chunks of `chunk` and checks the
  // logits after every chunk.
  void RunInChunks(int chunk) {
    BlockTable kv(pool_.get());
    const int vocab = weights_->config.vocab_size;
    for (size_t start = 0; start < tokens_.size(); start += chunk) {
      const size_t n = std::min<size_t>(chunk, tokens_.size() - start);
      ASSERT_TRUE(kv.Extend(start + n).ok());
      SeqChunk c{&kv, static_cast<int64_t>(start),
                 absl::MakeConstSpan(tokens_).subspan(start, n), true};
      auto logits = model_->Forward({c});
      ASSERT_TRUE(logits.ok()) << logits.status();
      ASSERT_EQ(logits->size(), static_cast<size_t>(vocab));
      EXPECT_LT(RelativeError(*logits, reference_[start + n - 1]), 1e-5)
          << "chunk " << chunk << " ending at " << start + n;
    }
  }

  LoadedModel model_files_;
  const ModelWeights* weights_ = nullptr;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<Model> model_;
  std::vector<int32_t> tokens_;
  std::vector<std::vector<double>> reference_;
};

TEST_F(ModelTest, TokenByTokenDecodeMatchesReference) { RunInChunks(1); }
TEST_F(ModelTest, ChunkedPrefillMatchesReference) { RunInChunks(5); }
TEST_F(ModelTest, WholePromptMatchesReference) { RunInChunks(13); }

TEST_F(ModelTest, BatchOfMixedChunksMatchesEachAlone) {
  // Sequence A prefills 7 tokens while B decodes its 4th token.
  BlockTable a(pool_.get()), b(pool_.get());
  ASSERT_TRUE(b.Extend(3).ok());
  SeqChunk b_prefill{&b, 0, absl::MakeConstSpan(tokens_).subspan(0, 3), false};
  ASSERT_TRUE(model_->Forward({b_prefill}).ok());
  ASSERT_TRUE(a.Extend(7).ok());
  ASSERT_TRUE(b.Extend(4).ok());
  std::vector<SeqChunk> step = {
      {&a, 0, absl::MakeConstSpan(tokens_).subspan(0, 7), true},
      {&b, 3, absl::MakeConstSpan(tokens_).subspan(3, 1), true}};
  auto logits = model_->Forward(step);
  ASSERT_TRUE(logits.ok());
  const int vocab = weights_->config.vocab_size;
  EXPECT_LT(RelativeError(logits->subspan(0, vocab), reference_[6]), 1e-5);
  EXPECT_LT(RelativeError(logits->subspan(vocab, vocab), reference_[3]), 1e-5);
}

TEST_F(ModelTest, RejectsTokensOutsideTheVocabulary) {
  BlockTable kv(pool_.get());
  ASSERT_TRUE(kv.Extend(1).ok());
  std::vector<int32_t> bad = {weights_->config.vocab_size};
  auto logits = model_->Forward({SeqChunk{&kv, 0, bad, true}});
  EXPECT_EQ(logits.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BuiltinModelTest, IsGqaAndDeterministic) {
  auto a = LoadRandomModel(BuiltinModelOptions());
  auto b = LoadRandomModel(BuiltinModelOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  const ModelConfig& c = a->weights->config;
  ASSERT_TRUE(c.Validate().ok());
  EXPECT_LT(c.n_kv_heads, c.n_heads);
  EXPECT_EQ(c.vocab_size, 259);
  EXPECT_EQ(a->weights->fingerprint, b->weights->fingerprint);
  const WeightTensor& w = a->weights->layers[3].w_down;
  EXPECT_EQ(0,
            std::memcmp(w.data, b->weights->layers[3].w_down.data, w.bytes()));
}
// Weights that turn non-finite after the load (the file changed under its
// mapping) make Forward fail, naming the position, instead of returning
// NaN logits; the sequences without them still compute.
TEST(ModelNonFiniteTest, ForwardFailsOnNonFiniteLogits) {
  auto writer = MakeRandomModel(SmallModel());
  ASSERT_TRUE(writer.ok()) << writer.status();
  std::string bytes = (*writer)->Serialize();
  auto files =
      LoadModelFromFile(MappedFile::FromBytes(bytes, "small.gguf"), {});
  ASSERT_TRUE(files.ok()) << files.status();
  const ModelConfig& c = files->weights->config;
  auto pool = BlockPool::Create(
      {.n_layers = c.n_layers,
       .n_kv_heads = c.n_kv_heads,
       .head_dim = c.head_dim,
       .block_tokens = 4,
       .capacity_bytes = 64 * c.KvBytesPerToken(DType::kF32) * 4});
  ASSERT_TRUE(pool.ok());
  auto model = Model::Create(files->weights.get(), pool->get());
  ASSERT_TRUE(model.ok()) << model.status();

  // Token 7's embedding row becomes NaN in the bytes the weights point to.
  auto gguf = GgufFile::Parse(MappedFile::FromBytes(bytes, "small.gguf"));
  ASSERT_TRUE(gguf.ok());
  const GgufTensorInfo* embd = gguf->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  ASSERT_EQ(embd->type, static_cast<uint32_t>(GgmlType::kF32));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&bytes[embd->file_offset + 7 * c.dim * sizeof(float)], &nan,
              sizeof(nan));

  const std::vector<int32_t> clean = {1, 2, 3}, poisoned = {5, 7};
  const std::vector<int32_t> one_clean = {4}, one_poisoned = {7};
  // A prefill step, then a decode step of single tokens (the team path
  // when there are threads).
  for (bool decode : {false, true}) {
    BlockTable a(pool->get()), b(pool->get());
    ASSERT_TRUE(a.Extend(3).ok());
    ASSERT_TRUE(b.Extend(2).ok());
    std::vector<SeqChunk> step = {{&a, 0, clean, true},
                                  {&b, 0, poisoned, true}};
    if (decode) {
      const std::vector<SeqChunk> prefill = {
          {&a, 0, absl::MakeConstSpan(clean).subspan(0, 2), false},
          {&b, 0, absl::MakeConstSpan(poisoned).subspan(0, 1), true}};
      ASSERT_TRUE((*model)->Forward(prefill).ok());
      step = {{&a, 2, one_clean, true}, {&b, 1, one_poisoned, true}};
    }
    auto logits = (*model)->Forward(step);
    ASSERT_FALSE(logits.ok()) << "decode " << decode;
    EXPECT_EQ(logits.status().code(), absl::StatusCode::kInternal);
    const std::string message(logits.status().message());
    EXPECT_THAT(message, ::testing::HasSubstr("non-finite logits (NaN)"));
    EXPECT_THAT(message, ::testing::HasSubstr("at position 1"));
    EXPECT_THAT(message, ::testing::HasSubstr("weights may be corrupt"));
    // Without the poisoned sequence, the same step computes.
    step.pop_back();
    EXPECT_TRUE((*model)->Forward(step).ok()) << "decode " << decode;
  }
}

}  // namespace
}  // namespace kvserve
