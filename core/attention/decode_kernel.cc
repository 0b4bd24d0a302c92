#include "core/attention/decode_kernel.h"

// GCC 12's AVX-512 intrinsics build their unmasked forms from
// _mm512_undefined_*(), which -Wuninitialized reports as a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/kv/kv_rows.h"
#include "core/util/bf16.h"
#include "core/util/cpu_features.h"
#include "core/util/prefetch.h"

namespace kvserve::attention_internal {

float Exp2(float x) { return std::exp2(x); }

void StartState(const DecodeArgs& a, PartialState st) {
  if (a.continue_state) return;
  for (int h = 0; h < a.kv_mul; ++h) {
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
  }
  std::fill(st.acc, st.acc + int64_t{a.kv_mul} * a.head_dim, 0.0f);
}

int64_t DecodeScratchFloats(int head_dim, int kv_mul, int block_tokens) {
  constexpr int kMaxW = 16;
  const int64_t bt_pad = (block_tokens + kMaxW - 1) / kMaxW * kMaxW;
  const int64_t hd = head_dim;
  const int64_t nb = head_dim / 32;  // a block type's blocks per row
  // avx512bf16's layout: scores, accumulators, alpha, bf16 probabilities,
  // bf16 queries, one zero-padded bf16 tile.
  const int64_t bf16 =
      kv_mul * (bt_pad + hd + 1 + bt_pad / 2 + hd / 2) + kMaxW * hd / 2;
  // The widening kernels': scores, one f32 tile, alpha, K and V scales.
  const int64_t widening =
      kv_mul * (bt_pad + 1) + kMaxW * hd + 2 * block_tokens * nb;
  // avx512vnni's: scores, alpha, V's scales by block, K's tile scales
  // (hd / 64 chunks of 64) and transposed codes (kMaxW * hd bytes), the
  // query's scales, starts and codes, the weights' scales and codes, the
  // permuted accumulators.
  const int64_t vnni = kv_mul * (bt_pad + 1) + nb * bt_pad + hd +
                       kMaxW * hd / 4 + kv_mul * (hd / 4 + hd / 4 + hd / 4) +
                       nb + kv_mul * (nb * bt_pad / 2 + hd);
  return std::max({bf16, widening, vnni});
}

namespace {

// Portable kernel: any head_dim, any CPU. Each row is read into floats
// (LoadKvRow) before use.
template <DType kT>
void DecodeBlocksScalar(const DecodeArgs& a, PartialState st) {
  const int head_dim = a.head_dim;
  const int bt = a.block_tokens;
  float* s = a.scratch;                     // [kv_mul][bt]
  float* row = s + int64_t{a.kv_mul} * bt;  // [head_dim]
  const char* k_base = static_cast<const char*>(a.k_base);
  const char* v_base = static_cast<const char*>(a.v_base);
  StartState(a, st);
  for (int i = 0; i < a.n_blocks; ++i) {
    const int skip = i == 0 ? a.first_block_skip : 0;
    const int n = (i + 1 == a.n_blocks ? a.last_block_tokens : bt) - skip;
    const char* k = k_base + a.blocks[i] * a.block_stride;
    const char* v = v_base + a.blocks[i] * a.block_stride;
    for (int h = 0; h < a.kv_mul; ++h) {
      const float* q = a.q + h * head_dim;
      float* sh = s + h * bt;
      float m_new = st.m[h];
      for (int t = 0; t < n; ++t) {
        LoadKvRowAt(kT, k, head_dim, bt, skip + t, row);
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) dot += q[d] * row[d];
        sh[t] = dot;
        m_new = std::max(m_new, dot);
      }
      const float alpha = Exp2(st.m[h] - m_new);
      float* acc = st.acc + h * head_dim;
      float l = st.l[h] * alpha;
      for (int d = 0; d < head_dim; ++d) acc[d] *= alpha;
      for (int t = 0; t < n; ++t) {
        const float p = Exp2(sh[t] - m_new);
        l += p;
        LoadKvRowAt(kT, v, head_dim, bt, skip + t, row);
        for (int d = 0; d < head_dim; ++d) acc[d] += p * row[d];
      }
      st.l[h] = l;
      st.m[h] = m_new;
    }
  }
}

// A q8_0 / q4_0 block's scale (F16C; every CPU with AVX2 has it).
#pragma GCC push_options
#pragma GCC target("f16c")
inline float BlockScale(const char* block) {
  uint16_t d;
  std::memcpy(&d, block, sizeof(d));
  return _cvtsh_ss(d);
}
#pragma GCC pop_options

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {

using V = __m256;
constexpr int kW = 8;
inline V Zero() { return _mm256_setzero_ps(); }
inline V Set1(float x) { return _mm256_set1_ps(x); }
inline V Load(const float* p) { return _mm256_loadu_ps(p); }
inline void Store(float* p, V x) { _mm256_storeu_ps(p, x); }
inline V LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline V LoadF16(const char* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// kW int8 → f32.
inline V LoadQ8(const char* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
// Elements [c, c + kW) of a q4_0 block's 32 as q − 8, from its qs (element
// j < 16 the low nibble of qs[j], j + 16 the high one).
inline V LoadQ4(const char* qs, int c) {
  __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + c % 16));
  if (c >= 16) x = _mm_srli_epi16(x, 4);
  x = _mm_and_si128(x, _mm_set1_epi8(0x0f));
  return _mm256_cvtepi32_ps(
      _mm256_sub_epi32(_mm256_cvtepu8_epi32(x), _mm256_set1_epi32(8)));
}
inline V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
inline V Mul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V Add(V a, V b) { return _mm256_add_ps(a, b); }
inline V Max(V a, V b) { return _mm256_max_ps(a, b); }
inline float ReduceAdd(V x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float ReduceMax(V x) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
// 2^x: 2^round(x) · p(x − round(x)), p the degree-6 Taylor polynomial of
// 2^f on |f| <= 1/2 (relative error < 2e-7); 0 below 2^-126.
inline V Exp2V(V x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-127.0f));
  const V n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const V f = _mm256_sub_ps(x, n);
  V p = _mm256_set1_ps(1.5403530e-4f);
  p = Fma(p, f, _mm256_set1_ps(1.3333558e-3f));
  p = Fma(p, f, _mm256_set1_ps(9.6181291e-3f));
  p = Fma(p, f, _mm256_set1_ps(5.5504109e-2f));
  p = Fma(p, f, _mm256_set1_ps(2.4022651e-1f));
  p = Fma(p, f, _mm256_set1_ps(6.9314718e-1f));
  p = Fma(p, f, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const V scale =
      _mm256_and_ps(_mm256_castsi256_ps(e),
                    _mm256_cmp_ps(n, _mm256_set1_ps(-127.0f), _CMP_GT_OQ));
  return _mm256_mul_ps(p, scale);
}
// Lane t = Σ lanes of a[t].
__attribute__((always_inline)) inline V SumsOfW(const V* a) {
  const V t0 = _mm256_hadd_ps(a[0], a[1]);
  const V t1 = _mm256_hadd_ps(a[2], a[3]);
  const V t2 = _mm256_hadd_ps(a[4], a[5]);
  const V t3 = _mm256_hadd_ps(a[6], a[7]);
  const V u0 = _mm256_hadd_ps(t0, t1);
  const V u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                       _mm256_permute2f128_ps(u0, u1, 0x31));
}

#include "core/attention/decode_kernel_simd.inc"

}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace avx512 {

using V = __m512;
constexpr int kW = 16;
inline V Zero() { return _mm512_setzero_ps(); }
inline V Set1(float x) { return _mm512_set1_ps(x); }
inline V Load(const float* p) { return _mm512_loadu_ps(p); }
inline void Store(float* p, V x) { _mm512_storeu_ps(p, x); }
inline V LoadBf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline V LoadF16(const char* p) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
// kW int8 → f32.
inline V LoadQ8(const char* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
// Elements [c, c + kW) of a q4_0 block's 32 as q − 8 (c is 0 or 16: the
// low or the high nibbles of its 16 qs bytes).
inline V LoadQ4(const char* qs, int c) {
  __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  if (c >= 16) x = _mm_srli_epi16(x, 4);
  x = _mm_and_si128(x, _mm_set1_epi8(0x0f));
  return _mm512_cvtepi32_ps(
      _mm512_sub_epi32(_mm512_cvtepu8_epi32(x), _mm512_set1_epi32(8)));
}
inline V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
inline V Mul(V a, V b) { return _mm512_mul_ps(a, b); }
inline V Add(V a, V b) { return _mm512_add_ps(a, b); }
inline V Max(V a, V b) { return _mm512_max_ps(a, b); }
inline float ReduceAdd(V x) { return _mm512_reduce_add_ps(x); }
inline float ReduceMax(V x) { return _mm512_reduce_max_ps(x); }
// 2^x as in avx2::Exp2V; scalef gives exact 0 far below 2^-126.
inline V Exp2V(V x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-200.0f));
  const V n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT);
  const V f = _mm512_sub_ps(x, n);
  V p = _mm512_set1_ps(1.5403530e-4f);
  p = Fma(p, f, _mm512_set1_ps(1.3333558e-3f));
  p = Fma(p, f, _mm512_set1_ps(9.6181291e-3f));
  p = Fma(p, f, _mm512_set1_ps(5.5504109e-2f));
  p = Fma(p, f, _mm512_set1_ps(2.4022651e-1f));
  p = Fma(p, f, _mm512_set1_ps(6.9314718e-1f));
  p = Fma(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}
