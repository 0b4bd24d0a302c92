#include "core/model/gguf_random_model.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/model/fingerprint.h"
#include "core/model/gguf_tensor.h"
#include "core/tokenizer/vocab.h"
#include "core/util/bf16.h"

namespace kvserve {
namespace {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

uint64_t TensorSeed(uint64_t seed, const std::string& name) {
  return Xxh64(name.data(), name.size(), seed);
}

// Unit-variance value from a counter: the sum of two uniforms on
// [-sqrt(6)/2, sqrt(6)/2] (a triangular distribution, variance 1).
inline float UnitValue(uint64_t tensor_seed, uint64_t index) {
  uint64_t r = SplitMix64(tensor_seed ^ SplitMix64(index));
  constexpr float kScale = 1.0f / 4294967296.0f;
  float u1 = static_cast<float>(r & 0xffffffffu) * kScale;
  float u2 = static_cast<float>(r >> 32) * kScale;
  return (u1 + u2 - 1.0f) * 2.449489742783178f;  // sqrt(6)
}

// Fills a tensor of `type` with std * UnitValue(...).
GgufWriter::Producer RandomProducer(uint64_t tensor_seed, float std_dev,
                                    GgmlType type) {
  return [=](uint8_t* out, uint64_t n_bytes) {
    const int64_t n =
        static_cast<int64_t>(n_bytes / (type == GgmlType::kF32 ? 4 : 2));
#pragma omp parallel for schedule(static) if (n > (1 << 20))
    for (int64_t i = 0; i < n; ++i) {
      float v = std_dev * UnitValue(tensor_seed, static_cast<uint64_t>(i));
      if (type == GgmlType::kF32) {
        std::memcpy(out + 4 * i, &v, 4);
      } else {
        uint16_t h = type == GgmlType::kF16 ? FloatToHalf(v) : FloatToBf16(v);
        std::memcpy(out + 2 * i, &h, 2);
      }
    }
  };
}

GgufWriter::Producer Ones(int64_t n) {
  return [n](uint8_t* out, uint64_t) {
    const float one = 1.0f;
    for (int64_t i = 0; i < n; ++i) std::memcpy(out + 4 * i, &one, 4);
  };
}

}  // namespace

float RandomModelUnitValue(uint64_t seed, const std::string& name,
                           uint64_t index) {
  return UnitValue(TensorSeed(seed, name), index);
}

absl::StatusOr<std::unique_ptr<GgufWriter>> MakeRandomModel(
    const RandomModelOptions& o) {
  ModelConfig c;
  c.n_layers = o.n_layers;
  c.dim = o.dim;
  c.hidden_dim = o.hidden_dim;
  c.n_heads = o.n_heads;
  c.n_kv_heads = o.n_kv_heads;
  c.context_length = o.context_length;
  c.head_dim = o.n_heads > 0 ? o.dim / o.n_heads : 0;
  c.vocab_size = 1;  // checked below, once known
  if (o.n_heads <= 0 || o.dim % o.n_heads != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "dim %d must be a positive multiple of n_heads %d", o.dim, o.n_heads));
  }
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  GgmlType type;
  uint32_t file_type;  // llama.cpp's general.file_type (llama_ftype)
  if (o.dtype == "f32") {
    type = GgmlType::kF32;
    file_type = 0;
  } else if (o.dtype == "f16") {
    type = GgmlType::kF16;
    file_type = 1;
  } else if (o.dtype == "bf16") {
    type = GgmlType::kBF16;
    file_type = 32;
  } else {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unknown dtype \"%s\" (expected f32, f16 or bf16)", o.dtype));
  }

  auto w = std::make_unique<GgufWriter>();
  w->AddString("general.architecture", "llama");
  w->AddString("general.name", o.name);
  w->AddUint32("general.file_type", file_type);
  w->AddUint32("llama.context_length", o.context_length);
  w->AddUint32("llama.embedding_length", o.dim);
  w->AddUint32("llama.block_count", o.n_layers);
  w->AddUint32("llama.feed_forward_length", o.hidden_dim);
  w->AddUint32("llama.attention.head_count", o.n_heads);
  w->AddUint32("llama.attention.head_count_kv", o.n_kv_heads);
  w->AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w->AddFloat32("llama.rope.freq_base", 10000.0f);
  w->AddUint32("llama.rope.dimension_count", c.head_dim);

  int64_t vocab_size = 0;
  if (o.vocab_from.empty()) {
    Vocab v = ByteLevelVocab();
    vocab_size = v.size();
    std::vector<int32_t> types;
    for (TokenType t : v.token_types) types.push_back(static_cast<int32_t>(t));
    w->AddUint32("llama.vocab_size", vocab_size);
    w->AddString("tokenizer.ggml.model", v.model);
    w->AddStringArray("tokenizer.ggml.tokens", v.tokens);
    w->AddFloat32Array("tokenizer.ggml.scores", v.scores);
    w->AddInt32Array("tokenizer.ggml.token_type", types);
    w->AddUint32("tokenizer.ggml.bos_token_id", v.bos_id);
    w->AddUint32("tokenizer.ggml.eos_token_id", v.eos_id);
    w->AddUint32("tokenizer.ggml.unknown_token_id", v.unk_id);
    w->AddBool("tokenizer.ggml.add_bos_token", v.add_bos);
    w->AddBool("tokenizer.ggml.add_eos_token", false);
    w->AddBool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
  } else {
    absl::StatusOr<GgufFile> src = GgufFile::Open(o.vocab_from);
    if (!src.ok()) return src.status();
    absl::StatusOr<std::vector<std::string>> tokens =
        src->GetStringArray("tokenizer.ggml.tokens");
    if (!tokens.ok()) return tokens.status();
    vocab_size = static_cast<int64_t>(tokens->size());
    w->AddUint32("llama.vocab_size", vocab_size);
    for (const std::string& key : src->keys()) {
      if (key.rfind("tokenizer.", 0) == 0) w->Add(key, *src->Find(key));
    }
  }
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError("the vocabulary has no tokens");
  }

  const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(),
                kv_dim = c.kv_dim();
  const float residual_scale = 1.0f / std::sqrt(2.0f * c.n_layers);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols,
                    float std_dev) {
    w->AddTensor(name, {cols, rows}, type,
                 RandomProducer(TensorSeed(o.seed, name), std_dev, type));
  };
  auto norm = [&](const std::string& name) {
    w->AddTensor(name, {dim}, GgmlType::kF32, Ones(dim));
  };
  matrix("token_embd.weight", vocab_size, dim, 1.0f);
  for (int l = 0; l < c.n_layers; ++l) {
    auto n = [l](const char* t) {
      return absl::StrFormat("blk.%d.%s.weight", l, t);
    };
    const float in_dim = 1.0f / std::sqrt(static_cast<float>(dim));
    norm(n("attn_norm"));
    matrix(n("attn_q"), q_dim, dim, in_dim);
    matrix(n("attn_k"), kv_dim, dim, in_dim);
    matrix(n("attn_v"), kv_dim, dim, in_dim);
    matrix(n("attn_output"), dim, q_dim,
           residual_scale / std::sqrt(static_cast<float>(q_dim)));
    norm(n("ffn_norm"));
    matrix(n("ffn_gate"), hidden, dim, in_dim);
    matrix(n("ffn_up"), hidden, dim, in_dim);
    matrix(n("ffn_down"), dim, hidden,
           residual_scale / std::sqrt(static_cast<float>(hidden)));
  }
  norm("output_norm.weight");
  matrix("output.weight", vocab_size, dim,
         1.0f / std::sqrt(static_cast<float>(dim)));
  return w;
}

}  // namespace kvserve
