// The K-quant SIMD kernels (quant_kquants_simd.h) at four ISA levels,
// built without -march flags: each level is a namespace compiled under its
// own `#pragma GCC target`, and KQuantGemv picks one from the CpuFeatures
// it is given.
//
//   avx2         maddubs (u8 weights × s8 activations) then madd with the
//                int16 sub-block scales, 256-bit
//   avx2_vnni    the madd and the add fused into AVX-VNNI's vpdpwssd
//   avx512       the avx2 kernel on 512-bit vectors (AVX512BW)
//   avx512_vnni  with AVX512_VNNI's vpdpwssd
//
// Measured on the 2-core AMD EPYC (Zen 5 flags) this was written on,
// m = 1, k = 4096, one thread, rows in L2, ns per super-block (GB/s of
// weights): q4_K avx2 5.3 (27), avx512_vnni 3.1 (47); q6_K avx2 6.6 (32),
// avx512_vnni 3.0 (70). VNNI saves little here (vpdpwssd only fuses an
// add). With 2 threads on a 4096 × 4096 matrix rotated through 256 MB
// (bench/quant_bench, OMP_WAIT_POLICY=active) both levels ran at 0.94-1.0
// of the machine's streaming read bandwidth (~48 GB/s).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/quant/quant_kquants.h"

// GCC 12's AVX-512 intrinsics build their unmasked forms from
// _mm512_undefined_*(), which -Wuninitialized reports as a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace kvserve::quant::internal::kquants {

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {

#include "core/quant/quant_kquants_x86_256.inc"

inline VI DotAcc(VI acc, VI u, VI q, VI s) {
  return _mm256_add_epi32(acc,
                          _mm256_madd_epi16(_mm256_maddubs_epi16(u, q), s));
}
inline VI DotAccOff(VI acc, VI u, VI q, VI s, VI off) {
  return _mm256_add_epi32(
      acc, _mm256_madd_epi16(_mm256_sub_epi16(_mm256_maddubs_epi16(u, q),
                                              _mm256_maddubs_epi16(off, q)),
                             s));
}

// acc + Σ of 4 adjacent u8 × s8 per int32 lane (pairs stay in int16: u8
// operands here are at most 63).
inline __m256i Dot8(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(
      acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

#include "core/quant/quant_kquants_simd.h"

}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace avx2_vnni {

#include "core/quant/quant_kquants_x86_256.inc"

inline VI DotAcc(VI acc, VI u, VI q, VI s) {
  return _mm256_dpwssd_avx_epi32(acc, _mm256_maddubs_epi16(u, q), s);
}
inline VI DotAccOff(VI acc, VI u, VI q, VI s, VI off) {
  return _mm256_dpwssd_avx_epi32(acc,
                                 _mm256_sub_epi16(_mm256_maddubs_epi16(u, q),
                                                  _mm256_maddubs_epi16(off, q)),
                                 s);
}

inline __m256i Dot8(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_avx_epi32(acc, u, s);
}

#include "core/quant/quant_kquants_simd.h"

}  // namespace avx2_vnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace avx512 {

#include "core/quant/quant_kquants_x86_512.inc"

inline VI DotAcc(VI acc, VI u, VI q, VI s) {
  return _mm512_add_epi32(acc,
                          _mm512_madd_epi16(_mm512_maddubs_epi16(u, q), s));
}
inline VI DotAccOff(VI acc, VI u, VI q, VI s, VI off) {
  return _mm512_add_epi32(
      acc, _mm512_madd_epi16(_mm512_sub_epi16(_mm512_maddubs_epi16(u, q),
                                              _mm512_maddubs_epi16(off, q)),
                             s));
}

// acc + Σ of 4 adjacent u8 × s8 per int32 lane (pairs stay in int16: u8
// operands here are at most 63).
inline __m256i Dot8(__m256i acc, __m256i u, __m256i s) {
  return _mm256_add_epi32(
      acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}

#include "core/quant/quant_kquants_simd.h"

}  // namespace avx512
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target( \
    "avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")
namespace avx512_vnni {

#include "core/quant/quant_kquants_x86_512.inc"

inline VI DotAcc(VI acc, VI u, VI q, VI s) {
  return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u, q), s);
}
inline VI DotAccOff(VI acc, VI u, VI q, VI s, VI off) {
  return _mm512_dpwssd_epi32(acc,
                             _mm512_sub_epi16(_mm512_maddubs_epi16(u, q),
                                              _mm512_maddubs_epi16(off, q)),
                             s);
}

inline __m256i Dot8(__m256i acc, __m256i u, __m256i s) {
  return _mm256_dpbusd_epi32(acc, u, s);
}

#include "core/quant/quant_kquants_simd.h"

}  // namespace avx512_vnni
#pragma GCC pop_options

}  // namespace kvserve::quant::internal::kquants

#pragma GCC diagnostic pop
