#include "core/model/model.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <tuple>

#include "absl/strings/str_format.h"
#include "core/util/check.h"
#include "core/util/fma_clones.h"
#include "core/util/llama_math.h"
#include "core/util/status_macros.h"
#include "dnnl.hpp"

namespace kvserve {
namespace {

// out = x / rms(x) * w, over n elements. The sum of squares is accumulated
// in double and the mean rounded to float before eps is added, as ggml's
// CPU rms_norm computes it: a float sum differed from it by an ulp, enough
// to flip a rounding of the 8-bit activations that follow (the Q6_K and
// Q3_K goldens' step-0 logits moved by 0.5 and 0.4).
void RmsNorm(const float* x, const float* w, int n, float eps, float* out) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const float mean = static_cast<float>(ss / n);
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int i = 0; i < n; ++i) out[i] = w[i] * (scale * x[i]);
}

// Whether all n floats are finite: one pass over their bits that compilers
// vectorize at any ISA level (inf and NaN are the values whose exponent bits
// are all ones). 4 us for 32000 floats, 16 us for 128256 (SSE2 code, x86).
bool AllFinite(const float* x, int64_t n) {
  uint32_t non_finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    non_finite |= (bits & 0x7f800000u) == 0x7f800000u;
  }
  return non_finite == 0;
}

// x += y, over n elements.
void AddInPlace(const float* y, int64_t n, float* x) {
#pragma omp parallel for if (n > (int64_t{1} << 16))
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// hidden[i] = SiLU(g)·u for the elements [begin, end) of rows of `hidden`
// elements (gate_up: each row's gate then up), as ggml computes it
// (ggml_silu then ggml_mul): its vector exp on the elements in whole
// 8-float vectors of a row, libm's expf on the rest. Cloned for FMA CPUs
// (LlamaExpf's fmas are libm calls in the baseline clone).
KVSERVE_FMA_CLONES void SwiGlu(const float* gate_up, int64_t hidden,
                               int64_t begin, int64_t end, float* out) {
  const int64_t lanes = hidden - hidden % 8;
  for (int64_t i = begin; i < end;) {
    const int64_t row = i / hidden, row_end = std::min(end, (row + 1) * hidden);
    const float* gate = gate_up + row * 2 * hidden;
    const float* up = gate + hidden;
    for (; i < row_end; ++i) {
      const int64_t j = i % hidden;
      const float g = gate[j];
      const float e = j < lanes ? LlamaExpf(0.0f - g) : std::exp(-g);
      out[i] = g / (1.0f + e) * up[j];
    }
  }
}

// RoPE as ggml's CPU backend computes it, so that q and k are llama.cpp's
// to the bit (a 1-ulp difference there flips activation roundings later):
// angles θ_0 = pos, θ_{j+1} = θ_j·θ_scale in f32 (each divided by its
// frequency factor), their f32 cosf/sinf; pairs rotated as
// x0' = fma(x0, cos, −x1·sin), x1' = fma(x0, sin, x1·cos).
void RopeAngles(float pos, float theta_scale, const std::vector<float>& ff,
                int half, float* cos_sin) {
  float theta = pos;
  for (int j = 0; j < half; ++j) {
    const float t = ff.empty() ? theta : theta / ff[j];
    cos_sin[2 * j] = std::cos(t);
    cos_sin[2 * j + 1] = std::sin(t);
    theta *= theta_scale;
  }
}

// Pair i is (2i, 2i + 1), or (i, i + half) for split halves. Cloned for FMA
// CPUs (the default clone calls libm's fma: the same bits, slower).
KVSERVE_FMA_CLONES void RotateHeads(float* x, int n_heads, int head_dim,
                                    int half, bool halves,
                                    const float* cos_sin) {
  const int stride = halves ? 1 : 2, other = halves ? half : 1;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + h * head_dim;
    for (int i = 0; i < half; ++i) {
      const float cos = cos_sin[2 * i], sin = cos_sin[2 * i + 1];
      float* p = head + stride * i;
      const float x0 = p[0], x1 = p[other];
      p[0] = std::fma(x0, cos, -(x1 * sin));
      p[other] = std::fma(x0, sin, x1 * cos);
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const ModelWeights* weights, const BlockPool* pool,
    const ModelOptions& options) {
  const ModelConfig& c = weights->config;
  if (absl::Status s = c.Validate(); !s.ok()) return s;
  const BlockPoolOptions& p = pool->options();
  if (p.n_layers != c.n_layers || p.n_kv_heads != c.n_kv_heads ||
      p.head_dim != c.head_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "KV pool geometry (layers %d, kv heads %d, head_dim %d) does not "
        "match the model (%d, %d, %d)",
        p.n_layers, p.n_kv_heads, p.head_dim, c.n_layers, c.n_kv_heads,
        c.head_dim));
  }
  if (static_cast<int>(weights->layers.size()) != c.n_layers) {
    return absl::InvalidArgumentError("model has the wrong number of layers");
  }
  const AttentionPath path =
      options.llama_order ? AttentionPath::kLlamaOrder : AttentionPath::kAuto;
  auto attention =
      GqaAttention::Create(pool, {.n_heads = c.n_heads,
                                  .sliding_window = c.sliding_window,
                                  .decode_path = path,
                                  .prefill_path = path});
  if (!attention.ok()) return attention.status();
  std::unique_ptr<Model> model(new Model(weights, *std::move(attention)));
  model->options_ = options;
  if (absl::Status s = model->CreateLinears(options.max_batch_tokens);
      !s.ok()) {
    return s;
  }
  return model;
}

