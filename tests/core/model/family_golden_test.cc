// The qwen2 and phi3 families (q/k/v biases, a fused attn_qkv, gate and up
// stacked in ffn_up, split-halves RoPE, a sliding window key) served as
// data by the one forward pass:
//  - against llama.cpp's goldens in ../shared/golden/families (f32 KV,
//    greedy, 32 tokens, top-5 logits per step), through Model and through
//    the Engine that serves requests: greedy tokens agree until the first
//    disagreement, allowed only where the golden's top1 - top2 gap is below
//    0.1, and the top-5 logits relative to the top-1 agree within 0.001;
//  - against the double-precision reference (tests/testing/
//    greedy_reference.h), also with a sliding window shorter than the
//    sequence, in every attention path (oneDNN and fused prefill, batched
//    and team decode).
// ctest runs this binary again under KVSERVE_MAX_ISA=avx2.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <future>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/kv/block_pool.h"
#include "core/kv/block_table.h"
#include "core/model/loader.h"
#include "core/model/model.h"
#include "core/util/cpu_features.h"
#include "gtest/gtest.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

using testing::OurRun;
using testing::ReferenceLogits;
using testing::ReferenceRun;
using testing::RelativeError;

std::string ModelPath(const std::string& family) {
  return testing::SharedDir() + "/models/families/synth-small-" + family +
         "-f32.gguf";
}
std::string GoldenPath(const std::string& family) {
  return testing::SharedDir() + "/golden/families/synth-small-" + family +
         "-f32.json";
}

std::unique_ptr<BlockPool> MakePool(const ModelConfig& c, int block_tokens,
                                    int64_t tokens, DType dtype = DType::kF32) {
  return *BlockPool::Create({.n_layers = c.n_layers,
                             .n_kv_heads = c.n_kv_heads,
                             .head_dim = c.head_dim,
                             .block_tokens = block_tokens,
                             .dtype = dtype,
                             .capacity_bytes = (tokens + 4 * block_tokens) *
                                               c.KvBytesPerToken(dtype)});
}

// Collects a request's tokens with their top logprobs.
class LogprobSink : public TokenSink {
 public:
  void OnToken(GeneratedToken token) override {
    tokens_.push_back(std::move(token));
  }
  void OnFinish(absl::StatusOr<GenerateResult> result) override {
    done_.set_value(result.status());
  }
  absl::Status Wait() { return done_.get_future().get(); }
  const std::vector<GeneratedToken>& tokens() const { return tokens_; }

 private:
  std::vector<GeneratedToken> tokens_;
  std::promise<absl::Status> done_;
};

class FamilyTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(ModelPath(GetParam())) ||
        !std::filesystem::exists(GoldenPath(GetParam()))) {
      GTEST_SKIP() << "needs " << ModelPath(GetParam()) << " and "
                   << GoldenPath(GetParam());
    }
    std::optional<ReferenceRun> ref =
        testing::ReadGoldenRun(GoldenPath(GetParam()));
    ASSERT_TRUE(ref.has_value()) << "cannot read " << GoldenPath(GetParam());
    golden_ = *std::move(ref);
    LoadOptions o;
    o.model_path = ModelPath(GetParam());
    absl::StatusOr<LoadedModel> files = LoadModel(o);
    ASSERT_TRUE(files.ok()) << files.status();
    files_ = *std::move(files);
  }

  // The golden's prompt and continuation: a sequence to check logits on.
  std::vector<int32_t> GoldenSequence() const {
    std::vector<int32_t> seq = golden_.prompt;
    seq.insert(seq.end(), golden_.tokens.begin(), golden_.tokens.end());
    return seq;
  }

  // Feeds `tokens` to a fresh sequence of `model` in chunks of `chunk` and
  // returns the worst relative error of the logits after each chunk
  // against `want`.
  double WorstError(Model& model, BlockPool* pool,
                    const std::vector<int32_t>& tokens, int chunk,
                    const std::vector<std::vector<double>>& want) {
    BlockTable kv(pool);
    double worst = 0;
    const int vocab = model.config().vocab_size;
    for (size_t start = 0; start < tokens.size(); start += chunk) {
      const size_t n = std::min<size_t>(chunk, tokens.size() - start);
      EXPECT_TRUE(kv.Extend(start + n).ok());
      absl::StatusOr<absl::Span<const float>> logits = model.Forward(
          {SeqChunk{&kv, static_cast<int64_t>(start),
                    absl::MakeConstSpan(tokens).subspan(start, n), true}});
      EXPECT_TRUE(logits.ok()) << logits.status();
      if (!logits.ok()) return INFINITY;
      EXPECT_EQ(logits->size(), static_cast<size_t>(vocab));
      worst = std::max(worst, RelativeError(*logits, want[start + n - 1]));
    }
    return worst;
  }

  ReferenceRun golden_;
  LoadedModel files_;
};

