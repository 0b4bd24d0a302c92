// The K-quant family: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K weights and Q8_K
// activations. Block layouts, dequantization and the reference quantizers
// follow ggml (ggml-common.h, ggml-quants.c: dequantize_row_*,
// quantize_row_*_ref without an importance matrix); the dot products use
// the decoded form described in quant_kquants.h. SIMD kernels are in
// quant_kquants_x86.cc.
#include "core/quant/quant_kquants.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/quant/quant_internal.h"
#include "core/util/fp16.h"
#include "core/util/llama_math.h"

namespace kvserve::quant::internal {
namespace kquants {
namespace {

// ggml's GROUP_MAX_EPS: groups whose largest |x| is below it are all zero.
constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, for |x| < 2^22 (ggml's nearest_int):
// adding 1.5·2^23 leaves the integer in the low mantissa bits.
inline int NearestInt(float x) {
  const float v = x + 12582912.0f;
  return static_cast<int>(std::bit_cast<uint32_t>(v) & 0x007fffffu) -
         0x00400000;
}

// 6-bit scale and min j (0..7) of a Q4_K/Q5_K block (get_scale_min_k4):
// bytes 0..3 hold scales 0..3 and 4..7 mins 0..3 in their low 6 bits;
// scales/mins 4..7 have their low 4 bits in bytes 8..11 (scale low nibble,
// min high nibble) and their top 2 bits in the top bits of bytes 0..7.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xf) | (q[j - 4] >> 6) << 4);
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | (q[j] >> 6) << 4);
  }
}

// The inverse of ScaleMinK4 for all eight pairs.
void PackScaleMinK4(const uint8_t* ls, const uint8_t* lm, uint8_t* q) {
  std::memset(q, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      q[j] = ls[j];
      q[j + 4] = lm[j];
    } else {
      q[j + 4] = static_cast<uint8_t>((ls[j] & 0xf) | (lm[j] & 0xf) << 4);
      q[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      q[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
}

// Q3_K's 6-bit scale j (0..15), before the −32 offset: low 4 bits in the
// low (j < 8) or high (j >= 8) nibble of byte j % 8, top 2 bits in byte
// 8 + j % 4 at bit 2·(j / 4).
inline int ScaleQ3K(int j, const uint8_t* q) {
  const int low = j < 8 ? q[j] & 0xf : q[j - 8] >> 4;
  return low | ((q[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
}

// ---------------------------------------------------------------------------
// Dequantization: ggml's formulas, in ggml's order of float operations.

// Q2_K, Q3_K and Q6_K walk 16-element sub-blocks: element 16j + t is
// 128h + 32c + l with h = j / 8, c = (j / 2) % 4, l = 16(j % 2) + t.
void DequantizeQ2K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ2K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const BlockQ2K& b = blocks[i];
    const float d = Fp16ToFloat(b.d);
    const float dmin = Fp16ToFloat(b.dmin);
    for (int j = 0; j < 16; ++j) {
      // Bits 2c of qs[32h + l].
      const uint8_t* q = b.qs + 32 * (j / 8) + 16 * (j % 2);
      const int shift = 2 * ((j / 2) % 4);
      const float dl = d * (b.scales[j] & 0xf);
      const float ml = dmin * (b.scales[j] >> 4);
      float* y = dst + i * kQK + 16 * j;
      for (int t = 0; t < 16; ++t) y[t] = dl * ((q[t] >> shift) & 3) - ml;
    }
  }
}

void DequantizeQ3K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ3K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const BlockQ3K& b = blocks[i];
    const float d = Fp16ToFloat(b.d);
    for (int j = 0; j < 16; ++j) {
      // Low bits as Q2_K; the high bit is bit 4h + c of hmask[l].
      const int l0 = 16 * (j % 2);
      const uint8_t* q = b.qs + 32 * (j / 8) + l0;
      const uint8_t* hm = b.hmask + l0;
      const int shift = 2 * ((j / 2) % 4);
      const int hbit = j / 2;
      const float dl = d * (ScaleQ3K(j, b.scales) - 32);
      float* y = dst + i * kQK + 16 * j;
      for (int t = 0; t < 16; ++t) {
        const int low = (q[t] >> shift) & 3;
        y[t] = dl * (low - ((hm[t] >> hbit) & 1 ? 0 : 4));
      }
    }
  }
}

// Q4_K and Q5_K: eight groups of 32 with 6-bit scales and mins. Group
// g = 2c + half is nibble `half` of qs[32c, 32c + 32); Q5_K's fifth bit of
// element 32g + l is bit g of qh[l].
template <typename Block, bool kFifthBit>
void DequantizeScaleMin(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const Block& b = blocks[i];
    const float d = Fp16ToFloat(b.d);
    const float dmin = Fp16ToFloat(b.dmin);
    float* y = dst + i * kQK;
    for (int g = 0; g < 8; ++g) {
      uint8_t sc, m;
      ScaleMinK4(g, b.scales, &sc, &m);
      const float dl = d * sc;
      const float ml = dmin * m;
      const uint8_t* q = b.qs + 32 * (g / 2);
      const int shift = 4 * (g % 2);
      for (int l = 0; l < 32; ++l) {
        int v = (q[l] >> shift) & 0xf;
        if constexpr (kFifthBit) v += (b.qh[l] >> g) & 1 ? 16 : 0;
        y[32 * g + l] = dl * v - ml;
      }
    }
  }
}

void DequantizeQ4K(const void* src, float* dst, int64_t n) {
  DequantizeScaleMin<BlockQ4K, false>(src, dst, n);
}

void DequantizeQ5K(const void* src, float* dst, int64_t n) {
  DequantizeScaleMin<BlockQ5K, true>(src, dst, n);
}

void DequantizeQ6K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ6K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const BlockQ6K& b = blocks[i];
    const float d = Fp16ToFloat(b.d);
    for (int j = 0; j < 16; ++j) {
      // Low 4 bits: nibble c / 2 of ql[64h + 32(c % 2) + l]; high 2 bits:
      // bits 2c of qh[32h + l].
      const int h = j / 8, c = (j / 2) % 4, l0 = 16 * (j % 2);
      const uint8_t* ql = b.ql + 64 * h + 32 * (c % 2) + l0;
      const uint8_t* qh = b.qh + 32 * h + l0;
      const int lshift = 4 * (c / 2), hshift = 2 * c;
      const float dl = d * b.scales[j];
      float* y = dst + i * kQK + 16 * j;
      for (int t = 0; t < 16; ++t) {
        const int q = ((ql[t] >> lshift) & 0xf) | ((qh[t] >> hshift) & 3) << 4;
        y[t] = dl * (q - 32);
      }
    }
  }
}