absl::Status Model::CreateLinears(int64_t max_rows) {
  auto make = [&](absl::Span<const WeightTensor> w, int64_t rows,
                  std::unique_ptr<Linear>* out) {
    absl::StatusOr<std::unique_ptr<Linear>> l =
        Linear::Create(w, {.max_rows = rows,
                           .gemv_max_rows = options_.gemv_max_rows,
                           .llama_order = options_.llama_order});
    if (l.ok()) *out = *std::move(l);
    return l.status();
  };
  // The output matrix sees one row per sequence that wants logits.
  if (absl::Status s = make({weights_->output}, max_rows, &output_); !s.ok()) {
    return s;
  }
  layers_.resize(weights_->layers.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& l = weights_->layers[i];
    LayerLinears& ll = layers_[i];
    const WeightTensor qkv[] = {l.wq, l.wk, l.wv};
    const WeightTensor gate_up[] = {l.w_gate, l.w_up};
    for (absl::Status s :
         {make(qkv, max_rows, &ll.wqkv), make({l.wo}, max_rows, &ll.wo),
          make(gate_up, max_rows, &ll.w_gate_up),
          make({l.w_down}, max_rows, &ll.w_down)}) {
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

Model::Model(const ModelWeights* weights,
             std::unique_ptr<GqaAttention> attention)
    : weights_(weights), attention_(std::move(attention)) {
  const ModelConfig& c = config();
  theta_scale_ =
      std::pow(c.rope_theta, -2.0f / static_cast<float>(c.rotary_dim()));
  const int q_dim = c.q_dim(), kv_dim = c.kv_dim();
  qkv_bias_.resize(weights->layers.size());
  for (size_t l = 0; l < weights->layers.size(); ++l) {
    const LayerWeights& lw = weights->layers[l];
    if (lw.bq.data == nullptr && lw.bk.data == nullptr &&
        lw.bv.data == nullptr) {
      continue;
    }
    std::vector<float>& b = qkv_bias_[l];
    b.assign(q_dim + 2 * kv_dim, 0.0f);
    for (auto [t, offset, n] : {std::tuple{&lw.bq, 0, q_dim},
                                {&lw.bk, q_dim, kv_dim},
                                {&lw.bv, q_dim + kv_dim, kv_dim}}) {
      if (t->data != nullptr) std::copy(t->f32(), t->f32() + n, &b[offset]);
    }
  }
}

void Model::Embed(int32_t token, float* out) const {
  const WeightTensor& e = weights_->token_embd;
  quant::Info(e.type)->dequantize(e.row(token), out, e.cols);
}

void Model::RopeInPlace(float* x, int n_heads, const float* cos_sin) const {
  const ModelConfig& c = config();
  RotateHeads(x, n_heads, c.head_dim, c.rotary_dim() / 2,
              c.rope_style == RopeStyle::kSplitHalves, cos_sin);
}

void Model::RotateAndStoreKv(int layer, int64_t row, BlockTable& kv,
                             int64_t pos) {
  const ModelConfig& c = config();
  const int q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const float* cos_sin = &cos_sin_[row * c.rotary_dim()];
  float* q = &qkv_[row * (q_dim + 2 * kv_dim)];
  float* k = q + q_dim;
  if (const std::vector<float>& bias = qkv_bias_[layer]; !bias.empty()) {
    for (int i = 0; i < q_dim + 2 * kv_dim; ++i) q[i] += bias[i];
  }
  RopeInPlace(q, c.n_heads, cos_sin);
  RopeInPlace(k, c.n_kv_heads, cos_sin);
  std::memcpy(&q_[row * q_dim], q, q_dim * sizeof(float));
  kv.WriteKv(layer, pos, k, k + kv_dim);
}

absl::StatusOr<absl::Span<const float>> Model::Forward(
    absl::Span<const SeqChunk> chunks) try {
  absl::StatusOr<absl::Span<const float>> logits = ForwardSteps(chunks);
  if (logits.ok()) KVSERVE_RETURN_IF_ERROR(CheckLogits(chunks, *logits));
  return logits;
} catch (const dnnl::error& e) {
  return absl::InternalError(
      absl::StrFormat("forward pass: oneDNN failed: %s", e.what()));
}

absl::Status Model::CheckLogits(absl::Span<const SeqChunk> chunks,
                                absl::Span<const float> logits) const {
  const int64_t vocab = config().vocab_size;
  int64_t row = 0;
  for (const SeqChunk& chunk : chunks) {
    if (!chunk.want_logits) continue;
    const float* r = &logits[row++ * vocab];
    if (AllFinite(r, vocab)) continue;
    int64_t id = 0;
    while (std::isfinite(r[id])) ++id;
    return absl::InternalError(absl::StrFormat(
        "the forward pass produced non-finite logits (%s) for a sequence at "
        "position %d (the first at token %d); the model's weights may be "
        "corrupt",
        std::isnan(r[id]) ? "NaN" : (r[id] > 0 ? "+inf" : "-inf"),
        chunk.start_pos + static_cast<int64_t>(chunk.tokens.size()) - 1, id));
  }
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> Model::ForwardSteps(
    absl::Span<const SeqChunk> chunks) {
  const ModelConfig& c = config();
  int64_t m = 0;
  int n_logits = 0;
  for (const SeqChunk& chunk : chunks) {
    for (int32_t t : chunk.tokens) {
      if (t < 0 || t >= c.vocab_size) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "token id %d is outside the vocabulary [0, %d)", t, c.vocab_size));
      }
    }
    const int64_t end = chunk.start_pos + chunk.tokens.size();
    if (chunk.tokens.empty() || end > c.context_length) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "chunk of %d tokens at position %d does not fit the context of %d",
          chunk.tokens.size(), chunk.start_pos, c.context_length));
    }
    KVSERVE_CHECK(chunk.kv != nullptr && chunk.kv->num_tokens() >= end);
    m += chunk.tokens.size();
    n_logits += chunk.want_logits ? 1 : 0;
  }
  const int dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const int hidden = c.hidden_dim, half = c.rotary_dim() / 2;
  const int qkv_dim = q_dim + 2 * kv_dim;
  x_.resize(m * dim);
  xb_.resize(m * dim);
  qkv_.resize(m * qkv_dim);
  q_.resize(m * q_dim);
  att_.resize(m * q_dim);
  gate_up_.resize(m * 2 * hidden);
  hidden_.resize(m * hidden);
  cos_sin_.resize(m * half * 2);

  // Embeddings and the rotation angles of every row.
  {
    int64_t row = 0;
    for (const SeqChunk& chunk : chunks) {
      for (size_t i = 0; i < chunk.tokens.size(); ++i, ++row) {
        Embed(chunk.tokens[i], &x_[row * dim]);
        RopeAngles(static_cast<float>(chunk.start_pos + i), theta_scale_,
                   weights_->rope_freq_factors, half,
                   &cos_sin_[row * half * 2]);
      }
    }
  }

  if (DecodesInTeam(chunks, m, n_logits)) {
    DecodeInTeam(chunks, m);
    return absl::Span<const float>(logits_);
  }

  // Single-token chunks attend together in one GqaDecode call.
  std::vector<SeqKv> decode_seqs;
  std::vector<int64_t> decode_rows;
  std::vector<float> decode_q, decode_out;

  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& lw = weights_->layers[layer];
    LayerLinears& ll = layers_[layer];