// Lane 4k + i = Σ over the 128-bit lanes L of lane 4L + i of y[k] (k < 4):
// a 4×4 transpose-and-add of the 128-bit lanes.
__attribute__((always_inline)) inline V SumsOfLanes128(const V* y) {
  const V w01 = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x44),
                              _mm512_shuffle_f32x4(y[0], y[1], 0xEE));
  const V w23 = _mm512_add_ps(_mm512_shuffle_f32x4(y[2], y[3], 0x44),
                              _mm512_shuffle_f32x4(y[2], y[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88),
                       _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

// Lane t = Σ lanes of a[t]: pairwise sums within 128-bit lanes, then
// SumsOfLanes128.
__attribute__((always_inline)) inline V SumsOfW(const V* a) {
  V x[8];
  for (int k = 0; k < 8; ++k) {
    x[k] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * k], a[2 * k + 1]),
                         _mm512_unpackhi_ps(a[2 * k], a[2 * k + 1]));
  }
  V y[4];
  for (int k = 0; k < 4; ++k) {
    y[k] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * k], x[2 * k + 1], 0x44),
                         _mm512_shuffle_ps(x[2 * k], x[2 * k + 1], 0xEE));
  }
  return SumsOfLanes128(y);
}

// Accumulators summed two positions per instruction (vpdpbf16ps,
// vpdpwssd) over unpacklo/unpackhi_epi16 of two rows hold each 32-element
// chunk as [0-3, 8-11, 16-19, 24-27 | 4-7, 12-15, 20-23, 28-31].
// PairOrder: n floats (n % 32 == 0) in element order into that order;
// UndoPairOrder: back.
// out[c, c + 32) = [lo of in[c, c + 32) | hi of it] for every c.
inline void Permute32(const float* in, int64_t n, __m512i lo, __m512i hi,
                      float* out) {
  for (int64_t c = 0; c < n; c += 32) {
    const V a = Load(in + c);
    const V b = Load(in + c + kW);
    Store(out + c, _mm512_permutex2var_ps(a, lo, b));
    Store(out + c + kW, _mm512_permutex2var_ps(a, hi, b));
  }
}
inline void PairOrder(const float* in, int64_t n, float* out) {
  Permute32(in, n,
            _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25,
                              26, 27),
            _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28,
                              29, 30, 31),
            out);
}
inline void UndoPairOrder(const float* in, int64_t n, float* out) {
  Permute32(
      in, n,
      _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23),
      _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29,
                        30, 31),
      out);
}

