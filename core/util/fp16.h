// IEEE binary16 (ggml's ggml_half: block scales and F16 tensors) <-> float,
// inline for the quantized-weight kernels. Same results as
// core/model/gguf_tensor.h's HalfToFloat / FloatToHalf.
#ifndef KVSERVE_CORE_UTIL_FP16_H_
#define KVSERVE_CORE_UTIL_FP16_H_

#include <bit>
#include <cstdint>

namespace kvserve {

// Exact: subnormals, infinities and NaN included.
inline float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant · 2^-24, exact in f32
    const float v = static_cast<float>(mant) * 0x1p-24f;
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
  }
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | mant << 13);
  return std::bit_cast<float>(sign | (exp + (127 - 15)) << 23 | mant << 13);
}

// Round to nearest, ties to even; overflow gives ±inf, NaN gives a quiet NaN
// (0x7e00 with the sign kept).
inline uint16_t FloatToFp16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return sign | 0x7e00u;
  // 65520 = 65504 + half an ulp: it and everything above round to inf.
  if (x >= 0x477ff000u) return sign | 0x7c00u;
  if (x < 0x38800000u) {
    // Below 2^-14 (half subnormals): adding 0.5 (whose ulp is 2^-24) rounds
    // to a multiple of 2^-24 in hardware; the low bits are the mantissa.
    const float v = std::bit_cast<float>(x) + 0.5f;
    return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(v) -
                                        std::bit_cast<uint32_t>(0.5f));
  }
  // Rebias the exponent from 127 to 15 and round away the low 13 bits
  // (ties to even through the odd bit); a carry moves into the exponent.
  const uint32_t odd = (x >> 13) & 1u;
  x += (uint32_t{15} - 127u) * (1u << 23) + 0xfffu + odd;
  return sign | static_cast<uint16_t>(x >> 13);
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_FP16_H_