#pragma omp parallel for if (m > 8)
    for (int64_t r = 0; r < m; ++r) {
      RmsNorm(&x_[r * dim], lw.attn_norm.f32(), dim, c.norm_eps, &xb_[r * dim]);
    }
    KVSERVE_RETURN_IF_ERROR(ll.wqkv->Forward(xb_.data(), m, qkv_.data()));

    decode_seqs.clear();
    decode_rows.clear();
    int64_t row = 0;
    for (const SeqChunk& chunk : chunks) {
      const int64_t n = chunk.tokens.size();
      for (int64_t i = 0; i < n; ++i) {
        RotateAndStoreKv(layer, row + i, *chunk.kv, chunk.start_pos + i);
      }
      const SeqKv seq{chunk.kv->blocks(), chunk.start_pos + n};
      if (n == 1) {
        decode_seqs.push_back(seq);
        decode_rows.push_back(row);
      } else if (n > 1) {
        attention_->GqaPrefill(layer, seq, chunk.start_pos, n, &q_[row * q_dim],
                               &att_[row * q_dim]);
      }
      row += n;
    }
    if (!decode_seqs.empty()) {
      const int64_t b = decode_seqs.size();
      decode_q.resize(b * q_dim);
      decode_out.resize(b * q_dim);
      for (int64_t i = 0; i < b; ++i) {
        std::memcpy(&decode_q[i * q_dim], &q_[decode_rows[i] * q_dim],
                    q_dim * sizeof(float));
      }
      attention_->GqaDecode(layer, decode_seqs, decode_q.data(),
                            decode_out.data());
      for (int64_t i = 0; i < b; ++i) {
        std::memcpy(&att_[decode_rows[i] * q_dim], &decode_out[i * q_dim],
                    q_dim * sizeof(float));
      }
    }

    KVSERVE_RETURN_IF_ERROR(ll.wo->Forward(att_.data(), m, xb_.data()));
    AddInPlace(xb_.data(), m * dim, x_.data());

