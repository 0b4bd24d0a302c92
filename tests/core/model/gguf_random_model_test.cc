#include "core/model/gguf_random_model.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "core/model/gguf_tensor.h"
#include "core/model/loader.h"
#include "core/util/bf16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

RandomModelOptions Small(std::string dtype) {
  RandomModelOptions o;
  o.n_layers = 3;
  o.dim = 64;
  o.n_heads = 8;
  o.n_kv_heads = 2;
  o.hidden_dim = 96;
  o.context_length = 256;
  o.dtype = std::move(dtype);
  o.seed = 11;
  return o;
}

struct Made {
  std::string bytes;  // must outlive `model` (zero-copy tensors)
  LoadedModel model;
};

std::unique_ptr<Made> MakeAndLoad(const RandomModelOptions& ro,
                                  std::string weight_dtype = "auto") {
  auto made = std::make_unique<Made>();
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(ro);
  EXPECT_TRUE(w.ok()) << w.status();
  if (!w.ok()) return nullptr;
  made->bytes = (*w)->Serialize();
  LoadOptions o;
  o.weight_dtype = std::move(weight_dtype);
  absl::StatusOr<LoadedModel> m =
      LoadModelFromFile(MappedFile::FromBytes(made->bytes, "made.gguf"), o);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return nullptr;
  made->model = std::move(*m);
  return made;
}

float At(const WeightTensor& t, int64_t i) {
  std::vector<float> row(t.cols);
  quant::Info(t.type)->dequantize(t.row(i / t.cols), row.data(), t.cols);
  return row[i % t.cols];
}

TEST(RandomModelTest, LoadsBackWithConfigShapesAndValues) {
  std::unique_ptr<Made> m = MakeAndLoad(Small("f32"));
  ASSERT_NE(m, nullptr);
  const ModelWeights& w = *m->model.weights;
  const ModelConfig& c = w.config;
  EXPECT_EQ(c.n_layers, 3);
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.hidden_dim, 96);
  EXPECT_EQ(c.context_length, 256);
  EXPECT_EQ(c.vocab_size, 259);  // byte-level
  EXPECT_EQ(w.name, "kvmodel-random");
  EXPECT_EQ(m->model.tokenizer->bos_id(), 1);
  EXPECT_EQ(m->model.tokenizer->Encode("hi", {}),
            (std::vector<int32_t>{1, 'h' + 3, 'i' + 3}));

  const LayerWeights& l = w.layers[1];
  EXPECT_EQ(l.wq.rows, 64);
  EXPECT_EQ(l.wk.rows, 16);
  EXPECT_EQ(l.wv.cols, 64);
  EXPECT_EQ(l.wo.rows, 64);
  EXPECT_EQ(l.w_gate.rows, 96);
  EXPECT_EQ(l.w_down.cols, 96);
  EXPECT_EQ(w.output.rows, 259);
  for (int64_t i = 0; i < 64; ++i) {
    ASSERT_EQ(l.attn_norm.f32()[i], 1.0f);
    ASSERT_EQ(w.output_norm.f32()[i], 1.0f);
  }
  // Values are the documented function of (seed, name, index), scaled.
  const float std_q = 1.0f / std::sqrt(64.0f);
  for (int64_t i : {0, 1, 100, 4095}) {
    EXPECT_FLOAT_EQ(l.wq.f32()[i],
                    std_q * RandomModelUnitValue(11, "blk.1.attn_q.weight", i));
  }
  // And have the intended spread: mean ~0, std ~1/sqrt(cols).
  double sum = 0, sq = 0;
  const int64_t n = l.w_gate.rows * l.w_gate.cols;
  for (int64_t i = 0; i < n; ++i) {
    sum += l.w_gate.f32()[i];
    sq += double{l.w_gate.f32()[i]} * l.w_gate.f32()[i];
  }
  double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(sd, 1.0 / 8.0, 0.01);
}

TEST(RandomModelTest, DeterministicAndSeeded) {
  std::unique_ptr<Made> a = MakeAndLoad(Small("f32"));
  std::unique_ptr<Made> b = MakeAndLoad(Small("f32"));
  RandomModelOptions other = Small("f32");
  other.seed = 12;
  std::unique_ptr<Made> c = MakeAndLoad(other);
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->bytes, b->bytes);
  EXPECT_EQ(a->model.weights->fingerprint, b->model.weights->fingerprint);
  EXPECT_NE(a->model.weights->fingerprint, c->model.weights->fingerprint);
}

