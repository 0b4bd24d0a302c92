#include "core/model/builtin_model.h"

#include <cmath>
#include <vector>

#include "core/dnnl/linear.h"
#include "core/model/fingerprint.h"
#include "core/tokenizer/vocab.h"

namespace kvserve {
namespace {

// splitmix64: a tiny generator whose output is fixed by its seed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Symmetric() {
    return static_cast<float>((Next() >> 40) * 0x1.0p-24 * 2.0 - 1.0);
  }

 private:
  uint64_t state_;
};

class WeightBuilder {
 public:
  WeightBuilder(ModelWeights* w, DType dtype, uint64_t seed)
      : w_(w), dtype_(dtype), rng_(seed) {}

  WeightTensor Matrix(int64_t rows, int64_t cols) {
    const float scale = std::sqrt(3.0f / static_cast<float>(cols));
    std::vector<float> values(rows * cols);
    for (float& v : values) v = scale * rng_.Symmetric();
    if (dtype_ == DType::kF32) return Keep(std::move(values), rows, cols);
    auto bits = std::make_shared<std::vector<uint16_t>>(values.size());
    ConvertF32ToBf16(values.data(), values.size(), bits->data());
    w_->storage.push_back(bits);
    return WeightTensor{DType::kBF16, rows, cols, bits->data()};
  }

  WeightTensor Ones(int64_t n) {
    return Keep(std::vector<float>(n, 1.0f), 1, n);
  }

 private:
  WeightTensor Keep(std::vector<float> values, int64_t rows, int64_t cols) {
    auto owned = std::make_shared<std::vector<float>>(std::move(values));
    w_->storage.push_back(owned);
    return WeightTensor{DType::kF32, rows, cols, owned->data()};
  }

  ModelWeights* w_;
  DType dtype_;
  SplitMix64 rng_;
};

}  // namespace

ModelConfig BuiltinModelConfig() {
  ModelConfig c;
  c.n_layers = 4;
  c.dim = 256;
  c.hidden_dim = 768;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 32;
  c.vocab_size = ByteLevelVocab().size();
  c.context_length = 2048;
  c.norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  return c;
}

std::unique_ptr<ModelWeights> MakeRandomWeights(const ModelConfig& config,
                                                DType dtype, uint64_t seed) {
  auto w = std::make_unique<ModelWeights>();
  w->config = config;
  WeightBuilder b(w.get(), dtype, seed);
  const ModelConfig& c = config;
  w->token_embd = b.Matrix(c.vocab_size, c.dim);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights lw;
    lw.attn_norm = b.Ones(c.dim);
    lw.wq = b.Matrix(c.q_dim(), c.dim);
    lw.wk = b.Matrix(c.kv_dim(), c.dim);
    lw.wv = b.Matrix(c.kv_dim(), c.dim);
    lw.wo = b.Matrix(c.dim, c.q_dim());
    lw.ffn_norm = b.Ones(c.dim);
    lw.w_gate = b.Matrix(c.hidden_dim, c.dim);
    lw.w_down = b.Matrix(c.dim, c.hidden_dim);
    lw.w_up = b.Matrix(c.hidden_dim, c.dim);
    w->layers.push_back(lw);
  }
  w->output_norm = b.Ones(c.dim);
  w->output = b.Matrix(c.vocab_size, c.dim);
  Fingerprint fp;
  auto add = [&fp](const WeightTensor& t) { fp.Add(t.data, t.bytes()); };
  add(w->token_embd);
  for (const LayerWeights& l : w->layers) {
    for (const WeightTensor* t : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo,
                                  &l.ffn_norm, &l.w_gate, &l.w_down, &l.w_up}) {
      add(*t);
    }
  }
  add(w->output_norm);
  add(w->output);
  w->fingerprint = fp.Hex();
  return w;
}

std::unique_ptr<ModelWeights> MakeBuiltinModel() {
  std::unique_ptr<ModelWeights> w =
      MakeRandomWeights(BuiltinModelConfig(), DType::kF32, 0x6b7673657276ULL);
  w->name = "kvserve-builtin";
  return w;
}

}  // namespace kvserve