void DequantizeQ8K(const void* src, float* dst, int64_t n) {
  const auto* blocks = static_cast<const BlockQ8K*>(src);
  for (int64_t i = 0; i < n / kQK; ++i) {
    for (int e = 0; e < kQK; ++e) {
      dst[i * kQK + e] = blocks[i].d * blocks[i].qs[e];
    }
  }
}

// ---------------------------------------------------------------------------
// Reference quantizers (ggml's, no importance matrix).

// Scale for n values as signed quants l in [−nmax, nmax): starting from
// −nmax / (the value of largest magnitude), tries 18 nearby scales and keeps
// the one minimising Σ x²·(x − scale·l)². L gets l + nmax (ggml's
// make_qx_quants with rmse_type 1 and no weights).
float MakeQxQuants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  auto quant = [&](float iscale, int i) {
    return std::max(-nmax, std::min(nmax - 1, NearestInt(iscale * x[i])));
  };
  float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = quant(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = quant(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * l;
      suml2 += w * l * l;
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i)
        L[i] = static_cast<int8_t>(quant(iscale, i) + nmax);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's sub-block scale: signed quants in [−nmax, nmax) from −nmax / max,
// then up to five passes moving single quants to where they lower the
// x²-weighted error (ggml's make_q3_quants with do_rmse). L gets l + nmax.
float MakeQ3Quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l =
        std::max(-nmax, std::min(nmax - 1, NearestInt(iscale * x[i])));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (slx > 0) {
        float sl2 = suml2 - w * L[i] * L[i];
        int new_l = NearestInt(x[i] * sl2 / slx);
        new_l = std::max(-nmax, std::min(nmax - 1, new_l));
        if (new_l != L[i]) {
          slx += w * x[i] * new_l;
          sl2 += w * new_l * new_l;
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// Scale and min for x ≈ scale·l − min, l in [0, nmax]: from the range,
// then nstep + 1 trial scales (rmin + rdelta·is + nmax) / range, each with
// the weighted least-squares scale and min for its quants, keeping the
// lowest weighted error (absolute if use_mad, else squared). The min is
// never positive; *the_min gets −min (ggml's make_qkx2_quants).
float MakeQkx2Quants(int n, int nmax, const float* x, const float* weights,
                     uint8_t* L, float* the_min, uint8_t* Laux, float rmin,
                     float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    *the_min = -min;
    return 0.0f;
  }
  auto quant = [&](float iscale, int i) {
    return std::max(0, std::min(nmax, NearestInt(iscale * (x[i] - min))));
  };
  auto error = [&](float diff) {
    return use_mad ? std::fabs(diff) : diff * diff;
  };
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(quant(iscale, i));
    best_error += weights[i] * error(scale * L[i] + min - x[i]);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = quant(iscale, i);
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      sum_l += w * l;
      sum_l2 += w * l * l;
      sum_xl += w * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        cur_error += weights[i] * error(this_scale * Laux[i] + this_min - x[i]);
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

// Packs 2-bit quants L[0, 256) as Q2_K/Q3_K's qs: element 128h + 32j + l
// in bits 2j of byte 32h + l.
void Pack2Bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* q = L + 128 * h + l;
      qs[32 * h + l] =
          static_cast<uint8_t>(q[0] | q[32] << 2 | q[64] << 4 | q[96] << 6);
    }
  }
}

