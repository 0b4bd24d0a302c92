#include "core/model/gguf_random_model.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/model/gguf_tensor.h"
#include "core/model/loader.h"
#include "core/util/bf16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/paths.h"
#include "tests/testing/server_process.h"

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

TEST(RandomModelTest, SpecialTokensEotAndChatTemplate) {
  RandomModelOptions ro = Small("f32");
  ro.special_tokens = {"<|im_start|>", "<|im_end|>"};
  ro.eot_token = "<|im_end|>";
  ro.chat_template = "{{ bos_token }}{% for m in messages %}...{% endfor %}";
  std::unique_ptr<Made> m = MakeAndLoad(ro);
  ASSERT_NE(m, nullptr);
  const Tokenizer& t = *m->model.tokenizer;
  EXPECT_EQ(m->model.weights->config.vocab_size, 261);  // byte-level + 2
  EXPECT_EQ(m->model.weights->token_embd.rows, 261);
  EXPECT_EQ(m->model.weights->output.rows, 261);
  EXPECT_EQ(t.Piece(259), "<|im_start|>");
  EXPECT_EQ(t.Piece(260), "<|im_end|>");
  EXPECT_EQ(m->model.chat_template, ro.chat_template);
  const EncodeOptions special{.parse_special = true};
  EXPECT_EQ(t.Encode("<|im_start|>hi<|im_end|>", special),
            (std::vector<int32_t>{1, 259, 'h' + 3, 'i' + 3, 260}));
  EXPECT_EQ(t.Encode("<|im_start|>", {}).size(), 13u);  // BOS + 12 bytes
  EXPECT_EQ(t.DecodeToken(1, 259), "");
  EXPECT_TRUE(t.IsEndOfGeneration(260));
  EXPECT_TRUE(t.IsEndOfGeneration(2));
  EXPECT_FALSE(t.IsEndOfGeneration(259));

  // The eot key makes any piece an end of turn, specials or not.
  ro.special_tokens = {"<|user|>"};
  ro.eot_token = "<|user|>";
  m = MakeAndLoad(ro);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->model.tokenizer->IsEndOfGeneration(259));
}

// Without the new options the file is what it always was: no extra keys.
TEST(RandomModelTest, NoSpecialTokensNoExtraKeys) {
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(Small("f32"));
  ASSERT_TRUE(w.ok()) << w.status();
  std::string bytes = (*w)->Serialize();
  absl::StatusOr<GgufFile> g =
      GgufFile::Parse(MappedFile::FromBytes(bytes, "plain.gguf"));
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->Find("tokenizer.chat_template"), nullptr);
  EXPECT_EQ(g->Find("tokenizer.ggml.eot_token_id"), nullptr);
  EXPECT_EQ(g->GetStringArray("tokenizer.ggml.tokens")->size(), 259u);
}

TEST(RandomModelTest, SpecialTokensOnAnotherGguf) {
  std::string src = kvserve::testing::SharedDir() + "/models/stories260K.gguf";
  if (!MappedFile::Open(src).ok()) GTEST_SKIP() << "needs " << src;
  RandomModelOptions ro = Small("f32");
  ro.vocab_from = src;
  ro.special_tokens = {"<|im_start|>", "<|im_end|>"};
  std::unique_ptr<Made> m = MakeAndLoad(ro);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->model.weights->config.vocab_size, 514);
  const Tokenizer& t = *m->model.tokenizer;
  // The old vocabulary is intact; the dummy prefix follows the special.
  EXPECT_EQ(t.Encode("<|im_start|>Once upon a time", {.parse_special = true}),
            (std::vector<int32_t>{1, 512, 403, 407, 261, 378}));
  EXPECT_EQ(t.Encode("Once upon a time", {}),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_TRUE(t.IsEndOfGeneration(513));
  EXPECT_EQ(m->model.chat_template, "");
}