// A paired kernel's accumulators at the start: zeros, or the state's
// (continued) in pair order.
inline void StartPairs(const DecodeArgs& a, PartialState st, float* acc) {
  const int64_t n = int64_t{a.kv_mul} * a.head_dim;
  if (a.continue_state) {
    PairOrder(st.acc, n, acc);
  } else {
    std::fill(acc, acc + n, 0.0f);
  }
}

#include "core/attention/decode_kernel_simd.inc"

}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")
namespace avx512bf16 {

// A bf16 cache with AVX512_BF16 dot products: q·k with q rounded to bf16
// (the precision K already has), and p·v with p rounded to bf16, two
// positions per instruction. Half the multiply-add instructions of the f32
// path and no conversions, which a bf16 cache needs to keep up with memory.
using avx512::Load;
using avx512::Mul;
using avx512::Set1;
using avx512::SoftmaxBlock;
using avx512::StartPairs;
using avx512::Store;
using avx512::SumsOfW;
using avx512::UndoPairOrder;
using avx512::V;
using avx512::Zero;
constexpr int kW = 16;

inline __m512bh AsBh(__m512i x) { return reinterpret_cast<__m512bh>(x); }
inline __m512i LoadI(const uint16_t* p) { return _mm512_loadu_si512(p); }

// Scores of kW rows k (row stride head_dim) against q16, into s[0, kW).
template <int kNc>
inline void ScoreTile(const uint16_t* q16, const uint16_t* k, int head_dim,
                      float* s) {
  const int nc = kNc > 0 ? kNc : head_dim / 32;
  const int stride = kNc > 0 ? kNc * 32 : head_dim;  // constant when known
  V acc[kW];
#pragma GCC unroll 16
  for (int t = 0; t < kW; ++t) acc[t] = Zero();
  for (int c = 0; c < nc; ++c) {
    const __m512bh qv = AsBh(LoadI(q16 + c * 32));
#pragma GCC unroll 16
    for (int t = 0; t < kW; ++t) {
      acc[t] =
          _mm512_dpbf16_ps(acc[t], qv, AsBh(LoadI(k + t * stride + c * 32)));
    }
  }
  Store(s, SumsOfW(acc));
}

// For kHt rows and 64 consecutive dims: acc = acc · alpha + Σ_t p_t v_t,
// two positions per dot product. acc holds each 32-dim chunk permuted as
// unpacklo/unpackhi leave it: [d 0-3, 8-11, 16-19, 24-27 | 4-7, 12-15, ...].
template <int kHt>
inline void PvTile(const uint16_t* v, int n, int head_dim, const uint16_t* p,
                   int p_stride, const float* alpha, float* acc,
                   int acc_stride) {
  V a[kHt][4];
#pragma GCC unroll 4
  for (int h = 0; h < kHt; ++h) {
    const V al = Set1(alpha[h]);
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      a[h][j] = Mul(al, Load(acc + h * acc_stride + j * kW));
    }
  }
  for (int t = 0; t < n; t += 2) {
    const __m512i r00 = LoadI(v + t * head_dim);
    const __m512i r01 = LoadI(v + t * head_dim + 32);
    __m512i r10 = _mm512_setzero_si512();
    __m512i r11 = _mm512_setzero_si512();
    if (t + 1 < n) {
      r10 = LoadI(v + (t + 1) * head_dim);
      r11 = LoadI(v + (t + 1) * head_dim + 32);
    }
    const __m512bh x[4] = {AsBh(_mm512_unpacklo_epi16(r00, r10)),
                           AsBh(_mm512_unpackhi_epi16(r00, r10)),
                           AsBh(_mm512_unpacklo_epi16(r01, r11)),
                           AsBh(_mm512_unpackhi_epi16(r01, r11))};
#pragma GCC unroll 4
    for (int h = 0; h < kHt; ++h) {
      uint32_t pair;
      std::memcpy(&pair, p + h * p_stride + t, sizeof(pair));
      const __m512bh pb = AsBh(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) a[h][j] = _mm512_dpbf16_ps(a[h][j], pb, x[j]);
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < kHt; ++h) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) Store(acc + h * acc_stride + j * kW, a[h][j]);
  }
}