void QuantizeQ2K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ2K*>(dst);
  constexpr float kQ4Scale = 15.0f;
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    BlockQ2K& y = blocks[i];
    uint8_t L[kQK], Laux[16];
    float weights[16], scales[16], mins[16];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = MakeQkx2Quants(16, 3, x + 16 * j, weights, L + 16 * j,
                                 &mins[j], Laux, -0.5f, 0.1f, 15, true);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    if (max_scale > 0) {
      const float iscale = kQ4Scale / max_scale;
      for (int j = 0; j < 16; ++j) {
        y.scales[j] = static_cast<uint8_t>(NearestInt(iscale * scales[j]));
      }
      y.d = FloatToFp16(max_scale / kQ4Scale);
    } else {
      std::fill(y.scales, y.scales + 16, uint8_t{0});
      y.d = FloatToFp16(0.0f);
    }
    if (max_min > 0) {
      const float iscale = kQ4Scale / max_min;
      for (int j = 0; j < 16; ++j) {
        y.scales[j] |= static_cast<uint8_t>(NearestInt(iscale * mins[j]) << 4);
      }
      y.dmin = FloatToFp16(max_min / kQ4Scale);
    } else {
      y.dmin = FloatToFp16(0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = Fp16ToFloat(y.d) * (y.scales[j] & 0xf);
      if (d == 0) continue;
      const float dm = Fp16ToFloat(y.dmin) * (y.scales[j] >> 4);
      for (int l = 0; l < 16; ++l) {
        const int q = NearestInt((x[16 * j + l] + dm) / d);
        L[16 * j + l] = static_cast<uint8_t>(std::max(0, std::min(3, q)));
      }
    }
    Pack2Bit(L, y.qs);
  }
}

void QuantizeQ3K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ3K*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    BlockQ3K& y = blocks[i];
    int8_t L[kQK];
    float scales[16];
    float max_scale = 0, amax = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = MakeQ3Quants(16, 4, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    std::memset(y.scales, 0, sizeof(y.scales));
    if (max_scale != 0) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l =
            std::max(-32, std::min(31, NearestInt(iscale * scales[j]))) + 32;
        if (j < 8) {
          y.scales[j] = static_cast<uint8_t>(l & 0xf);
        } else {
          y.scales[j - 8] |= static_cast<uint8_t>((l & 0xf) << 4);
        }
        y.scales[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
      }
      y.d = FloatToFp16(1 / iscale);
    } else {
      y.d = FloatToFp16(0.0f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = Fp16ToFloat(y.d) * (ScaleQ3K(j, y.scales) - 32);
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = NearestInt(x[16 * j + l] / d);
        L[16 * j + l] = static_cast<int8_t>(std::max(-4, std::min(3, q)) + 4);
      }
    }
    // Bit 2 of element e goes to bit e / 32 of hmask[e % 32].
    std::memset(y.hmask, 0, sizeof(y.hmask));
    uint8_t low[kQK];
    for (int e = 0; e < kQK; ++e) {
      if (L[e] > 3) y.hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
      low[e] = static_cast<uint8_t>(L[e] & 3);
    }
    Pack2Bit(low, y.qs);
  }
}