#pragma omp parallel for if (m > 8)
    for (int64_t r = 0; r < m; ++r) {
      RmsNorm(&x_[r * dim], lw.ffn_norm.f32(), dim, c.norm_eps, &xb_[r * dim]);
    }
    KVSERVE_RETURN_IF_ERROR(
        ll.w_gate_up->Forward(xb_.data(), m, gate_up_.data()));
#pragma omp parallel for if (m > 8)
    for (int64_t r = 0; r < m; ++r) {
      SwiGlu(gate_up_.data(), hidden, r * hidden, (r + 1) * hidden,
             hidden_.data());
    }
    KVSERVE_RETURN_IF_ERROR(ll.w_down->Forward(hidden_.data(), m, xb_.data()));
    AddInPlace(xb_.data(), m * dim, x_.data());
  }

  last_.resize(static_cast<int64_t>(n_logits) * dim);
  logits_.resize(static_cast<int64_t>(n_logits) * c.vocab_size);
  int64_t row = 0;
  int out = 0;
  for (const SeqChunk& chunk : chunks) {
    row += chunk.tokens.size();
    if (!chunk.want_logits) continue;
    RmsNorm(&x_[(row - 1) * dim], weights_->output_norm.f32(), dim, c.norm_eps,
            &last_[out * dim]);
    ++out;
  }
  if (n_logits > 0) {
    KVSERVE_RETURN_IF_ERROR(
        output_->Forward(last_.data(), n_logits, logits_.data()));
  }
  return absl::Span<const float>(logits_);
}

