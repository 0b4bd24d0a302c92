// Malformed model files: every problem is a Status naming what and where.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model/gguf_random_model.h"
#include "core/model/gguf_writer.h"
#include "core/model/llama2c.h"
#include "core/model/loader.h"
#include "core/tokenizer/vocab.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

// A tiny llama GGUF (dim 8, 2 heads, 1 KV head, hidden 12, 1 layer, the
// byte-level vocab) with hooks to break it.
struct TinySpec {
  std::string arch = "llama";
  std::map<std::string, std::vector<int64_t>> dims_override;
  std::map<std::string, GgmlType> type_override;
  std::vector<std::string> omit;
  std::function<void(GgufWriter&)> extra_metadata;
  bool omit_head_count = false;
  std::function<void(GgufWriter&)> extra_tensors;
  // Edits a tensor's bytes (zeros of its type) before they are written.
  std::function<void(const std::string& name, std::string& bytes)> patch;
};

std::string Tiny(const TinySpec& spec) {
  GgufWriter w;
  w.AddString("general.architecture", spec.arch);
  const std::string p = spec.arch + ".";
  w.AddUint32(p + "context_length", 64);
  w.AddUint32(p + "embedding_length", 8);
  w.AddUint32(p + "block_count", 1);
  w.AddUint32(p + "feed_forward_length", 12);
  if (!spec.omit_head_count) w.AddUint32(p + "attention.head_count", 2);
  w.AddUint32(p + "attention.head_count_kv", 1);
  if (spec.extra_metadata) spec.extra_metadata(w);
  Vocab v = ByteLevelVocab();
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens", v.tokens);
  const int64_t vocab = v.size();
  std::vector<std::pair<std::string, std::vector<int64_t>>> tensors = {
      {"token_embd.weight", {8, vocab}},  {"blk.0.attn_norm.weight", {8}},
      {"blk.0.attn_q.weight", {8, 8}},    {"blk.0.attn_k.weight", {8, 4}},
      {"blk.0.attn_v.weight", {8, 4}},    {"blk.0.attn_output.weight", {8, 8}},
      {"blk.0.ffn_norm.weight", {8}},     {"blk.0.ffn_gate.weight", {8, 12}},
      {"blk.0.ffn_down.weight", {12, 8}}, {"blk.0.ffn_up.weight", {8, 12}},
      {"output_norm.weight", {8}},
  };
  for (auto& [name, dims] : tensors) {
    if (std::find(spec.omit.begin(), spec.omit.end(), name) !=
        spec.omit.end()) {
      continue;
    }
    auto d = spec.dims_override.find(name);
    if (d != spec.dims_override.end()) dims = d->second;
    GgmlType type = GgmlType::kF32;
    auto t = spec.type_override.find(name);
    if (t != spec.type_override.end()) type = t->second;
    uint64_t n = GgufWriter::TensorBytes(dims, type);
    std::string bytes(n, '\0');
    if (spec.patch) spec.patch(name, bytes);
    w.AddTensor(name, dims, type, std::move(bytes));
  }
  if (spec.extra_tensors) spec.extra_tensors(w);
  return w.Serialize();
}

// The bytes live as long as the weights, which may view them.
absl::StatusOr<LoadedModel> Load(std::string bytes,
                                 std::string dtype = "auto") {
  LoadOptions o;
  o.weight_dtype = std::move(dtype);
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  absl::StatusOr<LoadedModel> m =
      LoadModelFromFile(MappedFile::FromBytes(*owned, "tiny.gguf"), o);
  if (m.ok()) m->weights->storage.push_back(owned);
  return m;
}

void ExpectError(const TinySpec& spec, std::vector<std::string> fragments) {
  absl::StatusOr<LoadedModel> m = Load(Tiny(spec));
  ASSERT_FALSE(m.ok());
  for (const std::string& f : fragments) {
    EXPECT_THAT(m.status().message(), HasSubstr(f));
  }
  EXPECT_THAT(m.status().message(), HasSubstr("tiny.gguf"));
}