TEST(RandomModelTest, F16AndBf16HoldTheSameValuesRounded) {
  std::unique_ptr<Made> f = MakeAndLoad(Small("f32"));
  std::unique_ptr<Made> h = MakeAndLoad(Small("f16"));
  std::unique_ptr<Made> b = MakeAndLoad(Small("bf16"));
  std::unique_ptr<Made> h32 = MakeAndLoad(Small("f16"), "f32");
  ASSERT_TRUE(f && h && b && h32);
  const WeightTensor& wf = f->model.weights->layers[2].w_down;
  const WeightTensor& wh = h->model.weights->layers[2].w_down;
  const WeightTensor& wb = b->model.weights->layers[2].w_down;
  const WeightTensor& wh32 = h32->model.weights->layers[2].w_down;
  EXPECT_EQ(wh.type, quant::Type::kF16);    // auto: as stored
  EXPECT_EQ(wb.type, quant::Type::kBF16);   // BF16 zero-copy
  EXPECT_EQ(wh32.type, quant::Type::kF32);  // forced f32
  for (int64_t i = 0; i < wf.rows * wf.cols; ++i) {
    float x = wf.f32()[i];
    ASSERT_EQ(At(wb, i), Bf16ToFloat(FloatToBf16(x))) << i;
    ASSERT_EQ(At(wh32, i), HalfToFloat(FloatToHalf(x))) << i;
    ASSERT_EQ(At(wh, i), HalfToFloat(FloatToHalf(x))) << i;
  }
  // Norms stay f32 in every file.
  EXPECT_EQ(h->model.weights->layers[0].ffn_norm.type, quant::Type::kF32);
}

TEST(RandomModelTest, VocabFromAnotherGguf) {
  std::string src = kvserve::testing::SharedDir() + "/models/stories260K.gguf";
  if (!MappedFile::Open(src).ok()) GTEST_SKIP() << "needs " << src;
  RandomModelOptions ro = Small("bf16");
  ro.vocab_from = src;
  std::unique_ptr<Made> m = MakeAndLoad(ro);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->model.weights->config.vocab_size, 512);
  EXPECT_EQ(m->model.tokenizer->Encode("Once upon a time", {}),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
}

TEST(RandomModelTest, VocabFromAGpt2Gguf) {
  // A Llama 3 style vocabulary: the 256 GPT-2 byte symbols, one merge, BOS.
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
                     (b >= 174 && b <= 255);
    tokens.push_back(printable ? std::string(1, static_cast<char>(b)) : "?");
  }
  // Only ASCII letters matter below; give the others unique placeholders.
  for (int b = 0; b < 256; ++b) {
    if (static_cast<unsigned char>(tokens[b][0]) >= 0x80 || tokens[b] == "?") {
      tokens[b] = "<b" + std::to_string(b) + ">";
    }
  }
  tokens.push_back("hi");
  tokens.push_back("<|begin_of_text|>");
  GgufWriter v;
  v.AddString("tokenizer.ggml.model", "gpt2");
  v.AddString("tokenizer.ggml.pre", "llama-bpe");
  v.AddStringArray("tokenizer.ggml.tokens", tokens);
  v.AddStringArray("tokenizer.ggml.merges", {"h i"});
  v.AddUint32("tokenizer.ggml.bos_token_id", 257);
  std::string path = ::testing::TempDir() + "/gpt2_vocab.gguf";
  ASSERT_TRUE(v.WriteFile(path).ok());

  RandomModelOptions ro = Small("f16");
  ro.vocab_from = path;
  std::unique_ptr<Made> m = MakeAndLoad(ro);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->model.weights->config.vocab_size, 258);
  EXPECT_EQ(m->model.tokenizer->Encode("hi", {}),
            (std::vector<int32_t>{257, 256}));
  std::remove(path.c_str());
}

TEST(RandomModelTest, BadOptions) {
  RandomModelOptions o = Small("f32");
  o.dtype = "q4";
  EXPECT_FALSE(MakeRandomModel(o).ok());
  o = Small("f32");
  o.n_kv_heads = 3;
  EXPECT_FALSE(MakeRandomModel(o).ok());
  o = Small("f32");
  o.dim = 60;
  EXPECT_FALSE(MakeRandomModel(o).ok());
  o = Small("f32");
  o.vocab_from = "/nonexistent.gguf";
  EXPECT_FALSE(MakeRandomModel(o).ok());
}

TEST(HalfTest, ConversionsRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f))));
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << std::hex << h;
  }
  EXPECT_EQ(HalfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xC000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7C00);  // rounds to inf
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7BFF);
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie->even
}

}  // namespace
}  // namespace kvserve