// Q4_K and Q5_K (nmax 15 or 31): per 32 elements a scale and a min by
// make_qkx2_quants, both quantized to 6 bits against the block's largest.
// L gets the final quants.
template <typename Block>
void QuantizeScaleMinBlock(const float* x, int nmax, float rmin, int nstep,
                           Block* y, uint8_t* L) {
  uint8_t Laux[32];
  float weights[32], scales[8], mins[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = MakeQkx2Quants(32, nmax, x + 32 * j, weights, L + 32 * j,
                               &mins[j], Laux, rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] =
        static_cast<uint8_t>(std::min(63, NearestInt(inv_scale * scales[j])));
    lm[j] = static_cast<uint8_t>(std::min(63, NearestInt(inv_min * mins[j])));
  }
  PackScaleMinK4(ls, lm, y->scales);
  y->d = FloatToFp16(max_scale / 63.0f);
  y->dmin = FloatToFp16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, y->scales, &sc, &m);
    const float d = Fp16ToFloat(y->d) * sc;
    if (d == 0) continue;
    const float dm = Fp16ToFloat(y->dmin) * m;
    for (int l = 0; l < 32; ++l) {
      const int q = NearestInt((x[32 * j + l] + dm) / d);
      L[32 * j + l] = static_cast<uint8_t>(std::max(0, std::min(nmax, q)));
    }
  }
}

void QuantizeQ4K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ4K*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    uint8_t L[kQK];
    QuantizeScaleMinBlock(src + i * kQK, 15, -1.0f, 20, &blocks[i], L);
    // Group 2c in the low nibbles of qs[32c, 32c + 32), 2c + 1 in the high.
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        blocks[i].qs[32 * c + l] =
            static_cast<uint8_t>(L[64 * c + l] | L[64 * c + 32 + l] << 4);
      }
    }
  }
}

void QuantizeQ5K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ5K*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    BlockQ5K& y = blocks[i];
    uint8_t L[kQK];
    QuantizeScaleMinBlock(src + i * kQK, 31, -0.5f, 15, &y, L);
    std::memset(y.qh, 0, sizeof(y.qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int q0 = L[64 * c + l], q1 = L[64 * c + 32 + l];
        y.qh[l] |= static_cast<uint8_t>((q0 >> 4) << (2 * c) |
                                        (q1 >> 4) << (2 * c + 1));
        y.qs[32 * c + l] = static_cast<uint8_t>((q0 & 0xf) | (q1 & 0xf) << 4);
      }
    }
  }
}

void QuantizeQ6K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ6K*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    BlockQ6K& y = blocks[i];
    int8_t L[kQK];
    float scales[16];
    float max_scale = 0, max_abs_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = MakeQxQuants(16, 32, x + 16 * j, L + 16 * j);
      if (std::fabs(scales[j]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y.d = FloatToFp16(1 / iscale);
    for (int j = 0; j < 16; ++j) {
      y.scales[j] =
          static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[j])));
    }
    for (int j = 0; j < 16; ++j) {
      const float d = Fp16ToFloat(y.d) * y.scales[j];
      if (d == 0) continue;
      for (int l = 0; l < 16; ++l) {
        const int q = NearestInt(x[16 * j + l] / d);
        L[16 * j + l] =
            static_cast<int8_t>(std::max(-32, std::min(31, q)) + 32);
      }
    }
    // Element 128h + 32j + l: low nibble in ql[64h + 32(j % 2) + l] (low
    // half for j < 2), high 2 bits at bits 2j of qh[32h + l].
    for (int h = 0; h < 2; ++h) {
      for (int l = 0; l < 32; ++l) {
        const int8_t* q = L + 128 * h + l;
        y.ql[64 * h + l] =
            static_cast<uint8_t>((q[0] & 0xf) | (q[64] & 0xf) << 4);
        y.ql[64 * h + 32 + l] =
            static_cast<uint8_t>((q[32] & 0xf) | (q[96] & 0xf) << 4);
        y.qh[32 * h + l] =
            static_cast<uint8_t>(q[0] >> 4 | (q[32] >> 4) << 2 |
                                 (q[64] >> 4) << 4 | (q[96] >> 4) << 6);
      }
    }
  }
}

