#include "core/attention/llama_order.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/util/llama_expf.h"

namespace kvserve::attention_internal {
namespace {

// The lane loops below vectorize; GCC builds them twice (AVX2 + FMA, and
// baseline x86-64, where std::fma is libm's: the same bits, slower) and
// picks one at load time.
#if defined(__GNUC__) && !defined(__clang__)
#define KVSERVE_LANE_CLONES \
  __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define KVSERVE_LANE_CLONES
#endif

// hsum_float_8's order.
float Hsum8(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// ggml_vec_dot_f32's reduction of its 4 × 8 lanes (lane t of vector j at
// a[8 * j + t]).
float Reduce32(const float* a) {
  float s[8];
  for (int t = 0; t < 8; ++t)
    s[t] = (a[t] + a[16 + t]) + (a[8 + t] + a[24 + t]);
  float h[4];
  for (int t = 0; t < 4; ++t) h[t] = s[t] + s[t + 4];
  return (h[0] + h[1]) + (h[2] + h[3]);
}

// acc[0, n) = fma(v[0, n), w, acc[0, n)).
KVSERVE_LANE_CLONES void Axpy(const float* v, float w, int n, float* acc) {
  for (int d = 0; d < n; ++d) acc[d] = std::fma(v[d], w, acc[d]);
}

}  // namespace

KVSERVE_LANE_CLONES float LlamaDotF32(const float* x, const float* y, int n) {
  float acc[32] = {};
  const int np = n & ~31;
  for (int i = 0; i < np; i += 32) {
    for (int l = 0; l < 32; ++l) acc[l] = std::fma(x[i + l], y[i + l], acc[l]);
  }
  float sum = Reduce32(acc);
  for (int i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

void LlamaOrderRows(const LlamaOrderArgs& a, const float* q, float* out,
                    std::vector<float>* scratch) {
  const BlockPoolOptions& po = a.pool->options();
  const int hd = po.head_dim, bt = po.block_tokens;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n = a.n_ctx - a.start;
  const int lanes = a.prompt ? 8 : 32;
  scratch->resize(n + int64_t{lanes} * hd);
  float* w = scratch->data();
  float* acc = w + n;
  // Position p's K or V row within its block ([kv_head][token][head_dim]).
  auto offset = [&](int64_t p) {
    return (int64_t{a.group} * bt + p % bt) * hd;
  };
  for (int h = 0; h < a.kv_mul; ++h) {
    const float* qh = q + int64_t{h} * hd;
    float max = -INFINITY;
    for (int64_t p = a.start; p < a.n_ctx; ++p) {
      const float* k = static_cast<const float*>(
                           a.pool->KeyBlock(a.layer, a.blocks[p / bt])) +
                       offset(p);
      const float s = LlamaDotF32(k, qh, hd) * scale;
      w[p - a.start] = s;
      max = std::max(max, s);
    }
    for (int64_t i = 0; i < n; ++i) w[i] = LlamaExpf(w[i] - max);
    double z = 0.0;
    for (int64_t c = a.start / 8; c * 8 < a.n_ctx; ++c) {
      float v[8];
      for (int t = 0; t < 8; ++t) {
        const int64_t p = c * 8 + t;
        v[t] = p >= a.start && p < a.n_ctx ? w[p - a.start] : 0.0f;
      }
      z += static_cast<double>(Hsum8(v));
    }
    const float inv = static_cast<float>(1.0 / z);
    std::fill(acc, acc + int64_t{lanes} * hd, 0.0f);
    for (int64_t p = a.start; p < a.n_ctx; ++p) {
      const float* v = static_cast<const float*>(
                           a.pool->ValueBlock(a.layer, a.blocks[p / bt])) +
                       offset(p);
      Axpy(v, w[p - a.start] * inv, hd, acc + (p % lanes) * hd);
    }
    float* o = out + int64_t{h} * hd;
    for (int d = 0; d < hd; ++d) {
      float col[32];
      for (int l = 0; l < lanes; ++l) col[l] = acc[int64_t{l} * hd + d];
      o[d] = a.prompt ? Hsum8(col) : Reduce32(col);
    }
  }
}

}  // namespace kvserve::attention_internal