TEST(BadModelTest, TinyModelLoads) {
  absl::StatusOr<LoadedModel> m = Load(Tiny({}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->weights->config.head_dim, 4);
  EXPECT_EQ(m->weights->config.vocab_size, 259);
  // No output.weight: tied to the embedding.
  EXPECT_EQ(m->weights->output.data, m->weights->token_embd.data);
}

TEST(BadModelTest, InconsistentShapesNameTheTensor) {
  TinySpec s;
  s.dims_override["blk.0.attn_q.weight"] = {8, 4};
  ExpectError(
      s, {"blk.0.attn_q.weight", "[8, 4]", "expected [8, 8]", "byte offset"});
  s = {};
  s.dims_override["blk.0.ffn_down.weight"] = {8, 12};
  ExpectError(s, {"blk.0.ffn_down.weight", "hidden_dim"});
  s = {};
  s.dims_override["output_norm.weight"] = {9};
  ExpectError(s, {"output_norm.weight"});
  s = {};
  s.dims_override["blk.0.attn_norm.weight"] = {8, 2};
  ExpectError(s, {"blk.0.attn_norm.weight"});
}

TEST(BadModelTest, MissingThings) {
  TinySpec s;
  s.omit = {"blk.0.ffn_up.weight"};
  ExpectError(s, {"blk.0.ffn_up.weight", "missing"});
  s = {};
  s.omit_head_count = true;
  ExpectError(s, {"llama.attention.head_count", "missing"});
}

TEST(BadModelTest, UnsupportedArchitectureAndTypes) {
  TinySpec s;
  s.arch = "gemma";
  ExpectError(s, {"gemma", "general.architecture"});
  s = {};
  s.type_override["blk.0.attn_k.weight"] = GgmlType::kQ4_K;
  // Q4_K needs rows that are multiples of 256: make it a valid Q4_K tensor.
  s.dims_override["blk.0.attn_k.weight"] = {256, 4};
  ExpectError(s, {"blk.0.attn_k.weight"});
  s = {};
  s.type_override["blk.0.attn_v.weight"] = GgmlType::kQ4_0;
  s.dims_override["blk.0.attn_v.weight"] = {32, 1};
  ExpectError(s, {"blk.0.attn_v.weight"});
  s = {};
  s.extra_metadata = [](GgufWriter& w) {
    w.AddString("llama.rope.scaling.type", "yarn");
  };
  ExpectError(s, {"rope.scaling.type", "yarn"});
  s = {};
  s.extra_metadata = [](GgufWriter& w) {
    w.AddString("llama.embedding_length", "eight");
  };
  // A key of the wrong type (and here also duplicated).
  EXPECT_FALSE(Load(Tiny(s)).ok());
}

TEST(BadModelTest, SupportedTypesAreHeldAsStored) {
  for (GgmlType t : {GgmlType::kF16, GgmlType::kBF16}) {
    TinySpec s;
    s.type_override["blk.0.attn_q.weight"] = t;
    absl::StatusOr<LoadedModel> m = Load(Tiny(s));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->weights->layers[0].wq.type, static_cast<quant::Type>(t));
    EXPECT_EQ(m->weights->layers[0].wk.type, quant::Type::kF32);
    m = Load(Tiny(s), "f32");
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->weights->layers[0].wq.type, quant::Type::kF32);
  }
}

TEST(BadModelTest, RopeFreqFactors) {
  // head_dim 4: rope_freqs holds rotary_dim / 2 = 2 factors.
  TinySpec s;
  s.extra_tensors = [](GgufWriter& w) {
    std::vector<float> f = {1.0f, 4.0f};
    w.AddTensor("rope_freqs.weight", {2}, GgmlType::kF32,
                std::string(reinterpret_cast<const char*>(f.data()), 8));
  };
  absl::StatusOr<LoadedModel> m = Load(Tiny(s));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->weights->rope_freq_factors, (std::vector<float>{1.0f, 4.0f}));
  s.extra_tensors = [](GgufWriter& w) {
    std::vector<float> f = {1.0f, 4.0f, 2.0f};
    w.AddTensor("rope_freqs.weight", {3}, GgmlType::kF32,
                std::string(reinterpret_cast<const char*>(f.data()), 12));
  };
  ExpectError(s, {"rope_freqs.weight", "[3]"});
  s.extra_tensors = [](GgufWriter& w) {
    std::vector<float> f = {1.0f, -4.0f};
    w.AddTensor("rope_freqs.weight", {2}, GgmlType::kF32,
                std::string(reinterpret_cast<const char*>(f.data()), 8));
  };
  ExpectError(s, {"rope_freqs.weight", "not positive"});
}