inline void PvRows(const uint16_t* v, int n, int head_dim, int kv_mul,
                   const uint16_t* p, int p_stride, const float* alpha,
                   float* acc) {
  for (int d0 = 0; d0 < head_dim; d0 += 64) {
    for (int h0 = 0; h0 < kv_mul; h0 += 4) {
      const uint16_t* ph = p + h0 * p_stride;
      float* ah = acc + h0 * head_dim + d0;
      switch (kv_mul - h0) {
        case 1:
          PvTile<1>(v + d0, n, head_dim, ph, p_stride, alpha + h0, ah,
                    head_dim);
          break;
        case 2:
          PvTile<2>(v + d0, n, head_dim, ph, p_stride, alpha + h0, ah,
                    head_dim);
          break;
        case 3:
          PvTile<3>(v + d0, n, head_dim, ph, p_stride, alpha + h0, ah,
                    head_dim);
          break;
        default:
          PvTile<4>(v + d0, n, head_dim, ph, p_stride, alpha + h0, ah,
                    head_dim);
          break;
      }
    }
  }
}

template <int kNc>
void DecodeBlocks(const DecodeArgs& a, PartialState st) {
  const int head_dim = a.head_dim;
  const int kv_mul = a.kv_mul;
  const int bt = a.block_tokens;
  const int bt_pad = (bt + kW - 1) / kW * kW;
  float* s = a.scratch;                       // [kv_mul][bt_pad]
  float* acc = s + int64_t{kv_mul} * bt_pad;  // [kv_mul][head_dim], permuted
  float* alpha = acc + int64_t{kv_mul} * head_dim;  // [kv_mul]
  uint16_t* p16 =
      reinterpret_cast<uint16_t*>(alpha + kv_mul);    // [kv_mul][bt_pad]
  uint16_t* q16 = p16 + int64_t{kv_mul} * bt_pad;     // [kv_mul][head_dim]
  uint16_t* kpad = q16 + int64_t{kv_mul} * head_dim;  // [kW][head_dim]
  const char* k_base = static_cast<const char*>(a.k_base);
  const char* v_base = static_cast<const char*>(a.v_base);

  const int64_t row_bytes = head_dim * int64_t{2};

  for (int i = 0; i < kv_mul * head_dim; ++i) q16[i] = FloatToBf16(a.q[i]);
  StartState(a, st);
  StartPairs(a, st, acc);

  for (int i = 0; i < a.n_blocks; ++i) {
    // The first block's skipped positions are left out: its rows start at
    // `skip`.
    const int skip = i == 0 ? a.first_block_skip : 0;
    const int n = (i + 1 == a.n_blocks ? a.last_block_tokens : bt) - skip;
    const int64_t at = a.blocks[i] * a.block_stride + skip * row_bytes;
    const uint16_t* k = reinterpret_cast<const uint16_t*>(k_base + at);
    const uint16_t* v = reinterpret_cast<const uint16_t*>(v_base + at);
    for (int t0 = 0; t0 < n; t0 += kW) {
      const int nt = std::min(kW, n - t0);
      const uint16_t* rows = k + int64_t{t0} * head_dim;
      if (nt < kW) {
        std::copy(rows, rows + nt * head_dim, kpad);
        std::fill(kpad + nt * head_dim, kpad + kW * head_dim, 0);
        rows = kpad;
      }
      for (int h = 0; h < kv_mul; ++h) {
        avx512::PrefetchNext(a, i, t0, nt, n, row_bytes, h, kv_mul);
        ScoreTile<kNc>(q16 + h * head_dim, rows, head_dim, s + h * bt_pad + t0);
      }
    }
    SoftmaxBlock(s, n, bt_pad, kv_mul, st, alpha);
    for (int h = 0; h < kv_mul; ++h) {
      const float* sh = s + h * bt_pad;
      for (int t = 0; t < bt_pad; t += kW) {
        _mm256_storeu_si256(
            reinterpret_cast<__m256i*>(p16 + h * bt_pad + t),
            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(Load(sh + t))));
      }
    }
    PvRows(v, n, head_dim, kv_mul, p16, bt_pad, alpha, acc);
  }
  UndoPairOrder(acc, int64_t{kv_mul} * head_dim, st.acc);
}

