// The legacy ggml block formats (what quant_legacy.cc serves) and the SIMD
// kernel sets of quant_legacy_x86.cc. Internal to core/quant.
//
// Every block covers 32 consecutive elements of a row and is laid out exactly
// as ggml-common.h declares it (scales are IEEE halves, little-endian):
//   q4_0   {d; qs[16]}          x = d·(q − 8); q = low nibble of qs[j] for
//                               element j, high nibble for element j + 16
//   q4_1   {d; m; qs[16]}       x = d·q + m, nibbles as q4_0
//   q5_0   {d; qh[4]; qs[16]}   x = d·(q − 16); q's bit 4 for element j is
//                               bit j of the little-endian u32 qh
//   q5_1   {d; m; qh[4]; qs[16]} x = d·q + m, bits as q5_0
//   q8_0   {d; qs[32]}          x = d·q, q int8
//   q8_1   {d; s; qs[32]}       x = d·q, s = d·Σq (activations only)
//   iq4_nl {d; qs[16]}          x = d·kIq4NlValues[q], nibbles as q4_0
#ifndef KVSERVE_CORE_QUANT_QUANT_LEGACY_H_
#define KVSERVE_CORE_QUANT_QUANT_LEGACY_H_

#include <cstdint>

#include "core/quant/quant.h"

namespace kvserve::quant::legacy {

inline constexpr int kBlockElems = 32;

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint16_t d, s;
  int8_t qs[32];
};
struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 &&
              sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 &&
              sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36 &&
              sizeof(BlockIq4Nl) == 18);

// ggml's kvalues_iq4nl: the 16 levels of IQ4_NL, denser near zero.
inline constexpr int8_t kIq4NlValues[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// q4_0x8 (quant::RepackQ4_0x8): a q4_0 matrix of a multiple of 8 rows with
// each group of 8 rows (8g .. 8g + 7) interleaved, block by block, into
// records of the same 144 bytes as its 8 blocks:
//   d[8]         the 8 rows' scales, row order
//   qs[4][32]    4 pieces, each 8 bytes of qs from 4 rows: pieces 0 and 1
//                bytes 0..7, pieces 2 and 3 bytes 8..15; pieces 0 and 2
//                rows {0, 1, 4, 5}, 1 and 3 rows {2, 3, 6, 7}, in that order
// so that one load gives 4 rows' quants side by side, and the pair sums of
// two pieces' int32 lanes (one hadd) come out in row order.
inline constexpr int kQ4_0x8RecordBytes = 8 * sizeof(BlockQ4_0);
static_assert(kQ4_0x8RecordBytes == 144);
// The offset in a record of row r's (0..7) qs bytes [8h, 8h + 8).
inline constexpr int Q4_0x8QsOffset(int r, int h) {
  return 16 + 32 * (2 * h + ((r >> 1) & 1)) + 8 * ((r & 1) + 2 * (r >> 2));
}

// The Gemv kernels of one ISA level, one per weight type. The integer
// kernels require activation quants in [-127, 127] (what the Q8 quantizers
// produce): the avx2 sign trick cannot negate -128.
struct KernelSet {
  GemvFn f32, f16, bf16;
  GemvFn q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl;
  GemvFn q4_0x8;  // q4_0x8 weights (above), q4_0's sequential order
};
// REQUIRES for calling a kernel: cpu.avx2_fma(), plus avx_vnni,
// avx512() or avx512() && avx512_vnni respectively.
const KernelSet& Avx2Kernels();
const KernelSet& AvxVnniKernels();
const KernelSet& Avx512Kernels();
const KernelSet& Avx512VnniKernels();

}  // namespace kvserve::quant::legacy

#endif  // KVSERVE_CORE_QUANT_QUANT_LEGACY_H_
