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

#include "core/kv/bf16.h"

namespace kvserve::attention_internal {

float Exp2(float x) { return std::exp2(x); }

int64_t DecodeScratchFloats(int head_dim, int kv_mul, int block_tokens) {
  constexpr int kMaxW = 16;
  const int64_t bt_pad = (block_tokens + kMaxW - 1) / kMaxW * kMaxW;
  return kv_mul * bt_pad + int64_t{kMaxW} * head_dim + kv_mul;
}

namespace {

// Portable kernel: any head_dim, any CPU.
template <typename T>
float LoadScalar(const T* p, int64_t i) {
  if constexpr (sizeof(T) == 4) {
    return p[i];
  } else {
    return Bf16ToFloat(p[i]);
  }
}

template <typename T>
void DecodeBlocksScalar(const DecodeArgs& a, PartialState st) {
  const int head_dim = a.head_dim;
  const int bt = a.block_tokens;
  float* s = a.scratch;  // [kv_mul][bt]
  const T* k_base = static_cast<const T*>(a.k_base);
  const T* v_base = static_cast<const T*>(a.v_base);
  for (int h = 0; h < a.kv_mul; ++h) {
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
  }
  std::fill(st.acc, st.acc + int64_t{a.kv_mul} * head_dim, 0.0f);
  for (int i = 0; i < a.n_blocks; ++i) {
    const int n = i + 1 == a.n_blocks ? a.last_block_tokens : bt;
    const T* k = k_base + a.blocks[i] * a.block_stride;
    const T* v = v_base + a.blocks[i] * a.block_stride;
    for (int h = 0; h < a.kv_mul; ++h) {
      const float* q = a.q + h * head_dim;
      float* sh = s + h * bt;
      float m_new = st.m[h];
      for (int t = 0; t < n; ++t) {
        float dot = 0.0f;
        for (int d = 0; d < head_dim; ++d) {
          dot += q[d] * LoadScalar(k, int64_t{t} * head_dim + d);
        }
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
        for (int d = 0; d < head_dim; ++d) {
          acc[d] += p * LoadScalar(v, int64_t{t} * head_dim + d);
        }
      }
      st.l[h] = l;
      st.m[h] = m_new;
    }
  }
}

}  // namespace

#pragma GCC push_options
#pragma GCC target("avx2,fma")
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
inline V SumsOfW(const V* a) {
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
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
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
// Lane t = Σ lanes of a[t]: pairwise sums within 128-bit lanes, then a
// 4×4 transpose-and-add of the 128-bit lanes.
inline V SumsOfW(const V* a) {
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
  const V w01 = _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x44),
                              _mm512_shuffle_f32x4(y[0], y[1], 0xEE));
  const V w23 = _mm512_add_ps(_mm512_shuffle_f32x4(y[2], y[3], 0x44),
                              _mm512_shuffle_f32x4(y[2], y[3], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88),
                       _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

#include "core/attention/decode_kernel_simd.inc"

}  // namespace avx512
#pragma GCC pop_options

Isa BestIsa() {
  static const Isa best = [] {
    Isa isa = Isa::kScalar;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      isa = Isa::kAvx2;
    }
    if (__builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq")) {
      isa = Isa::kAvx512;
    }
    if (const char* cap = std::getenv("KVSERVE_ISA")) {
      const std::string_view c(cap);
      if (c == "scalar") isa = Isa::kScalar;
      if (c == "avx2" && isa == Isa::kAvx512) isa = Isa::kAvx2;
    }
    return isa;
  }();
  return best;
}

std::string_view IsaName(Isa isa) {
  switch (isa) {
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
  if (isa == Isa::kAvx512) k = avx512::Select(dtype, head_dim);
  if (k == nullptr && isa != Isa::kScalar) k = avx2::Select(dtype, head_dim);
  if (k != nullptr) return k;
  return dtype == DType::kF32 ? &DecodeBlocksScalar<float>
                              : &DecodeBlocksScalar<uint16_t>;
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