// Tiny's phi3 form: attn_qkv (rows q, k, v) and ffn_up holding gate, then
// up, every element its row index (f32).
TinySpec TinyPhi3() {
  TinySpec s;
  s.arch = "phi3";
  s.omit = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
            "blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"};
  s.extra_tensors = [](GgufWriter& w) {
    auto rows = [](int64_t n, int64_t cols) {
      std::vector<float> f(n * cols);
      for (int64_t i = 0; i < n * cols; ++i)
        f[i] = static_cast<float>(i / cols);
      return std::string(reinterpret_cast<const char*>(f.data()),
                         f.size() * sizeof(float));
    };
    w.AddTensor("blk.0.attn_qkv.weight", {8, 16}, GgmlType::kF32, rows(16, 8));
    w.AddTensor("blk.0.ffn_up.weight", {8, 24}, GgmlType::kF32, rows(24, 8));
  };
  return s;
}

TEST(BadModelTest, Phi3FusedMatricesAreSplitIntoViews) {
  absl::StatusOr<LoadedModel> m = Load(Tiny(TinyPhi3()));
  ASSERT_TRUE(m.ok()) << m.status();
  const ModelConfig& c = m->weights->config;
  EXPECT_EQ(c.rope_style, RopeStyle::kSplitHalves);
  EXPECT_EQ(c.sliding_window, 0);
  const LayerWeights& l = m->weights->layers[0];
  // q is rows 0-7, k 8-11, v 12-15; gate rows 0-11, up 12-23.
  EXPECT_EQ(l.wq.rows, 8);
  EXPECT_EQ(l.wk.f32()[0], 8.0f);
  EXPECT_EQ(l.wv.f32()[0], 12.0f);
  EXPECT_EQ(l.wv.rows, 4);
  EXPECT_EQ(l.w_gate.rows, 12);
  EXPECT_EQ(l.w_up.f32()[0], 12.0f);
  EXPECT_EQ(l.w_up.f32()[11 * 8], 23.0f);
  // The file's tensors, counted once: embd, 2 norms, qkv, wo, up, down,
  // output_norm.
  EXPECT_EQ(m->weights->TypeSummary(), "f32 x 8");
  TinySpec s = TinyPhi3();
  s.extra_metadata = [](GgufWriter& w) {
    w.AddUint32("phi3.attention.sliding_window", 5);
  };
  m = Load(Tiny(s));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->weights->config.sliding_window, 5);
}

TEST(BadModelTest, Qwen2BiasesLoad) {
  TinySpec s;
  s.arch = "qwen2";
  s.extra_tensors = [](GgufWriter& w) {
    for (auto [name, n] : {std::pair{"blk.0.attn_q.bias", 8},
                           {"blk.0.attn_k.bias", 4},
                           {"blk.0.attn_v.bias", 4}}) {
      std::vector<float> f(n, 0.5f);
      w.AddTensor(name, {n}, GgmlType::kF32,
                  std::string(reinterpret_cast<const char*>(f.data()), 4 * n));
    }
  };
  absl::StatusOr<LoadedModel> m = Load(Tiny(s));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->weights->config.rope_style, RopeStyle::kSplitHalves);
  const LayerWeights& l = m->weights->layers[0];
  ASSERT_NE(l.bk.data, nullptr);
  EXPECT_EQ(l.bk.cols, 4);
  EXPECT_EQ(l.bv.f32()[3], 0.5f);
  // A llama file without biases has none.
  m = Load(Tiny({}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->weights->config.rope_style, RopeStyle::kAdjacentPairs);
  EXPECT_EQ(m->weights->layers[0].bq.data, nullptr);
}

