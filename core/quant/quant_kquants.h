// K-quant internals shared by quant_kquants.cc (block layouts, reference
// code, scalar kernels, dispatch) and quant_kquants_x86.cc (SIMD kernels).
// Internal to core/quant.
//
// Every weight type's dot product with a Q8_K activation block x has one
// shape, which the kernels share. A super-block of 256 weights decodes to
//   u[e]    unsigned quant of element e (0..3, 0..7, 0..15, 0..31 or 0..63),
//   s[j]    integer scale of elements [16j, 16j + 16),
//   b[j]    integer bias coefficient of the same 16 elements,
//   d_main, d_bias  the block's float scales,
// with weight w[e] = d_main·s[e/16]·u[e] − d_bias·b[e/16] (up to f32
// rounding), so that
//   w·x = x.d · (d_main·Σ_j s[j]·Σ_{e in j} u[e]·x.qs[e]
//                − d_bias·Σ_j b[j]·x.bsums[j]).
// The two sums are exact in int32; u fits maddubs' unsigned operand.
//   Q2_K: u = 2 bits,        s = scale & 15,  b = scale >> 4, d, dmin
//   Q3_K: u = q + 4 (0..7),  s = scale − 32,  b = 4·s,        d, d
//   Q4_K: u = 4 bits,        s = sc[e/32],    b = m[e/32],    d, dmin
//   Q5_K: u = 5 bits,        s = sc[e/32],    b = m[e/32],    d, dmin
//   Q6_K: u = q + 32 (0..63), s = scale,      b = 32·s,       d, d
#ifndef KVSERVE_CORE_QUANT_QUANT_KQUANTS_H_
#define KVSERVE_CORE_QUANT_QUANT_KQUANTS_H_

#include <cstdint>

#include "core/quant/quant.h"

namespace kvserve::quant::internal::kquants {

constexpr int kQK = 256;  // elements per super-block (ggml's QK_K)

// ggml's block layouts (ggml-common.h), byte for byte. ggml_half is the
// raw IEEE binary16 bits.
struct BlockQ2K {
  uint8_t scales[16];  // 4-bit scale | 4-bit min << 4, per 16 elements
  uint8_t qs[64];      // 2-bit quants
  uint16_t d;          // super-block scale of the scales
  uint16_t dmin;       // super-block scale of the mins
};
struct BlockQ3K {
  uint8_t hmask[32];   // high bit of each quant
  uint8_t qs[64];      // low 2 bits
  uint8_t scales[12];  // 16 6-bit scales, offset by 32
  uint16_t d;
};
struct BlockQ4K {
  uint16_t d, dmin;
  uint8_t scales[12];  // 8 6-bit scales and 8 6-bit mins (get_scale_min_k4)
  uint8_t qs[128];     // 4-bit quants
};
struct BlockQ5K {
  uint16_t d, dmin;
  uint8_t scales[12];
  uint8_t qh[32];   // fifth bit of each quant
  uint8_t qs[128];  // low 4 bits
};
struct BlockQ6K {
  uint8_t ql[128];    // low 4 bits
  uint8_t qh[64];     // high 2 bits
  int8_t scales[16];  // 8-bit scales per 16 elements
  uint16_t d;
};
struct BlockQ8K {
  float d;
  int8_t qs[kQK];
  int16_t bsums[kQK / 16];  // sums of each 16 quants
};
static_assert(sizeof(BlockQ2K) == 84 && sizeof(BlockQ3K) == 110 &&
              sizeof(BlockQ4K) == 144 && sizeof(BlockQ5K) == 176 &&
              sizeof(BlockQ6K) == 210 && sizeof(BlockQ8K) == 292);

// The SIMD kernels of one ISA level, indexed by WeightIndex.
enum WeightIndex { kQ2, kQ3, kQ4, kQ5, kQ6, kNumWeightTypes };
struct GemvSet {
  GemvFn fn[kNumWeightTypes];
};

// quant_kquants_x86.cc; each REQUIRES the CPU features in its name.
namespace avx2 {  // AVX2 + FMA + F16C
extern const GemvSet kGemv;
}
namespace avx2_vnni {  // + AVX-VNNI
extern const GemvSet kGemv;
}
namespace avx512 {  // + AVX-512 F/BW/VL/DQ
extern const GemvSet kGemv;
}
namespace avx512_vnni {  // + AVX512_VNNI
extern const GemvSet kGemv;
}

}  // namespace kvserve::quant::internal::kquants

#endif  // KVSERVE_CORE_QUANT_QUANT_KQUANTS_H_