inline DecodeKernel Select(int head_dim) {
  if (head_dim % 64 != 0) return nullptr;
  if (head_dim == 64) return &DecodeBlocks<2>;
  if (head_dim == 128) return &DecodeBlocks<4>;
  return &DecodeBlocks<0>;
}

}  // namespace avx512bf16
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
namespace avx512vnni {

// q8_0 and q4_0 caches with AVX512_VNNI integer dot products for the
// scores: the query rows are quantized as K is (blocks of 32, one scale
// each), and q·k = Σ_blocks d_q·d_k·Σ q_i·k_i with the inner sums on 64
// byte pairs per instruction (vpdpbusd multiplies unsigned by signed
// bytes: K's codes are read as unsigned, q8_0's k + 128 and q4_0's nibbles
// q = k + 8, and each lane starts at −offset·Σ its query codes).
// Neither K nor V is widened to floats: p·v is summed in integers too
// (QuantizeWeights, PvChunk).
using avx512::Load;
using avx512::PrefetchNext;
using avx512::Set1;
using avx512::SoftmaxBlock;
using avx512::StartPairs;
using avx512::Store;
using avx512::SumsOfLanes128;
using avx512::UndoPairOrder;
using avx512::V;
using avx512::Zero;
constexpr int kW = 16;

// Per head and 64-element chunk c of the query: its 64 codes, the scales
// of its two blocks as lanes (0-7 block 2c, 8-15 block 2c + 1), and the
// lanes' starting values: −offset·Σ of the 16 codes of their 128-bit lane
// (the elements a lane of ScoreTile's sums covers).
struct QueryCodes {
  int8_t* codes;   // [kv_mul][head_dim]
  float* scales;   // [kv_mul][head_dim / 64][16]
  int32_t* start;  // [kv_mul][head_dim / 64][16]
};

inline void QuantizeQuery(const float* q, int kv_mul, int head_dim,
                          int8_t offset, QueryCodes out) {
  const __m512 sign_off = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  for (int h = 0; h < kv_mul; ++h) {
    for (int c = 0; c < head_dim / 64; ++c) {
      const float* x = q + h * head_dim + c * 64;
      float d[2];
      for (int b = 0; b < 2; ++b) {
        const __m512 x0 = _mm512_and_ps(Load(x + 32 * b), sign_off);
        const __m512 x1 = _mm512_and_ps(Load(x + 32 * b + 16), sign_off);
        d[b] = _mm512_reduce_max_ps(_mm512_max_ps(x0, x1)) / 127.0f;
        const __m512 id = Set1(d[b] != 0.0f ? 1.0f / d[b] : 0.0f);
        for (int k = 0; k < 2; ++k) {
          const __m512i v =
              _mm512_cvtps_epi32(_mm512_mul_ps(Load(x + 32 * b + 16 * k), id));
          _mm_storeu_si128(reinterpret_cast<__m128i*>(out.codes + h * head_dim +
                                                      c * 64 + 32 * b + 16 * k),
                           _mm512_cvtsepi32_epi8(v));
        }
      }
      const int at = (h * (head_dim / 64) + c) * 16;
      Store(out.scales + at,
            _mm512_mask_blend_ps(0xff00, Set1(d[0]), Set1(d[1])));
      const __m512i codes =
          _mm512_loadu_si512(out.codes + h * head_dim + c * 64);
      // −offset·Σ of each dword's 4 codes, then summed within 128 bits.
      __m512i start = _mm512_sub_epi32(
          _mm512_setzero_si512(),
          _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(offset),
                              codes));
      start =
          _mm512_add_epi32(start, _mm512_shuffle_epi32(start, _MM_PERM_BADC));
      start =
          _mm512_add_epi32(start, _mm512_shuffle_epi32(start, _MM_PERM_CDAB));
      _mm512_storeu_si512(out.start + at, start);
    }
  }
}

// Lanes [0, n) of 16 (all for n >= 16).
inline __mmask16 FirstLanes(int n) {
  return n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1);
}

// The f16 scales of 16 consecutive positions from a group's scales plane
// (lanes [0, n) read, the rest 0) as floats.
inline __m512 LoadScales(const char* p, int n) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(FirstLanes(n), p));
}

// The tile's codes of one chunk, rows r[0, 16), as 16 vectors: lane
// 4L + i of x[4g + j] holds row 4g + i's dword 4L + j (its codes
// [16L + 4j, 16L + 4j + 4)).
inline void TransposeCodes(const __m512i* r, __m512i* x) {
  for (int g = 0; g < 4; ++g) {
    const __m512i* q = r + 4 * g;
    const __m512i a0 = _mm512_unpacklo_epi32(q[0], q[1]);
    const __m512i a1 = _mm512_unpackhi_epi32(q[0], q[1]);
    const __m512i b0 = _mm512_unpacklo_epi32(q[2], q[3]);
    const __m512i b1 = _mm512_unpackhi_epi32(q[2], q[3]);
    x[4 * g + 0] = _mm512_unpacklo_epi64(a0, b0);
    x[4 * g + 1] = _mm512_unpackhi_epi64(a0, b0);
    x[4 * g + 2] = _mm512_unpacklo_epi64(a1, b1);
    x[4 * g + 3] = _mm512_unpackhi_epi64(a1, b1);
  }
}

// K's 64 codes of chunk c (blocks 2c and 2c + 1) of a position, unsigned,
// in element order, from the chunk's codes (64 int8, or 2 x 16 bytes of
// nibbles).
template <DType kT>
inline __m512i KeyCodes(const char* codes) {
  if constexpr (kT == DType::kQ8_0) {
    return _mm512_xor_si512(_mm512_set1_epi8(-128), _mm512_loadu_si512(codes));
  } else {
    // [qs of block 2c | of block 2c + 1] → their low nibbles (elements
    // 0-15 of each block) and high ones (16-31), then interleaved by
    // 16 bytes into [lo 2c, hi 2c, lo 2c+1, hi 2c+1].
    const __m256i qs =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
    const __m256i mask = _mm256_set1_epi8(0x0f);
    const __m512i z =
        _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(qs, mask)),
                           _mm256_and_si256(_mm256_srli_epi16(qs, 4), mask), 1);
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 1, 2, 0));
  }
}

// p·v on VNNI too. For a cache block, head h and V's block b (32 of the
// row's elements), the weights w[t] = p[h][t]·d_v[t][b] are 16-bit
// integers with one scale per b (max_t |d_v[t][b]| / 32767: p <= 1), and
// Σ_t w[t]·v[t] is summed in int32, 2 positions per vpdpwssd: V's values
// as 16-bit words, the 2 positions' interleaved, against their 2 weights.
// At 15 bits the weights are as precise as the f32 products they replace
// (a relative 2^-16 of the block's largest).
struct Weights {
  int16_t* codes;  // [kv_mul][nb][bt_pad]
  float* scales;   // [nb]
};