// d = −max/127 where max is the value of largest magnitude (ggml's sign
// convention: that value quantizes to −127), quants clamped to 127.
void QuantizeQ8K(const float* src, void* dst, int64_t n) {
  auto* blocks = static_cast<BlockQ8K*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    const float* x = src + i * kQK;
    BlockQ8K& y = blocks[i];
    float max = 0, amax = 0;
    for (int e = 0; e < kQK; ++e) {
      if (std::fabs(x[e]) > amax) {
        amax = std::fabs(x[e]);
        max = x[e];
      }
    }
    if (amax == 0) {
      std::memset(&y, 0, sizeof(y));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int e = 0; e < kQK; ++e) {
      y.qs[e] = static_cast<int8_t>(std::min(127, NearestInt(iscale * x[e])));
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y.qs[16 * j + l];
      y.bsums[j] = static_cast<int16_t>(sum);
    }
    y.d = 1 / iscale;
  }
}

// ---------------------------------------------------------------------------
// Scalar kernels: each block decoded once (quant_kquants.h), then integer
// dot products with up to kTile activation rows.

struct Decoded {
  uint8_t u[kQK];
  int16_t s[16], b[16];
  float d_main, d_bias;
};

void DecodeQ2K(const uint8_t* p, Decoded* o) {
  const auto& b = *reinterpret_cast<const BlockQ2K*>(p);
  for (int e = 0; e < kQK; ++e) {
    o->u[e] = static_cast<uint8_t>(
        (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3);
  }
  for (int j = 0; j < 16; ++j) {
    o->s[j] = b.scales[j] & 0xf;
    o->b[j] = b.scales[j] >> 4;
  }
  o->d_main = Fp16ToFloat(b.d);
  o->d_bias = Fp16ToFloat(b.dmin);
}

void DecodeQ3K(const uint8_t* p, Decoded* o) {
  const auto& b = *reinterpret_cast<const BlockQ3K*>(p);
  for (int e = 0; e < kQK; ++e) {
    const int low = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    const int high = (b.hmask[e % 32] >> (e / 32)) & 1;
    o->u[e] = static_cast<uint8_t>(low | high << 2);
  }
  for (int j = 0; j < 16; ++j) {
    o->s[j] = static_cast<int16_t>(ScaleQ3K(j, b.scales) - 32);
    o->b[j] = static_cast<int16_t>(4 * o->s[j]);
  }
  o->d_main = o->d_bias = Fp16ToFloat(b.d);
}

template <typename Block, bool kFifthBit>
void DecodeScaleMin(const uint8_t* p, Decoded* o) {
  const auto& b = *reinterpret_cast<const Block*>(p);
  for (int g = 0; g < 8; ++g) {
    uint8_t sc, m;
    ScaleMinK4(g, b.scales, &sc, &m);
    o->s[2 * g] = o->s[2 * g + 1] = sc;
    o->b[2 * g] = o->b[2 * g + 1] = m;
    for (int l = 0; l < 32; ++l) {
      int q = (b.qs[32 * (g / 2) + l] >> (4 * (g % 2))) & 0xf;
      if constexpr (kFifthBit) q |= ((b.qh[l] >> g) & 1) << 4;
      o->u[32 * g + l] = static_cast<uint8_t>(q);
    }
  }
  o->d_main = Fp16ToFloat(b.d);
  o->d_bias = Fp16ToFloat(b.dmin);
}

void DecodeQ6K(const uint8_t* p, Decoded* o) {
  const auto& b = *reinterpret_cast<const BlockQ6K*>(p);
  for (int e = 0; e < kQK; ++e) {
    const int h = e / 128, j = (e / 32) % 4, l = e % 32;
    const int low = (b.ql[64 * h + 32 * (j % 2) + l] >> (4 * (j / 2))) & 0xf;
    const int high = (b.qh[32 * h + l] >> (2 * j)) & 3;
    o->u[e] = static_cast<uint8_t>(low | high << 4);
  }
  for (int j = 0; j < 16; ++j) {
    o->s[j] = b.scales[j];
    o->b[j] = static_cast<int16_t>(32 * b.scales[j]);
  }
  o->d_main = o->d_bias = Fp16ToFloat(b.d);
}

// One weight row's super-block against one activation block in ggml's
// float order (quant_kquants_simd.h), as every SIMD level computes it.
struct Sums {
  float acc[8] = {};
  float acc_m[4] = {};
  float summs = 0.0f;
};

template <int kKind>
void AddBlock(const Decoded& dec, const BlockQ8K& xb, Sums* s) {
  constexpr int kOff = kKind == 3 ? 4 : kKind == 6 ? 32 : 0;
  int32_t lanes[8] = {};
  for (int e = 0; e < kQK; ++e) {
    lanes[(e % 32) / 4] += dec.s[e / 16] * (dec.u[e] - kOff) * xb.qs[e];
  }
  const float d = xb.d * dec.d_main;
  if constexpr (kKind == 2 || kKind == 4 || kKind == 5) {
    // Lane j of ggml's mins·bsums: b[2j]·bsums[2j] + b[2j + 1]·bsums[2j + 1].
    int32_t mins[8];
    for (int j = 0; j < 8; ++j) {
      mins[j] = dec.b[2 * j] * xb.bsums[2 * j] +
                dec.b[2 * j + 1] * xb.bsums[2 * j + 1];
    }
    const float dmin = -xb.d * dec.d_bias;
    if constexpr (kKind == 2) {
      for (int j = 0; j < 8; ++j) {
        s->acc[j] = std::fma(dmin, static_cast<float>(mins[j]), s->acc[j]);
      }
    } else if constexpr (kKind == 4) {
      for (int j = 0; j < 4; ++j) {
        s->acc_m[j] =
            std::fma(dmin, static_cast<float>(mins[2 * j] + mins[2 * j + 1]),
                     s->acc_m[j]);
      }
    } else {
      int32_t total = 0;
      for (int j = 0; j < 8; ++j) total += mins[j];
      s->summs = std::fma(dmin, static_cast<float>(total), s->summs);
    }
  }
  for (int j = 0; j < 8; ++j) {
    s->acc[j] = std::fma(d, static_cast<float>(lanes[j]), s->acc[j]);
  }
}

template <int kKind>
float Total(const Sums& s) {
  float y = HsumFloat8(s.acc);
  if constexpr (kKind == 4) {
    y += (s.acc_m[0] + s.acc_m[2]) + (s.acc_m[1] + s.acc_m[3]);
  } else if constexpr (kKind == 5) {
    y += s.summs;
  }
  return y;
}

template <void (*kDecode)(const uint8_t*, Decoded*), int kBlockBytes>
void GemvScalar(const GemvArgs& a) {
  constexpr int kKind = kBlockBytes == sizeof(BlockQ2K)   ? 2
                        : kBlockBytes == sizeof(BlockQ3K) ? 3
                        : kBlockBytes == sizeof(BlockQ4K) ? 4
                        : kBlockBytes == sizeof(BlockQ5K) ? 5
                                                          : 6;
  constexpr int kTile = 8;
  const int64_t nb = a.k / kQK;
  const auto* w = static_cast<const uint8_t*>(a.w);
  const auto* x = static_cast<const uint8_t*>(a.x);
  Decoded dec;
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    for (int r0 = 0; r0 < a.m; r0 += kTile) {
      const int nt = std::min(kTile, a.m - r0);
      Sums sums[kTile];
      for (int64_t ib = 0; ib < nb; ++ib) {
        kDecode(w + i * a.w_row_bytes + ib * kBlockBytes, &dec);
        for (int t = 0; t < nt; ++t) {
          const auto& xb = reinterpret_cast<const BlockQ8K*>(
              x + (r0 + t) * a.x_row_bytes)[ib];
          AddBlock<kKind>(dec, xb, &sums[t]);
        }
      }
      for (int t = 0; t < nt; ++t) {
        a.y[(r0 + t) * a.ldy + i] = Total<kKind>(sums[t]);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Type table and dispatch.

constexpr TypeInfo kInfo[] = {
    {Type::kQ2_K, "q2_K", kQK, sizeof(BlockQ2K), Type::kQ8_K, &DequantizeQ2K,
     &QuantizeQ2K},
    {Type::kQ3_K, "q3_K", kQK, sizeof(BlockQ3K), Type::kQ8_K, &DequantizeQ3K,
     &QuantizeQ3K},
    {Type::kQ4_K, "q4_K", kQK, sizeof(BlockQ4K), Type::kQ8_K, &DequantizeQ4K,
     &QuantizeQ4K},
    {Type::kQ5_K, "q5_K", kQK, sizeof(BlockQ5K), Type::kQ8_K, &DequantizeQ5K,
     &QuantizeQ5K},
    {Type::kQ6_K, "q6_K", kQK, sizeof(BlockQ6K), Type::kQ8_K, &DequantizeQ6K,
     &QuantizeQ6K},
    {Type::kQ8_K, "q8_K", kQK, sizeof(BlockQ8K), Type::kQ8_K, &DequantizeQ8K,
     &QuantizeQ8K},
};

constexpr GemvSet kScalarGemv = {{
    &GemvScalar<&DecodeQ2K, sizeof(BlockQ2K)>,
    &GemvScalar<&DecodeQ3K, sizeof(BlockQ3K)>,
    &GemvScalar<&DecodeScaleMin<BlockQ4K, false>, sizeof(BlockQ4K)>,
    &GemvScalar<&DecodeScaleMin<BlockQ5K, true>, sizeof(BlockQ5K)>,
    &GemvScalar<&DecodeQ6K, sizeof(BlockQ6K)>,
}};

// Kernel names, [weight type][level]; levels as in KQuantGemv.
constexpr std::string_view kNames[kNumWeightTypes][5] = {
    {"q2_K/avx512_vnni", "q2_K/avx512", "q2_K/avx2_vnni", "q2_K/avx2",
     "q2_K/scalar"},
    {"q3_K/avx512_vnni", "q3_K/avx512", "q3_K/avx2_vnni", "q3_K/avx2",
     "q3_K/scalar"},
    {"q4_K/avx512_vnni", "q4_K/avx512", "q4_K/avx2_vnni", "q4_K/avx2",
     "q4_K/scalar"},
    {"q5_K/avx512_vnni", "q5_K/avx512", "q5_K/avx2_vnni", "q5_K/avx2",
     "q5_K/scalar"},
    {"q6_K/avx512_vnni", "q6_K/avx512", "q6_K/avx2_vnni", "q6_K/avx2",
     "q6_K/scalar"},
};

int WeightIndexOf(Type t) {
  switch (t) {
    case Type::kQ2_K:
      return kQ2;
    case Type::kQ3_K:
      return kQ3;
    case Type::kQ4_K:
      return kQ4;
    case Type::kQ5_K:
      return kQ5;
    case Type::kQ6_K:
      return kQ6;
    default:
      return -1;
  }
}

}  // namespace
}  // namespace kquants

const TypeInfo* KQuantInfo(Type t) {
  for (const TypeInfo& info : kquants::kInfo) {
    if (info.type == t) return &info;
  }
  return nullptr;
}

GemvFn KQuantGemv(Type t, const CpuFeatures& cpu, std::string_view* name) {
  using namespace kquants;  // NOLINT(build/namespaces)
  const int w = WeightIndexOf(t);
  if (w < 0) return nullptr;
  // The best level whose features are all in `cpu`.
  const GemvSet* levels[] = {&avx512_vnni::kGemv, &avx512::kGemv,
                             &avx2_vnni::kGemv, &avx2::kGemv, &kScalarGemv};
  const bool usable[] = {
      cpu.avx2_fma() && cpu.avx512() && cpu.avx512_vnni,
      cpu.avx2_fma() && cpu.avx512(),
      cpu.avx2_fma() && cpu.avx_vnni,
      cpu.avx2_fma(),
      true,
  };
  for (int level = 0;; ++level) {
    if (usable[level]) {
      *name = kNames[w][level];
      return levels[level]->fn[w];
    }
  }
}

}  // namespace kvserve::quant::internal
