// The SIMD Gemv kernels of the legacy types (quant_legacy_simd.h) at four
// x86 levels, each compiled for its ISA with #pragma GCC target (the rest
// of the build targets baseline x86-64) and chosen at run time from the
// CpuFeatures quant_legacy.cc is given:
//   avx2         AVX2 + FMA + F16C; int8 dots by _mm256_maddubs_epi16 +
//                _mm256_madd_epi16 (the sign trick for q8_0 and iq4_nl)
//   avx_vnni     + AVX-VNNI: _mm256_dpbusd_avx_epi32 (every type unsigned
//                with an offset, no sign trick)
//   avx512       AVX-512 F/BW/VL/DQ: two blocks per 512-bit step (measured
//                ~1.3x avx2 at m = 8, equal at m = 1; bench/quant_bench)
//   avx512_vnni  + AVX512_VNNI: _mm512_dpbusd_epi32
// The float types have avx2 and avx512 kernels only.
#include "core/quant/quant_legacy.h"

// GCC 12's AVX-512 intrinsics build their unmasked forms from
// _mm512_undefined_*(), which -Wuninitialized reports as a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/util/bf16.h"

namespace kvserve::quant::legacy {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {

constexpr int kB = 1, kW = 8, kMaxTile = 4, kLaneWeightRows = 2;
constexpr bool kVnni = false;
using VI = __m256i;
// acc + Σ of 4 adjacent u8 × s8 per int32 lane (the u8 operands of the lane
// kernels are at most 31 here, or |w| <= 127 against |x| <= 127 with the
// sign trick: no int16 saturation).
inline __m256i LaneDot8(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(
      acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
using VF = __m256;

inline VI JoinW(__m256i lo, __m256i) { return lo; }
inline VI Abs8(VI w) { return _mm256_sign_epi8(w, w); }
inline VI SignOf(VI x, VI w) { return _mm256_sign_epi8(x, w); }
inline VI ZeroI() { return _mm256_setzero_si256(); }
inline VI DotU8S8(VI init, VI u, VI s) {
  return _mm256_add_epi32(init, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s),
                                                  _mm256_set1_epi16(1)));
}
inline VF ToF(VI x) { return _mm256_cvtepi32_ps(x); }
inline VF ZeroF() { return _mm256_setzero_ps(); }
inline VF Add(VF a, VF b) { return _mm256_add_ps(a, b); }
inline VF Fma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline float ReduceAdd(VF x) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline __m256 LowHalf(VF x) { return x; }
inline __m256 HighHalf(VF x) { return x; }
inline VI LoadCorrections(const int32_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline VF LoadF32(const float* p) { return _mm256_loadu_ps(p); }
inline VF LoadF16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline VF LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

#include "core/quant/quant_legacy_simd.h"

}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace avx_vnni {

using avx2::Abs8;
using avx2::Add;
using avx2::Fma;
using avx2::HighHalf;
using avx2::JoinW;
using avx2::LoadBf16;
using avx2::LoadCorrections;
using avx2::LoadF16;
using avx2::LoadF32;
using avx2::LowHalf;
using avx2::ReduceAdd;
using avx2::SignOf;
using avx2::ToF;
using avx2::VF;
using avx2::VI;
using avx2::ZeroF;
constexpr int kB = 1, kW = 8, kMaxTile = 4, kLaneWeightRows = 2;
constexpr bool kVnni = true;
inline __m256i LaneDot8(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_avx_epi32(acc, u, s);
}
using avx2::ZeroI;
inline VI DotU8S8(VI init, VI u, VI s) {
  return _mm256_dpbusd_avx_epi32(init, u, s);
}

#include "core/quant/quant_legacy_simd.h"

}  // namespace avx_vnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace avx512 {

constexpr int kB = 2, kW = 16, kMaxTile = 8, kLaneWeightRows = 4;
constexpr bool kVnni = false;
using avx2::LaneDot8;
using VI = __m512i;
using VF = __m512;
inline VI JoinW(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
inline VI Abs8(VI w) { return _mm512_abs_epi8(w); }
inline VI SignOf(VI x, VI w) {
  return _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(),
                              x);
}
inline VI ZeroI() { return _mm512_setzero_si512(); }
inline VI DotU8S8(VI init, VI u, VI s) {
  return _mm512_add_epi32(init, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s),
                                                  _mm512_set1_epi16(1)));
}
inline VF ToF(VI x) { return _mm512_cvtepi32_ps(x); }
inline VF ZeroF() { return _mm512_setzero_ps(); }
inline VF Add(VF a, VF b) { return _mm512_add_ps(a, b); }
inline VF Fma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline float ReduceAdd(VF x) { return _mm512_reduce_add_ps(x); }
inline __m256 LowHalf(VF x) { return _mm512_castps512_ps256(x); }
inline __m256 HighHalf(VF x) { return _mm512_extractf32x8_ps(x, 1); }
// Two blocks' per-lane corrections, [b][8] then [b + 1][8].
inline VI LoadCorrections(const int32_t* p) { return _mm512_loadu_si512(p); }
inline VF LoadF32(const float* p) { return _mm512_loadu_ps(p); }
inline VF LoadF16(const uint16_t* p) {
  return _mm512_cvtph_ps(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline VF LoadBf16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

#include "core/quant/quant_legacy_simd.h"

}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
namespace avx512_vnni {

using avx512::Abs8;
using avx512::Add;
using avx512::Fma;
using avx512::HighHalf;
using avx512::JoinW;
using avx512::LoadBf16;
using avx512::LoadCorrections;
using avx512::LoadF16;
using avx512::LoadF32;
using avx512::LowHalf;
using avx512::ReduceAdd;
using avx512::SignOf;
using avx512::ToF;
using avx512::VF;
using avx512::VI;
using avx512::ZeroF;
constexpr int kB = 2, kW = 16, kMaxTile = 8, kLaneWeightRows = 4;
constexpr bool kVnni = true;
inline __m256i LaneDot8(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}
using avx512::ZeroI;
inline VI DotU8S8(VI init, VI u, VI s) {
  return _mm512_dpbusd_epi32(init, u, s);
}

#include "core/quant/quant_legacy_simd.h"

}  // namespace avx512_vnni
#pragma GCC pop_options

const KernelSet& Avx2Kernels() { return avx2::kKernels; }
const KernelSet& AvxVnniKernels() { return avx_vnni::kKernels; }
const KernelSet& Avx512Kernels() { return avx512::kKernels; }
const KernelSet& Avx512VnniKernels() { return avx512_vnni::kKernels; }

}  // namespace kvserve::quant::legacy

#pragma GCC diagnostic pop