bool Model::DecodesInTeam(absl::Span<const SeqChunk> chunks, int64_t m,
                          int n_logits) const {
  if (!options_.decode_in_team || omp_get_max_threads() < 2 || n_logits == 0 ||
      !attention_->DecodeRunsInTeam() || !output_->RunsInTeam(n_logits)) {
    return false;
  }
  for (const SeqChunk& chunk : chunks) {
    if (chunk.tokens.size() != 1) return false;
  }
  for (const LayerLinears& ll : layers_) {
    for (const Linear* l :
         {ll.wqkv.get(), ll.wo.get(), ll.w_gate_up.get(), ll.w_down.get()}) {
      if (!l->RunsInTeam(m)) return false;
    }
  }
  return true;
}

void Model::DecodeInTeam(absl::Span<const SeqChunk> chunks, int64_t m) {
  const ModelConfig& c = config();
  const int dim = c.dim, hidden = c.hidden_dim;
  std::vector<SeqKv> seqs;  // row r is chunk r's one token
  for (const SeqChunk& chunk : chunks) {
    seqs.push_back(SeqKv{chunk.kv->blocks(), chunk.start_pos + 1});
  }
  int n_logits = 0;
  for (const SeqChunk& chunk : chunks) n_logits += chunk.want_logits ? 1 : 0;
  last_.resize(static_cast<int64_t>(n_logits) * dim);
  logits_.resize(static_cast<int64_t>(n_logits) * c.vocab_size);
  const int threads = omp_get_max_threads();
  SpinBarrier barrier(threads);
#pragma omp parallel num_threads(threads)
  {
    KVSERVE_CHECK(omp_get_num_threads() == threads);
    const Team team{omp_get_thread_num(), threads, &barrier};
    for (int layer = 0; layer < c.n_layers; ++layer) {
      const LayerWeights& lw = weights_->layers[layer];
      LayerLinears& ll = layers_[layer];
      if (team.leader()) {
        for (int64_t r = 0; r < m; ++r) {
          RmsNorm(&x_[r * dim], lw.attn_norm.f32(), dim, c.norm_eps,
                  &xb_[r * dim]);
        }
      }
      team.Sync();
      ll.wqkv->ForwardInTeam(xb_.data(), m, qkv_.data(), team);
      team.Sync();
      if (team.leader()) {
        for (int64_t r = 0; r < m; ++r) {
          RotateAndStoreKv(layer, r, *chunks[r].kv, chunks[r].start_pos);
        }
      }
      team.Sync();
      attention_->GqaDecodeInTeam(layer, seqs, q_.data(), att_.data(), team);
      team.Sync();
      ll.wo->ForwardInTeam(att_.data(), m, xb_.data(), team);
      team.Sync();
      if (team.leader()) {
        for (int64_t i = 0; i < m * dim; ++i) x_[i] += xb_[i];
        for (int64_t r = 0; r < m; ++r) {
          RmsNorm(&x_[r * dim], lw.ffn_norm.f32(), dim, c.norm_eps,
                  &xb_[r * dim]);
        }
      }
      team.Sync();
      ll.w_gate_up->ForwardInTeam(xb_.data(), m, gate_up_.data(), team);
      team.Sync();
      int64_t begin = 0, end = 0;
      team.Share(m * hidden, 16, &begin, &end);
      SwiGlu(gate_up_.data(), hidden, begin, end, hidden_.data());
      team.Sync();
      ll.w_down->ForwardInTeam(hidden_.data(), m, xb_.data(), team);
      team.Sync();
      if (team.leader()) {
        for (int64_t i = 0; i < m * dim; ++i) x_[i] += xb_[i];
      }
    }
    if (team.leader()) {
      int out = 0;
      for (int64_t r = 0; r < m; ++r) {
        if (!chunks[r].want_logits) continue;
        RmsNorm(&x_[r * dim], weights_->output_norm.f32(), dim, c.norm_eps,
                &last_[out * dim]);
        ++out;
      }
    }
    team.Sync();
    output_->ForwardInTeam(last_.data(), n_logits, logits_.data(), team);
  }
}

}  // namespace kvserve