TEST(BadModelTest, UnsupportedFeaturesAreRefusedByName) {
  TinySpec s;
  s.arch = "gemma";
  ExpectError(
      s, {"'gemma'", "general.architecture", "supported: llama, qwen2, phi3"});
  auto with_key = [](std::string arch, std::function<void(GgufWriter&)> f) {
    TinySpec t = arch == "phi3" ? TinyPhi3() : TinySpec{};
    t.arch = arch;
    t.extra_metadata = std::move(f);
    return t;
  };
  ExpectError(with_key("phi3",
                       [](GgufWriter& w) {
                         w.AddString("phi3.rope.scaling.type", "longrope");
                       }),
              {"phi3.rope.scaling.type", "longrope"});
  ExpectError(with_key("phi3",
                       [](GgufWriter& w) {
                         w.AddFloat32("phi3.rope.scaling.attn_factor", 1.19f);
                       }),
              {"phi3.rope.scaling.attn_factor", "1.19"});
  ExpectError(with_key("llama",
                       [](GgufWriter& w) {
                         w.AddFloat32("llama.rope.scaling.factor", 8.0f);
                       }),
              {"llama.rope.scaling.factor", "8"});
  ExpectError(with_key("qwen2",
                       [](GgufWriter& w) {
                         w.AddInt32("qwen2.attention.sliding_window", -3);
                       }),
              {"qwen2.attention.sliding_window", "-3"});
  // Neutral values load.
  EXPECT_TRUE(Load(Tiny(with_key("phi3", [](GgufWriter& w) {
                w.AddFloat32("phi3.rope.scaling.attn_factor", 1.0f);
                w.AddString("phi3.rope.scaling.type", "none");
              }))).ok());

  // Tensors we would not compute.
  auto with_tensor = [](std::string arch, std::string name,
                        std::vector<int64_t> dims) {
    TinySpec t = arch == "phi3" ? TinyPhi3() : TinySpec{};
    t.arch = arch;
    auto base = t.extra_tensors;
    t.extra_tensors = [base, name, dims](GgufWriter& w) {
      if (base) base(w);
      w.AddTensor(
          name, dims, GgmlType::kF32,
          std::string(GgufWriter::TensorBytes(dims, GgmlType::kF32), '\0'));
    };
    return t;
  };
  ExpectError(with_tensor("phi3", "rope_factors_long.weight", {2}),
              {"rope_factors_long.weight", "LongRoPE"});
  ExpectError(with_tensor("qwen2", "blk.0.attn_output.bias", {8}),
              {"blk.0.attn_output.bias", "attention output bias"});
  ExpectError(with_tensor("llama", "blk.0.mystery.weight", {8}),
              {"blk.0.mystery.weight", "llama forward pass"});
  // phi3's stacked ffn_up must hold 2 * hidden_dim rows.
  TinySpec t = TinyPhi3();
  t.extra_tensors = [](GgufWriter& w) {
    w.AddTensor("blk.0.attn_qkv.weight", {8, 16}, GgmlType::kF32,
                std::string(16 * 8 * 4, '\0'));
    w.AddTensor("blk.0.ffn_up.weight", {8, 12}, GgmlType::kF32,
                std::string(12 * 8 * 4, '\0'));
  };
  ExpectError(t, {"blk.0.ffn_up.weight", "[8, 24]", "gate and up stacked"});
}

TEST(BadModelTest, Llama2cHeaderErrors) {
  std::vector<int32_t> header = {8, 12, 1, 2, 1, 259, 64};
  auto bytes = [&](std::vector<int32_t> h, int64_t floats) {
    std::string b(reinterpret_cast<const char*>(h.data()), 28);
    b.append(4 * floats, '\0');
    return b;
  };
  LoadOptions o;
  o.tokenizer_path = "/nonexistent/tokenizer.bin";
  auto load = [&](const std::string& b) {
    return LoadModelFromFile(MappedFile::FromBytes(b, "tiny.bin"), o);
  };
  absl::StatusOr<LoadedModel> m = load(bytes(header, 10));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("implies"));
  header[3] = -2;
  m = load(bytes(header, 0));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("n_heads"));
  m = load("abc");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("neither GGUF"));
}

// Sets element `index` of a tensor's bytes to `bits` (an element of
// sizeof(Bits) bytes: f32, f16 or bf16).
template <typename Bits>
void SetElement(std::string& bytes, int64_t index, Bits bits) {
  std::memcpy(&bytes[index * sizeof(Bits)], &bits, sizeof(Bits));
}