TEST_P(FamilyTest, LoadsTheFamilyAsData) {
  const ModelWeights& w = *files_.weights;
  const ModelConfig& c = w.config;
  EXPECT_EQ(w.architecture, GetParam());
  EXPECT_EQ(c.rope_style, RopeStyle::kSplitHalves);
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.dim, 256);
  EXPECT_EQ(c.hidden_dim, 768);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.context_length, 1024);
  EXPECT_EQ(c.rotary_dim(), 32);
  EXPECT_NEAR(c.norm_eps, 1e-5, 1e-9);
  const LayerWeights& l = w.layers[0];
  if (GetParam() == "qwen2") {
    EXPECT_EQ(c.sliding_window, 0);
    EXPECT_NE(l.bq.data, nullptr);
    EXPECT_EQ(l.bk.cols, c.kv_dim());
    EXPECT_EQ(l.wqkv.data, nullptr);
    EXPECT_EQ(l.w_gate_up.data, nullptr);
  } else {
    EXPECT_EQ(c.sliding_window, 2047);
    EXPECT_EQ(l.bq.data, nullptr);
    // Views of the fused matrices' row ranges.
    ASSERT_NE(l.wqkv.data, nullptr);
    EXPECT_EQ(l.wq.data, l.wqkv.data);
    EXPECT_EQ(l.wk.data, l.wqkv.row(c.q_dim()));
    EXPECT_EQ(l.wv.rows, c.kv_dim());
    ASSERT_NE(l.w_gate_up.data, nullptr);
    EXPECT_EQ(l.w_up.data, l.w_gate_up.row(c.hidden_dim));
    EXPECT_EQ(l.w_up.rows, c.hidden_dim);
  }
  // 4 layers of 7 (phi3) or 12 (qwen2) tensors, embedding, norm, output.
  EXPECT_EQ(w.TypeSummary(), GetParam() == "qwen2" ? "f32 x 51" : "f32 x 27");
}

TEST_P(FamilyTest, ModelMatchesTheGolden) {
  const ModelConfig& c = files_.weights->config;
  std::unique_ptr<BlockPool> pool = MakePool(c, 16, GoldenSequence().size());
  absl::StatusOr<std::unique_ptr<Model>> m =
      Model::Create(files_.weights.get(), pool.get());
  ASSERT_TRUE(m.ok()) << m.status();
  OurRun ours = testing::RunGreedy(**m, pool.get(), golden_.prompt,
                                   golden_.tokens.size());
  int compared = 0;
  ::testing::AssertionResult agrees =
      testing::AgreesWithReference(golden_, ours, 1e-3, 0.1, &compared);
  EXPECT_TRUE(agrees) << GetParam() << " on " << CpuSummary();
  std::printf("%s (Model): %s\n", GetParam().c_str(), agrees.message());
  EXPECT_TRUE(compared >= 1 || golden_.gap[0] < 0.1) << compared;
}

// The serving path: the engine's scheduler, batching and sampler, the
// logits seen through the top logprobs (log-softmax keeps differences).
TEST_P(FamilyTest, EngineMatchesTheGolden) {
  EngineOptions o;
  o.kv_dtype = DType::kF32;
  auto engine =
      Engine::Create(o, files_.weights.get(), files_.tokenizer.get(), nullptr);
  ASSERT_TRUE(engine.ok()) << engine.status();
  GenerateParams p;
  p.prompt = golden_.prompt;
  p.max_tokens = golden_.tokens.size();
  p.ignore_eos = true;
  p.logprobs = kMaxTopLogprobs;
  LogprobSink sink;
  (*engine)->Submit(std::make_shared<GenerateCall>(std::move(p), &sink));
  ASSERT_TRUE(sink.Wait().ok());
  OurRun ours;
  const int vocab = files_.weights->config.vocab_size;
  for (const GeneratedToken& t : sink.tokens()) {
    ours.tokens.push_back(t.token_id);
    ASSERT_TRUE(t.logprobs.has_value());
    std::vector<float> logits(vocab, -std::numeric_limits<float>::infinity());
    for (const TokenLogprob& e : t.logprobs->top) {
      logits[e.token_id] = e.logprob;
    }
    ours.logits.push_back(std::move(logits));
  }
  ASSERT_EQ(ours.tokens.size(), golden_.tokens.size());
  int compared = 0;
  ::testing::AssertionResult agrees =
      testing::AgreesWithReference(golden_, ours, 1e-3, 0.1, &compared);
  EXPECT_TRUE(agrees) << GetParam() << " on " << CpuSummary();
  std::printf("%s (Engine): %s\n", GetParam().c_str(), agrees.message());
  EXPECT_TRUE(compared >= 1 || golden_.gap[0] < 0.1) << compared;
}

