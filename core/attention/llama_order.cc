#include "core/attention/llama_order.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/util/check.h"
#include "core/util/fma_clones.h"
#include "core/util/llama_math.h"

namespace kvserve::attention_internal {
namespace {

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

// ggml_vec_dot_f32's Σ x[i]·y[i]: 4 × 8 f32 lanes over each 32 elements,
// reduced lane-wise then across, the last n % 32 fma'd after.
inline float DotF32(const float* x, const float* y, int n) {
  float acc[32] = {};
  const int np = n & ~31;
  for (int i = 0; i < np; i += 32) {
    for (int l = 0; l < 32; ++l) acc[l] = std::fma(x[i + l], y[i + l], acc[l]);
  }
  float sum = Reduce32(acc);
  for (int i = np; i < n; ++i) sum = std::fma(x[i], y[i], sum);
  return sum;
}

// LlamaExpf on 8 lanes: the common path (|n| <= 126) written lane-wise so
// that it vectorizes, the rare lanes past it (scores more than ~87 below
// the max) again through LlamaExpf.
inline void Expf8(const float* x, float* y) {
  bool rare = false;
  for (int l = 0; l < 8; ++l) {
    const float z = std::fma(x[l], 0x1.715476p+0f, 0x1.8p23f);
    const float n = z - 0x1.8p23f;
    const float b =
        std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x[l]));
    const uint32_t e = std::bit_cast<uint32_t>(z) << 23;
    const float k = std::bit_cast<float>(e + 0x3f800000u);
    const float u = b * b;
    const float j =
        std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                          std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                 u, 0x1.ffffecp-1f * b);
    y[l] = std::fma(j, k, k);
    rare |= std::fabs(n) > 126.0f;
  }
  if (rare) {
    for (int l = 0; l < 8; ++l) y[l] = LlamaExpf(x[l]);
  }
}

// The group's rows: K and V are read once for its kv_mul heads (scores of
// every head per K row, every head's weighted sum per V row), block by
// block.
KVSERVE_FMA_CLONES void Rows(const LlamaOrderArgs& a, const float* q,
                             float* out, float* w, float* acc) {
  const BlockPoolOptions& po = a.pool->options();
  const int hd = po.head_dim, bt = po.block_tokens, heads = a.kv_mul;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t n = a.n_ctx - a.start;
  const int lanes = a.prompt ? 8 : 32;
  const int64_t group_offset = int64_t{a.group} * bt * hd;
  // Positions [p0, p1) of the block holding p0, and its K or V rows.
  auto each_block = [&](bool values, auto&& body) {
    for (int64_t p0 = a.start; p0 < a.n_ctx;) {
      const int64_t p1 = std::min(a.n_ctx, (p0 / bt + 1) * bt);
      const int32_t block = a.blocks[p0 / bt];
      const float* base =
          static_cast<const float*>(values ? a.pool->ValueBlock(a.layer, block)
                                           : a.pool->KeyBlock(a.layer, block)) +
          group_offset;
      for (int64_t p = p0; p < p1; ++p) body(p, base + (p % bt) * hd);
      p0 = p1;
    }
  };
  float max[64];
  for (int h = 0; h < heads; ++h) max[h] = -INFINITY;
  each_block(false, [&](int64_t p, const float* k) {
    for (int h = 0; h < heads; ++h) {
      const float s = DotF32(k, q + int64_t{h} * hd, hd) * scale;
      w[h * n + (p - a.start)] = s;
      max[h] = std::max(max[h], s);
    }
  });
  for (int h = 0; h < heads; ++h) {
    float* wh = w + h * n;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      float x[8];
      for (int l = 0; l < 8; ++l) x[l] = wh[i + l] - max[h];
      Expf8(x, wh + i);
    }
    for (; i < n; ++i) wh[i] = LlamaExpf(wh[i] - max[h]);
    double z = 0.0;
    for (int64_t c = a.start / 8; c * 8 < a.n_ctx; ++c) {
      float v[8];
      for (int t = 0; t < 8; ++t) {
        const int64_t p = c * 8 + t;
        v[t] = p >= a.start && p < a.n_ctx ? wh[p - a.start] : 0.0f;
      }
      z += static_cast<double>(HsumFloat8(v));
    }
    const float inv = static_cast<float>(1.0 / z);
    for (int64_t j = 0; j < n; ++j) wh[j] *= inv;
  }
  const int64_t head_acc = int64_t{lanes} * hd;
  std::fill(acc, acc + heads * head_acc, 0.0f);
  each_block(true, [&](int64_t p, const float* v) {
    for (int h = 0; h < heads; ++h) {
      const float wp = w[h * n + (p - a.start)];
      float* row = acc + h * head_acc + (p % lanes) * hd;
      for (int d = 0; d < hd; ++d) row[d] = std::fma(v[d], wp, row[d]);
    }
  });
  for (int h = 0; h < heads; ++h) {
    const float* ah = acc + h * head_acc;
    float* o = out + int64_t{h} * hd;
    for (int d = 0; d < hd; ++d) {
      float col[32];
      for (int l = 0; l < lanes; ++l) col[l] = ah[int64_t{l} * hd + d];
      o[d] = a.prompt ? HsumFloat8(col) : Reduce32(col);
    }
  }
}

}  // namespace

void LlamaOrderRows(const LlamaOrderArgs& a, const float* q, float* out,
                    std::vector<float>* scratch) {
  KVSERVE_CHECK(a.kv_mul <= 64);
  const BlockPoolOptions& po = a.pool->options();
  const int64_t n = a.n_ctx - a.start;
  const int lanes = a.prompt ? 8 : 32;
  scratch->resize(a.kv_mul * (n + int64_t{lanes} * po.head_dim));
  float* w = scratch->data();
  Rows(a, q, out, w, w + a.kv_mul * n);
}

}  // namespace kvserve::attention_internal