// p: [kv_mul][bt_pad] (0 past the block's positions); dv: V's scales
// [nb][bt_pad], 0 past them (scaled in place to the weights' units); n16
// the positions rounded up to 16.
inline void QuantizeWeights(const float* p, float* dv, int kv_mul, int nb,
                            int bt_pad, int n16, Weights out) {
  const __m512 sign_off = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
  // |Σ_t w·v| <= n16 · qmax · 128 stays within int32.
  const float qmax = static_cast<float>(
      std::min<int64_t>(32767, int64_t{INT32_MAX} / (int64_t{n16} * 128)));
  for (int b = 0; b < nb; ++b) {
    float* db = dv + b * bt_pad;
    __m512 mx = Zero();
    for (int t = 0; t < n16; t += kW) {
      mx = _mm512_max_ps(mx, _mm512_and_ps(Load(db + t), sign_off));
    }
    const float amax = _mm512_reduce_max_ps(mx);
    out.scales[b] = amax / qmax;
    const __m512 id = Set1(amax != 0.0f ? qmax / amax : 0.0f);
    for (int t = 0; t < n16; t += kW)
      Store(db + t, _mm512_mul_ps(Load(db + t), id));
  }
  for (int h = 0; h < kv_mul; ++h) {
    for (int b = 0; b < nb; ++b) {
      const float* ph = p + h * bt_pad;
      const float* db = dv + b * bt_pad;
      int16_t* codes = out.codes + (h * nb + b) * bt_pad;
      for (int t = 0; t < n16; t += kW) {
        const __m512i w =
            _mm512_cvtps_epi32(_mm512_mul_ps(Load(ph + t), Load(db + t)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + t),
                            _mm512_cvtsepi32_epi16(w));
      }
    }
  }
}

// V's 32 values of the block whose codes are at `codes`, as words.
template <DType kT>
inline __m512i ValueWords(const char* codes) {
  if constexpr (kT == DType::kQ8_0) {
    return _mm512_cvtepi8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes)));
  } else {
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m256i codes =
        _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(qs, mask)),
                                _mm_and_si128(_mm_srli_epi16(qs, 4), mask), 1);
    return _mm512_sub_epi16(_mm512_cvtepu8_epi16(codes), _mm512_set1_epi16(8));
  }
}

// For kHt heads and V's 64 elements of chunk c (blocks 2c, 2c + 1) over
// positions [0, n) (an odd last one paired with zeros):
// accp[h] = accp[h]·alpha[h] + Σ_t w[h][t]·v[t], in the lane order
// unpacklo/unpackhi_epi16 leave (as avx512bf16::PvTile's).
template <DType kT, int kHt>
inline void PvChunk(const char* v, int64_t code_bytes, int n, int c, int nb,
                    int bt_pad, const Weights& w, const float* alpha,
                    float* accp, int head_dim) {
  constexpr int kBlockBytes = DTypeBlockCodeBytes(kT);
  __m512i acc[kHt][4];
#pragma GCC unroll 4
  for (int h = 0; h < kHt; ++h) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[h][j] = _mm512_setzero_si512();
  }
  const char* chunk = v + 2 * c * kBlockBytes;
  for (int t = 0; t < n; t += 2) {
    const char* r0 = chunk + t * code_bytes;
    const __m512i lo0 = ValueWords<kT>(r0);
    const __m512i hi0 = ValueWords<kT>(r0 + kBlockBytes);
    // An odd last row pairs with itself: its weight pair's second is 0.
    const int64_t next = t + 1 < n ? code_bytes : 0;
    const __m512i lo1 = ValueWords<kT>(r0 + next);
    const __m512i hi1 = ValueWords<kT>(r0 + next + kBlockBytes);
    const __m512i x[4] = {
        _mm512_unpacklo_epi16(lo0, lo1), _mm512_unpackhi_epi16(lo0, lo1),
        _mm512_unpacklo_epi16(hi0, hi1), _mm512_unpackhi_epi16(hi0, hi1)};
#pragma GCC unroll 4
    for (int h = 0; h < kHt; ++h) {
      const int16_t* wh = w.codes + (h * nb + 2 * c) * bt_pad + t;
      int32_t w0, w1;
      std::memcpy(&w0, wh, sizeof(w0));
      std::memcpy(&w1, wh + bt_pad, sizeof(w1));
      const __m512i b0 = _mm512_set1_epi32(w0);
      const __m512i b1 = _mm512_set1_epi32(w1);
      acc[h][0] = _mm512_dpwssd_epi32(acc[h][0], x[0], b0);
      acc[h][1] = _mm512_dpwssd_epi32(acc[h][1], x[1], b0);
      acc[h][2] = _mm512_dpwssd_epi32(acc[h][2], x[2], b1);
      acc[h][3] = _mm512_dpwssd_epi32(acc[h][3], x[3], b1);
    }
  }
  const __m512 d0 = Set1(w.scales[2 * c]);
  const __m512 d1 = Set1(w.scales[2 * c + 1]);
#pragma GCC unroll 4
  for (int h = 0; h < kHt; ++h) {
    const __m512 al = Set1(alpha[h]);
    float* ah = accp + h * head_dim + c * 64;
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      Store(ah + j * kW,
            _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[h][j]), j < 2 ? d0 : d1,
                            _mm512_mul_ps(al, Load(ah + j * kW))));
    }
  }
}