// Our forward pass against the double-precision reference over the golden's
// sequence: whole (oneDNN prefill), in chunks of 7 (fused prefill) and token
// by token (decode).
TEST_P(FamilyTest, ForwardMatchesTheDoubleReference) {
  const ModelConfig& c = files_.weights->config;
  const std::vector<int32_t> seq = GoldenSequence();
  const std::vector<std::vector<double>> want =
      ReferenceLogits(*files_.weights, seq);
  std::unique_ptr<BlockPool> pool = MakePool(c, 16, seq.size());
  std::unique_ptr<Model> model =
      *Model::Create(files_.weights.get(), pool.get());
  for (int chunk : {static_cast<int>(seq.size()), 7, 1}) {
    EXPECT_LT(WorstError(*model, pool.get(), seq, chunk, want), 1e-5)
        << GetParam() << " chunk " << chunk;
  }
}

// The same over a bf16, q8_0 and q4_0 KV cache, against the reference
// whose K and V rows are stored the same way: what the cache type changes
// is only how K and V are kept, and nothing else. (A row the engine and
// the reference round to different levels, from their f32 and double K,
// is what the tolerance allows.)
TEST_P(FamilyTest, ForwardOverAQuantizedKvCacheMatchesTheReference) {
  const ModelConfig& c = files_.weights->config;
  const std::vector<int32_t> seq = GoldenSequence();
  const std::vector<std::vector<double>> f32 =
      ReferenceLogits(*files_.weights, seq);
  for (DType dtype : {DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    const std::vector<std::vector<double>> want =
        ReferenceLogits(*files_.weights, seq, dtype);
    // The cache type changes the logits: the test can fail.
    const double shift = RelativeError(
        std::vector<float>(want.back().begin(), want.back().end()), f32.back());
    EXPECT_GT(shift, 1e-4) << DTypeName(dtype);
    std::unique_ptr<BlockPool> pool = MakePool(c, 16, seq.size(), dtype);
    std::unique_ptr<Model> model =
        *Model::Create(files_.weights.get(), pool.get());
    for (int chunk : {static_cast<int>(seq.size()), 7, 1}) {
      const double err = WorstError(*model, pool.get(), seq, chunk, want);
      std::printf(
          "%s kv %s chunk %d: %.3g (the type moves the reference "
          "%.3g)\n",
          GetParam().c_str(), std::string(DTypeName(dtype)).c_str(), chunk, err,
          shift);
      EXPECT_LT(err, 1e-3) << GetParam() << " kv " << DTypeName(dtype)
                           << " chunk " << chunk;
    }
  }
}

// A window shorter than the sequence (6 positions over 37, blocks of 4: the
// window starts inside a block and whole blocks fall out of it) in every
// attention path, against the reference with the same window.
TEST_P(FamilyTest, SlidingWindowShorterThanTheSequence) {
  ModelWeights& w = *files_.weights;
  const std::vector<int32_t> seq = GoldenSequence();
  const std::vector<std::vector<double>> full = ReferenceLogits(w, seq);
  w.config.sliding_window = 6;
  const std::vector<std::vector<double>> want = ReferenceLogits(w, seq);
  // The window changes the logits: the test can fail.
  EXPECT_GT(
      RelativeError(std::vector<float>(full.back().begin(), full.back().end()),
                    want.back()),
      1e-2);
  std::unique_ptr<BlockPool> pool = MakePool(w.config, 4, 3 * seq.size());
  for (bool team : {true, false}) {
    std::unique_ptr<Model> model =
        *Model::Create(&w, pool.get(), {.decode_in_team = team});
    for (int chunk : {static_cast<int>(seq.size()), 7, 1}) {
      EXPECT_LT(WorstError(*model, pool.get(), seq, chunk, want), 1e-5)
          << GetParam() << " chunk " << chunk << " team " << team;
    }
    // Two sequences decoding together (one GqaDecode call), at different
    // positions.
    BlockTable a(pool.get()), b(pool.get());
    ASSERT_TRUE(a.Extend(20).ok());
    ASSERT_TRUE(b.Extend(9).ok());
    const auto span = absl::MakeConstSpan(seq);
    ASSERT_TRUE(model
                    ->Forward({SeqChunk{&a, 0, span.subspan(0, 20), false},
                               SeqChunk{&b, 0, span.subspan(0, 9), false}})
                    .ok());
    for (int i = 0; i < 10; ++i) {
      ASSERT_TRUE(a.Extend(21 + i).ok());
      ASSERT_TRUE(b.Extend(10 + i).ok());
      absl::StatusOr<absl::Span<const float>> logits =
          model->Forward({SeqChunk{&a, 20 + i, span.subspan(20 + i, 1), true},
                          SeqChunk{&b, 9 + i, span.subspan(9 + i, 1), true}});
      ASSERT_TRUE(logits.ok()) << logits.status();
      const int vocab = w.config.vocab_size;
      EXPECT_LT(RelativeError(logits->subspan(0, vocab), want[20 + i]), 1e-5)
          << "a at " << 20 + i << " team " << team;
      EXPECT_LT(RelativeError(logits->subspan(vocab, vocab), want[9 + i]), 1e-5)
          << "b at " << 9 + i << " team " << team;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyTest,
                         ::testing::Values("qwen2", "phi3"));

}  // namespace
}  // namespace kvserve