TEST(RandomModelTest, SpecialTokensOnAGpt2GgufWithoutTokenTypes) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b)
    tokens.push_back("<b" + std::to_string(b) + ">");
  for (char c : std::string("hi")) tokens[static_cast<uint8_t>(c)] = c;
  tokens.push_back("hi");                 // 256
  tokens.push_back("<|begin_of_text|>");  // 257
  GgufWriter v;
  v.AddString("tokenizer.ggml.model", "gpt2");
  v.AddString("tokenizer.ggml.pre", "llama-bpe");
  v.AddStringArray("tokenizer.ggml.tokens", tokens);
  v.AddStringArray("tokenizer.ggml.merges", {"h i"});
  v.AddUint32("tokenizer.ggml.bos_token_id", 257);
  v.AddString("tokenizer.chat_template", "old");
  std::string path = ::testing::TempDir() + "/gpt2_special_vocab.gguf";
  ASSERT_TRUE(v.WriteFile(path).ok());

  RandomModelOptions ro = Small("f32");
  ro.vocab_from = path;
  ro.special_tokens = {"<|eot_id|>"};
  ro.eot_token = "<|eot_id|>";
  ro.chat_template = "new";
  std::unique_ptr<Made> m = MakeAndLoad(ro);
  std::remove(path.c_str());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->model.weights->config.vocab_size, 259);
  EXPECT_EQ(m->model.chat_template, "new");
  const Tokenizer& t = *m->model.tokenizer;
  // BOS's inferred control type survives the rewrite of token_type.
  EXPECT_EQ(t.Encode("<|begin_of_text|>hi<|eot_id|>",
                     {.add_bos = false, .parse_special = true}),
            (std::vector<int32_t>{257, 256, 258}));
  EXPECT_TRUE(t.IsEndOfGeneration(258));
  EXPECT_EQ(t.DecodeToken(256, 258), "");
}

TEST(RandomModelTest, BadSpecialTokens) {
  RandomModelOptions o = Small("f32");
  o.special_tokens = {"<s>"};  // already the byte-level vocab's BOS
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(o);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), ::testing::HasSubstr("<s>"));
  o.special_tokens = {"<a>", "<a>"};
  EXPECT_FALSE(MakeRandomModel(o).ok());
  o.special_tokens = {""};
  EXPECT_FALSE(MakeRandomModel(o).ok());
  o.special_tokens = {"<|im_end|>"};
  o.eot_token = "<|eot_id|>";
  w = MakeRandomModel(o);
  ASSERT_FALSE(w.ok());
  EXPECT_THAT(w.status().message(), ::testing::HasSubstr("<|eot_id|>"));
}

// `kvmodel make` passes the flags through: the file it writes loads, and
// its tokenizer knows the special tokens.
TEST(RandomModelTest, KvmodelMakeWithSpecialTokensAndChatTemplate) {
  const std::string dir = ::testing::TempDir();
  const std::string out = dir + "/kvmodel_chat.gguf";
  const std::string tmpl = dir + "/kvmodel_chat.jinja";
  const std::string text =
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
      "<|im_end|>\n{% endfor %}";
  {
    std::ofstream f(tmpl, std::ios::binary);
    f << text;
  }
  absl::StatusOr<testing::CommandResult> r = testing::RunCommand(
      {testing::BinDir() + "/kvmodel", "make", "--out=" + out, "--n_layers=1",
       "--special_tokens=<|im_start|>,<|im_end|>", "--eot_token=<|im_end|>",
       "--chat_template=" + tmpl},
      absl::Seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 0) << r->err;
  EXPECT_THAT(r->out, ::testing::HasSubstr("vocab_size=261"));
  LoadOptions lo;
  lo.model_path = out;
  absl::StatusOr<LoadedModel> m = LoadModel(lo);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->chat_template, text);
  EXPECT_EQ(m->tokenizer->Encode("<|im_start|>", {.parse_special = true}),
            (std::vector<int32_t>{1, 259}));
  EXPECT_TRUE(m->tokenizer->IsEndOfGeneration(260));

  r = testing::RunCommand({testing::BinDir() + "/kvmodel", "make",
                           "--out=" + out, "--chat_template=/no/such.jinja"},
                          absl::Seconds(60));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status.code, 1);
  EXPECT_THAT(r->err, ::testing::HasSubstr("/no/such.jinja"));
  std::remove(out.c_str());
  std::remove(tmpl.c_str());
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
