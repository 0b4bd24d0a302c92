#include "core/model/gguf_random_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "core/model/gguf_tensor.h"
#include "core/model/gguf_vocab.h"
#include "core/model/type_mix.h"
#include "core/quant/quant.h"
#include "core/tokenizer/vocab.h"
#include "core/util/bf16.h"
#include "core/util/xxhash64.h"

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

// Fills a tensor of `type` with std * UnitValue(...), row by row (each row
// quantized by the type's reference quantizer).
GgufWriter::Producer RandomProducer(uint64_t tensor_seed, float std_dev,
                                    GgmlType type, int64_t cols) {
  return [=](uint8_t* out, uint64_t n_bytes) {
    const quant::Type t = static_cast<quant::Type>(type);
    const int64_t row_bytes = quant::RowBytes(t, cols);
    const int64_t rows = static_cast<int64_t>(n_bytes) / row_bytes;
    const quant::TypeInfo* info = quant::Info(t);
#pragma omp parallel if (rows * cols > (1 << 20))
    {
      std::vector<float> row(cols);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < cols; ++j) {
          row[j] = std_dev *
                   UnitValue(tensor_seed, static_cast<uint64_t>(r * cols + j));
        }
        info->quantize(row.data(), out + r * row_bytes, cols);
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

// Appends `pieces` to `v` as control tokens.
absl::Status AppendSpecialTokens(const std::vector<std::string>& pieces,
                                 Vocab& v) {
  absl::flat_hash_set<std::string> known(v.tokens.begin(), v.tokens.end());
  for (const std::string& piece : pieces) {
    if (piece.empty()) {
      return absl::InvalidArgumentError("a special token is empty");
    }
    if (!known.insert(piece).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "special token \"%s\" is already in the vocabulary", piece));
    }
    if (v.token_types.empty()) {
      v.token_types.assign(v.tokens.size(), TokenType::kNormal);
    }
    v.tokens.push_back(piece);
    v.token_types.push_back(TokenType::kControl);
    if (!v.scores.empty()) v.scores.push_back(0.0f);
  }
  return absl::OkStatus();
}

std::vector<int32_t> TypeIds(const Vocab& v) {
  std::vector<int32_t> types;
  types.reserve(v.token_types.size());
  for (TokenType t : v.token_types) types.push_back(static_cast<int32_t>(t));
  return types;
}