TEST(BadModelTest, NonFiniteFloatWeightsNameTheTensorAndElement) {
  struct Case {
    std::string tensor;
    GgmlType type;
    std::function<void(std::string&)> poison;
    std::vector<std::string> fragments;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<Case> cases = {
      {"blk.0.ffn_down.weight",
       GgmlType::kF32,
       [&](std::string& b) { SetElement(b, 29, nan); },
       {"F32", "element 29 (row 2, column 5)", "is NaN", "byte offset"}},
      {"blk.0.attn_norm.weight",
       GgmlType::kF32,
       [&](std::string& b) { SetElement(b, 7, -inf); },
       {"element 7 (row 0, column 7)", "is -inf"}},
      {"blk.0.attn_q.weight",
       GgmlType::kF16,
       [](std::string& b) { SetElement<uint16_t>(b, 3, 0x7c00); },
       {"F16", "element 3 (row 0, column 3)", "is +inf"}},
      {"token_embd.weight",
       GgmlType::kBF16,
       [](std::string& b) { SetElement<uint16_t>(b, 8 * 258 + 1, 0xffc1); },
       {"BF16", "element 2065 (row 258, column 1)", "is NaN"}},
  };
  for (const Case& c : cases) {
    TinySpec s;
    s.type_override[c.tensor] = c.type;
    s.patch = [&](const std::string& name, std::string& bytes) {
      if (name == c.tensor) c.poison(bytes);
    };
    for (const char* dtype : {"auto", "f32", "bf16"}) {
      absl::StatusOr<LoadedModel> m = Load(Tiny(s), dtype);
      ASSERT_FALSE(m.ok()) << c.tensor << " " << dtype;
      EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
      const std::string message(m.status().message());
      EXPECT_THAT(message, HasSubstr("tiny.gguf"));
      EXPECT_THAT(message, HasSubstr("'" + c.tensor + "'"));
      for (const std::string& f : c.fragments) {
        EXPECT_THAT(message, HasSubstr(f)) << dtype;
      }
    }
  }
  // Largest finite values load.
  TinySpec s;
  s.type_override["blk.0.attn_q.weight"] = GgmlType::kF16;
  s.patch = [](const std::string& name, std::string& bytes) {
    if (name == "blk.0.attn_q.weight") SetElement<uint16_t>(bytes, 0, 0x7bff);
    if (name == "blk.0.attn_k.weight") {
      SetElement(bytes, 1, std::numeric_limits<float>::max());
    }
  };
  absl::StatusOr<LoadedModel> m = Load(Tiny(s));
  EXPECT_TRUE(m.ok()) << m.status();
}

// A Q8_0 model whose block 3 of blk.1.attn_v.weight has an infinite scale.
TEST(BadModelTest, NonFiniteBlockScaleNamesTheTensorAndBlock) {
  RandomModelOptions o;
  o.dim = 64;
  o.hidden_dim = 128;
  o.dtype = "q8_0";
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(o);
  ASSERT_TRUE(w.ok()) << w.status();
  std::string bytes = (*w)->Serialize();
  ASSERT_TRUE(Load(bytes).ok());
  absl::StatusOr<GgufFile> g =
      GgufFile::Parse(MappedFile::FromBytes(bytes, "q8.gguf"));
  ASSERT_TRUE(g.ok()) << g.status();
  const GgufTensorInfo* t = g->FindTensor("blk.1.attn_v.weight");
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(t->type, static_cast<uint32_t>(GgmlType::kQ8_0));
  const uint16_t inf = 0x7c00;  // fp16 +inf: the block's d
  std::memcpy(&bytes[t->file_offset + 3 * 34], &inf, 2);
  for (const char* dtype : {"auto", "f32"}) {
    absl::StatusOr<LoadedModel> m = Load(bytes, dtype);
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(m.status().message());
    EXPECT_THAT(message, HasSubstr("tiny.gguf"));
    EXPECT_THAT(message, HasSubstr("'blk.1.attn_v.weight'"));
    EXPECT_THAT(message, HasSubstr("Q8_0 block 3 (row 1, columns 32..63)"));
    EXPECT_THAT(message, HasSubstr("scale d is +inf"));
    EXPECT_THAT(message, HasSubstr("byte offset"));
  }
}

TEST(BadModelTest, Llama2cNonFiniteWeightNamesTheArrayAndElement) {
  // dim 8, hidden 12, 1 layer, 2 heads, 1 KV head, vocab 4, seq_len 4: the
  // arrays of run.c in order, freq_cis_real and _imag of 8 floats each.
  const std::vector<int32_t> header = {8, 12, 1, 2, 1, 4, 4};
  const int64_t floats = 4 * 8 + 8 + 64 + 32 + 32 + 64 + 8 + 96 * 3 + 8 + 2 * 8;
  std::string b(reinterpret_cast<const char*>(header.data()), 28);
  b.append(4 * floats, '\0');
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(&b[28 + 4 * (4 * 8 + 8 + 10)], &nan, 4);  // wq[1][2]
  absl::StatusOr<std::unique_ptr<ModelWeights>> w = LoadLlama2cWeights(
      MappedFile::FromBytes(b, "tiny.bin"), WeightDTypeMode::kAuto);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(w.status().message());
  EXPECT_THAT(message, HasSubstr("tiny.bin"));
  EXPECT_THAT(message, HasSubstr("'wq'"));
  EXPECT_THAT(message, HasSubstr("element 10 (row 1, column 2)"));
  EXPECT_THAT(message, HasSubstr("is NaN"));
  std::memset(&b[28 + 4 * (4 * 8 + 8 + 10)], 0, 4);
  EXPECT_TRUE(LoadLlama2cWeights(MappedFile::FromBytes(b, "tiny.bin"),
                                 WeightDTypeMode::kAuto)
                  .ok());
}

}  // namespace
}  // namespace kvserve
