// bfloat16: the upper 16 bits of an IEEE f32, as the KV cache, bf16
// weights and oneDNN's bf16 primitives hold it.
#ifndef KVSERVE_CORE_UTIL_BF16_H_
#define KVSERVE_CORE_UTIL_BF16_H_

#include <bit>
#include <cstdint>

namespace kvserve {

// Round to nearest, ties to even; NaN stays a (quiet) NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float Bf16ToFloat(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// FloatToBf16 over an array, without a branch so that the loop vectorises.
inline void ConvertFloatToBf16(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(src[i]);
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t nan = (bits >> 16) | 0x40;
    dst[i] = static_cast<uint16_t>(
        (bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
  }
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_BF16_H_