// Writes llama.vocab_size and the tokenizer.* keys; returns the vocabulary
// size. Without special tokens, eot token or chat template the keys are
// exactly those of earlier versions: the same options remake the same file,
// byte for byte.
absl::StatusOr<int64_t> AddTokenizer(const RandomModelOptions& o,
                                     GgufWriter& w) {
  std::vector<std::string> tokens;  // the final vocabulary's pieces
  if (o.vocab_from.empty()) {
    Vocab v = ByteLevelVocab();
    if (absl::Status s = AppendSpecialTokens(o.special_tokens, v); !s.ok()) {
      return s;
    }
    w.AddUint32("llama.vocab_size", v.size());
    w.AddString("tokenizer.ggml.model", v.model);
    w.AddStringArray("tokenizer.ggml.tokens", v.tokens);
    w.AddFloat32Array("tokenizer.ggml.scores", v.scores);
    w.AddInt32Array("tokenizer.ggml.token_type", TypeIds(v));
    w.AddUint32("tokenizer.ggml.bos_token_id", v.bos_id);
    w.AddUint32("tokenizer.ggml.eos_token_id", v.eos_id);
    w.AddUint32("tokenizer.ggml.unknown_token_id", v.unk_id);
    w.AddBool("tokenizer.ggml.add_bos_token", v.add_bos);
    w.AddBool("tokenizer.ggml.add_eos_token", false);
    w.AddBool("tokenizer.ggml.add_space_prefix", v.add_space_prefix);
    tokens = std::move(v.tokens);
  } else {
    absl::StatusOr<GgufFile> src = GgufFile::Open(o.vocab_from);
    if (!src.ok()) return src.status();
    // The keys are copied as they are, but for the arrays that grow with
    // special tokens (rewritten from the parsed vocabulary, types inferred
    // where the file has none) and the keys the options replace.
    std::optional<Vocab> grown;
    if (!o.special_tokens.empty()) {
      absl::StatusOr<Vocab> v = VocabFromGguf(*src);
      if (!v.ok()) return v.status();
      if (absl::Status s = AppendSpecialTokens(o.special_tokens, *v); !s.ok()) {
        return s;
      }
      grown = std::move(*v);
      tokens = grown->tokens;
    } else {
      absl::StatusOr<std::vector<std::string>> t =
          src->GetStringArray("tokenizer.ggml.tokens");
      if (!t.ok()) return t.status();
      tokens = std::move(*t);
    }
    w.AddUint32("llama.vocab_size", tokens.size());
    bool wrote_types = false;
    for (const std::string& key : src->keys()) {
      if (key.rfind("tokenizer.", 0) != 0) continue;
      if ((key == "tokenizer.chat_template" && !o.chat_template.empty()) ||
          (key == "tokenizer.ggml.eot_token_id" && !o.eot_token.empty())) {
        continue;
      }
      if (grown.has_value() && key == "tokenizer.ggml.tokens") {
        w.AddStringArray(key, grown->tokens);
      } else if (grown.has_value() && key == "tokenizer.ggml.scores") {
        w.AddFloat32Array(key, grown->scores);
      } else if (grown.has_value() && key == "tokenizer.ggml.token_type") {
        w.AddInt32Array(key, TypeIds(*grown));
        wrote_types = true;
      } else {
        w.Add(key, *src->Find(key));
      }
    }
    if (grown.has_value() && !wrote_types) {
      w.AddInt32Array("tokenizer.ggml.token_type", TypeIds(*grown));
    }
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError("the vocabulary has no tokens");
  }
  if (!o.eot_token.empty()) {
    auto it = std::find(tokens.begin(), tokens.end(), o.eot_token);
    if (it == tokens.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "eot token \"%s\" is not in the vocabulary", o.eot_token));
    }
    w.AddUint32("tokenizer.ggml.eot_token_id",
                static_cast<uint32_t>(it - tokens.begin()));
  }
  if (!o.chat_template.empty()) {
    w.AddString("tokenizer.chat_template", o.chat_template);
  }
  return static_cast<int64_t>(tokens.size());
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
  absl::StatusOr<TypeMix> mix = ParseTypeMix(o.dtype);
  if (!mix.ok()) return mix.status();
  auto w = std::make_unique<GgufWriter>();
  w->AddString("general.architecture", "llama");
  w->AddString("general.name", o.name);
  w->AddUint32("general.file_type", mix->file_type);
  w->AddUint32("llama.context_length", o.context_length);
  w->AddUint32("llama.embedding_length", o.dim);
  w->AddUint32("llama.block_count", o.n_layers);
  w->AddUint32("llama.feed_forward_length", o.hidden_dim);
  w->AddUint32("llama.attention.head_count", o.n_heads);
  w->AddUint32("llama.attention.head_count_kv", o.n_kv_heads);
  w->AddFloat32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w->AddFloat32("llama.rope.freq_base", 10000.0f);
  w->AddUint32("llama.rope.dimension_count", c.head_dim);

  absl::StatusOr<int64_t> vocab_size = AddTokenizer(o, *w);
  if (!vocab_size.ok()) return vocab_size.status();

  const int64_t dim = c.dim, hidden = c.hidden_dim, q_dim = c.q_dim(),
                kv_dim = c.kv_dim();
  const float residual_scale = 1.0f / std::sqrt(2.0f * c.n_layers);
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols,
                    float std_dev) {
    const GgmlType type = mix->TypeFor(name, c.n_layers, cols);
    w->AddTensor(name, {cols, rows}, type,
                 RandomProducer(TensorSeed(o.seed, name), std_dev, type, cols));
  };
  auto norm = [&](const std::string& name) {
    w->AddTensor(name, {dim}, GgmlType::kF32, Ones(dim));
  };
  matrix("token_embd.weight", *vocab_size, dim, 1.0f);
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
  matrix("output.weight", *vocab_size, dim,
         1.0f / std::sqrt(static_cast<float>(dim)));
  return w;
}

}  // namespace kvserve
