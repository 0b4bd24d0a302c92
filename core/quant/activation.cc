#include "core/quant/activation.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/util/bf16.h"
#include "core/util/check.h"
#include "core/util/cpu_features.h"
#include "core/util/fp16.h"

namespace kvserve::quant {
namespace {

constexpr int kBlock = 32;

// One Q8_0 (with_sum = false) or Q8_1 block: {f16 d, [f16 s,] int8 q[32]}.
void Block8Scalar(const float* x, bool with_sum, uint8_t* out) {
  float amax = 0;
  for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float id = amax != 0.0f ? 127.f / amax : 0.0f;
  int8_t* q = reinterpret_cast<int8_t*>(out + (with_sum ? 4 : 2));
  int sum = 0;
  for (int j = 0; j < kBlock; ++j) {
    q[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));  // half to even
    sum += q[j];
  }
  const uint16_t hd = FloatToFp16(d);
  std::memcpy(out, &hd, 2);
  if (with_sum) {
    const uint16_t hs = FloatToFp16(d * static_cast<float>(sum));
    std::memcpy(out + 2, &hs, 2);
  }
}

__attribute__((target("avx2,fma,f16c"))) void Block8Avx2(const float* x,
                                                         bool with_sum,
                                                         uint8_t* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax8 = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax8, 1),
                         _mm256_castps256_ps128(amax8));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float d = amax / 127.f;
  const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
  __m256i q[4];
  for (int i = 0; i < 4; ++i) {
    q[i] = _mm256_cvtps_epi32(
        _mm256_round_ps(_mm256_mul_ps(v[i], id),
                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  if (with_sum) {
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]),
                                       _mm256_add_epi32(q[2], q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s),
                               _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
    const uint16_t hs =
        _cvtss_sh(d * static_cast<float>(_mm_cvtsi128_si32(s4)), 0);
    std::memcpy(out + 2, &hs, 2);
  }
  const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
  const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i p = _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (with_sum ? 4 : 2)), p);
  const uint16_t hd = _cvtss_sh(d, 0);
  std::memcpy(out, &hd, 2);
}

__attribute__((target("avx2,fma,f16c"))) void RoundF16Avx2(const float* x,
                                                           int64_t n,
                                                           float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(
        _mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = Fp16ToFloat(FloatToFp16(x[i]));
}

}  // namespace

void RoundActivation(Type through, const float* x, int64_t n, float* out) {
  KVSERVE_CHECK(through == Type::kF16 || through == Type::kBF16);
  if (through == Type::kBF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(FloatToBf16(x[i]));
  } else if (Cpu().avx2_fma()) {
    RoundF16Avx2(x, n, out);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = Fp16ToFloat(FloatToFp16(x[i]));
  }
}

void QuantizeActivation(Type act, const float* x, int64_t k, void* out) {
  if (act == Type::kF32) return;
  if (act == Type::kQ8_K) {
    Info(Type::kQ8_K)->quantize(x, out, k);
    return;
  }
  KVSERVE_CHECK((act == Type::kQ8_0 || act == Type::kQ8_1) && k % kBlock == 0);
  const bool with_sum = act == Type::kQ8_1;
  const int block_bytes = with_sum ? 36 : 34;
  uint8_t* o = static_cast<uint8_t*>(out);
  const bool avx2 = Cpu().avx2_fma();
  for (int64_t b = 0; b < k / kBlock; ++b) {
    if (avx2) {
      Block8Avx2(x + b * kBlock, with_sum, o + b * block_bytes);
    } else {
      Block8Scalar(x + b * kBlock, with_sum, o + b * block_bytes);
    }
  }
}

}  // namespace kvserve::quant
