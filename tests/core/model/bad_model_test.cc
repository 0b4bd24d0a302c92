// Malformed model files: every problem is a Status naming what and where.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/model/gguf_writer.h"
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
    w.AddTensor(name, dims, type, std::string(n, '\0'));
  }
  if (spec.extra_tensors) spec.extra_tensors(w);
  return w.Serialize();
}

absl::StatusOr<LoadedModel> Load(const std::string& bytes,
                                 std::string dtype = "auto") {
  LoadOptions o;
  o.weight_dtype = std::move(dtype);
  return LoadModelFromFile(MappedFile::FromBytes(bytes, "tiny.gguf"), o);
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

}  // namespace
}  // namespace kvserve