template <DType kT>
inline void PvBlock(const char* v, int64_t code_bytes, int n, int head_dim,
                    int kv_mul, int bt_pad, const Weights& w,
                    const float* alpha, float* accp) {
  const int nb = head_dim / 32;
  for (int c = 0; c < head_dim / 64; ++c) {
    for (int h0 = 0; h0 < kv_mul; h0 += 4) {
      const Weights wh{w.codes + h0 * nb * bt_pad, w.scales};
      float* ah = accp + h0 * head_dim;
      switch (kv_mul - h0) {
        case 1:
          PvChunk<kT, 1>(v, code_bytes, n, c, nb, bt_pad, wh, alpha + h0, ah,
                         head_dim);
          break;
        case 2:
          PvChunk<kT, 2>(v, code_bytes, n, c, nb, bt_pad, wh, alpha + h0, ah,
                         head_dim);
          break;
        case 3:
          PvChunk<kT, 3>(v, code_bytes, n, c, nb, bt_pad, wh, alpha + h0, ah,
                         head_dim);
          break;
        default:
          PvChunk<kT, 4>(v, code_bytes, n, c, nb, bt_pad, wh, alpha + h0, ah,
                         head_dim);
          break;
      }
    }
  }
}

template <DType kT, int kNc>
void DecodeBlocks(const DecodeArgs& a, PartialState st) {
  constexpr int kBlockBytes = DTypeBlockCodeBytes(kT);
  // K's codes minus this are its values' integers.
  constexpr int8_t kOffset = kT == DType::kQ8_0 ? -128 : 8;
  const int head_dim = a.head_dim;
  const int kv_mul = a.kv_mul;
  const int bt = a.block_tokens;
  const int bt_pad = (bt + kW - 1) / kW * kW;
  const int nc = kNc > 0 ? kNc : head_dim / 64;
  const int nb = head_dim / 32;
  const int64_t code_bytes = KvCodeBytes(kT, head_dim);
  const int64_t row_bytes = DTypeRowBytes(kT, head_dim);
  const int64_t scales_at = KvScalesOffset(kT, head_dim, bt);
  float* s = a.scratch;                         // [kv_mul][bt_pad]
  float* alpha = s + int64_t{kv_mul} * bt_pad;  // [kv_mul]
  float* dv = alpha + kv_mul;                   // [nb][bt_pad]
  float* dk = dv + int64_t{nb} * bt_pad;        // [nc][4][16]
  float* qscales = dk + int64_t{nc} * 4 * 16;   // [kv_mul][nc][16]
  int32_t* qstart = reinterpret_cast<int32_t*>(qscales + kv_mul * nc * 16);
  float* wscales = reinterpret_cast<float*>(qstart + kv_mul * nc * 16);
  float* accp = wscales + nb;  // [kv_mul][head_dim], permuted
  int16_t* wcodes = reinterpret_cast<int16_t*>(
      accp + int64_t{kv_mul} * head_dim);  // [kv_mul][nb][bt_pad]
  uint8_t* kt = reinterpret_cast<uint8_t*>(
      wcodes + int64_t{kv_mul} * nb * bt_pad);  // [nc][kW][64]
  int8_t* qcodes = reinterpret_cast<int8_t*>(kt + kW * head_dim);
  const Weights weights{wcodes, wscales};
  const char* k_base = static_cast<const char*>(a.k_base);
  const char* v_base = static_cast<const char*>(a.v_base);

  // Lane 4L + i of a transposed group g: row 4g + i's scale of block
  // 2c + L / 2, from [block 2c's 16 rows | block 2c + 1's].
  __m512i scale_of[4];
  for (int g = 0; g < 4; ++g) {
    scale_of[g] =
        _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 16, 17, 18,
                                           19, 16, 17, 18, 19),
                         _mm512_set1_epi32(4 * g));
  }

  QuantizeQuery(a.q, kv_mul, head_dim, kOffset,
                QueryCodes{qcodes, qscales, qstart});
  StartState(a, st);
  StartPairs(a, st, accp);

  for (int i = 0; i < a.n_blocks; ++i) {
    const int skip = i == 0 ? a.first_block_skip : 0;
    const int n = (i + 1 == a.n_blocks ? a.last_block_tokens : bt) - skip;
    // Codes and block b's scales of the block's first position read.
    const int64_t at = a.blocks[i] * a.block_stride;
    const char* k = k_base + at + skip * code_bytes;
    const char* v = v_base + at + skip * code_bytes;
    const char* ks = k_base + at + scales_at + skip * 2;
    const char* vs = v_base + at + scales_at + skip * 2;
    for (int t0 = 0; t0 < n; t0 += kW) {
      const int nt = std::min(kW, n - t0);
      // Per chunk: the tile's K codes transposed (TransposeCodes; rows
      // past nt are zeros) and its K scales in the same lanes (row 4g + i,
      // block 2c + L / 2; 0 past nt).
      for (int c = 0; c < nc; ++c) {
        const char* b0 = k + t0 * code_bytes + 2 * c * kBlockBytes;
        __m512i r[kW];
        for (int t = 0; t < kW; ++t) {
          r[t] = t < nt ? KeyCodes<kT>(b0 + t * code_bytes)
                        : _mm512_setzero_si512();
        }
        __m512i x[kW];
        TransposeCodes(r, x);
        for (int j = 0; j < kW; ++j) {
          _mm512_storeu_si512(kt + (c * kW + j) * 64, x[j]);
        }
        const V s0 = LoadScales(ks + (int64_t{2 * c} * bt + t0) * 2, nt);
        const V s1 = LoadScales(ks + (int64_t{2 * c + 1} * bt + t0) * 2, nt);
        for (int g = 0; g < 4; ++g) {
          Store(dk + (c * 4 + g) * 16,
                _mm512_permutex2var_ps(s0, scale_of[g], s1));
        }
      }
      for (int h = 0; h < kv_mul; ++h) {
        PrefetchNext(a, i, t0, nt, n, row_bytes, h, kv_mul);
        V f[4] = {Zero(), Zero(), Zero(), Zero()};
        for (int c = 0; c < nc; ++c) {
          const int qa = (h * nc + c) * 16;
          const __m512i qv = _mm512_loadu_si512(qcodes + h * head_dim + c * 64);
          const __m512i start = _mm512_loadu_si512(qstart + qa);
          __m512i sums[4] = {start, start, start, start};
          // qj[j]: dword 4L + j of the query's chunk in each lane of
          // 128-bit lane L.
          const __m512i qj[4] = {_mm512_shuffle_epi32(qv, _MM_PERM_AAAA),
                                 _mm512_shuffle_epi32(qv, _MM_PERM_BBBB),
                                 _mm512_shuffle_epi32(qv, _MM_PERM_CCCC),
                                 _mm512_shuffle_epi32(qv, _MM_PERM_DDDD)};
#pragma GCC unroll 4
          for (int j = 0; j < 4; ++j) {
#pragma GCC unroll 4
            for (int g = 0; g < 4; ++g) {
              sums[g] = _mm512_dpbusd_epi32(
                  sums[g], _mm512_loadu_si512(kt + (c * kW + 4 * g + j) * 64),
                  qj[j]);
            }
          }
          const V qd = Load(qscales + qa);
#pragma GCC unroll 4
          for (int g = 0; g < 4; ++g) {
            f[g] = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(sums[g]),
                _mm512_mul_ps(Load(dk + (c * 4 + g) * 16), qd), f[g]);
          }
        }
        // Lane 4L + i of f[g] is row 4g + i's sum over 128-bit lane L.
        Store(s + h * bt_pad + t0, SumsOfLanes128(f));
      }
    }
    SoftmaxBlock(s, n, bt_pad, kv_mul, st, alpha);
    // V's scales by block (once the K pass has prefetched its rows), then
    // the weights p·d_v in 16 bits.
    const int n16 = (n + kW - 1) / kW * kW;
    for (int b = 0; b < nb; ++b) {
      for (int t = 0; t < n; t += kW) {
        Store(dv + b * bt_pad + t,
              LoadScales(vs + (int64_t{b} * bt + t) * 2, n - t));
      }
    }
    QuantizeWeights(s, dv, kv_mul, nb, bt_pad, n16, weights);
    PvBlock<kT>(v, code_bytes, n, head_dim, kv_mul, bt_pad, weights, alpha,
                accp);
  }
  UndoPairOrder(accp, int64_t{kv_mul} * head_dim, st.acc);
}

