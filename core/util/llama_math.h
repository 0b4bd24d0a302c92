// Pieces of llama.cpp's CPU arithmetic that computing its values to the bit
// needs in several places (the quantized kernels, attention, SwiGLU).
#ifndef KVSERVE_CORE_UTIL_LLAMA_MATH_H_
#define KVSERVE_CORE_UTIL_LLAMA_MATH_H_

#include <bit>
#include <cmath>
#include <cstdint>

namespace kvserve {

// ggml's hsum_float_8: ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)).
inline float HsumFloat8(const float* a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// ggml_v_expf's approximation of e^x (its softmax and SiLU on whole
// vectors of 8 or 16 floats), lane for lane. Within 1.5 ulp of e^x; 0 for
// x = -inf.
inline float LlamaExpf(float x) {
  // e^x = 2^n · e^b: n = round(x·log2 e) (by the 1.5·2^23 shift), b = x −
  // n·ln 2 in two parts, e^b − 1 by a degree-5 polynomial; the scale 2^n
  // built from n's bits, split in two factors when |n| > 126.
  const float shift = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, shift);
  const float n = z - shift;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = std::bit_cast<uint32_t>(z) << 23;
  const float k = std::bit_cast<float>(e + std::bit_cast<uint32_t>(1.0f));
  const float u = b * b;
  const float j =
      std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                        std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
               u, 0x1.ffffecp-1f * b);
  const float an = std::fabs(n);
  if (!(an > 126.0f)) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = std::bit_cast<float>(g + 0x7f000000u);
  if (an > 192.0f) return s1 * s1;
  const float s2 = std::bit_cast<float>(e - g);
  return std::fma(s2, j, s2) * s1;
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_LLAMA_MATH_H_
