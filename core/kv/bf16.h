// bfloat16 as stored in the KV cache: the upper 16 bits of an IEEE f32.
#ifndef KVSERVE_CORE_KV_BF16_H_
#define KVSERVE_CORE_KV_BF16_H_

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

}  // namespace kvserve

#endif  // KVSERVE_CORE_KV_BF16_H_