template <DType kT>
inline DecodeKernel SelectFor(int head_dim) {
  if (head_dim == 64) return &DecodeBlocks<kT, 1>;
  if (head_dim == 128) return &DecodeBlocks<kT, 2>;
  return &DecodeBlocks<kT, 0>;
}

inline DecodeKernel Select(DType dtype, int head_dim) {
  if (head_dim % 64 != 0) return nullptr;
  if (dtype == DType::kQ8_0) return SelectFor<DType::kQ8_0>(head_dim);
  if (dtype == DType::kQ4_0) return SelectFor<DType::kQ4_0>(head_dim);
  return nullptr;
}

}  // namespace avx512vnni
#pragma GCC pop_options

Isa BestIsa() {
  const CpuFeatures& cpu = Cpu();
  if (cpu.avx512() && cpu.avx2_fma()) {
    return cpu.avx512_bf16 ? Isa::kAvx512Bf16 : Isa::kAvx512;
  }
  return cpu.avx2_fma() ? Isa::kAvx2 : Isa::kScalar;
}

std::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Bf16:
      return "avx512bf16";
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

DecodeKernel SelectDecodeKernel(Isa isa, DType dtype, int head_dim) {
  DecodeKernel k = nullptr;
  if (isa == Isa::kAvx512Bf16 && dtype == DType::kBF16) {
    k = avx512bf16::Select(head_dim);
  }
  if (isa >= Isa::kAvx512 && IsBlockQuantized(dtype) && Cpu().avx512_vnni) {
    k = avx512vnni::Select(dtype, head_dim);
  }
  if (k == nullptr && isa >= Isa::kAvx512) k = avx512::Select(dtype, head_dim);
  if (k == nullptr && isa >= Isa::kAvx2) k = avx2::Select(dtype, head_dim);
  if (k != nullptr) return k;
  switch (dtype) {
    case DType::kF32:
      return &DecodeBlocksScalar<DType::kF32>;
    case DType::kBF16:
      return &DecodeBlocksScalar<DType::kBF16>;
    case DType::kQ8_0:
      return &DecodeBlocksScalar<DType::kQ8_0>;
    case DType::kQ4_0:
      return &DecodeBlocksScalar<DType::kQ4_0>;
  }
  return nullptr;
}

float MaxScalar(const float* s, int n) {
  float m = -INFINITY;
  for (int t = 0; t < n; ++t) m = std::max(m, s[t]);
  return m;
}

float Exp2SumScalar(float* s, int n, float m) {
  float sum = 0.0f;
  for (int t = 0; t < n; ++t) {
    s[t] = Exp2(s[t] - m);
    sum += s[t];
  }
  return sum;
}

RowOps SelectRowOps(Isa isa) {
  switch (isa) {
    case Isa::kAvx512Bf16:
    case Isa::kAvx512:
      return RowOps{&avx512::MaxOf, &avx512::Exp2Sum};
    case Isa::kAvx2:
      return RowOps{&avx2::MaxOf, &avx2::Exp2Sum};
    case Isa::kScalar:
      break;
  }
  return RowOps{&MaxScalar, &Exp2SumScalar};
}

}  // namespace kvserve::attention_internal

#pragma GCC diagnostic pop
