// GGUF/ggml weight types kept in their own block layout: what a block holds,
// dequantization, reference quantizers (for the model maker), and the
// matrix-vector kernels that read the blocks directly (decode).
//
// A row of n elements of a block type is n / block_elems blocks of
// block_bytes each, exactly as ggml lays them out in a GGUF file. The dot
// kernels read activations quantized once per step into the type's
// activation format (`act_type`: Q8_0, Q8_1 or Q8_K blocks, or plain f32 for
// the float types), as the formats' own reference dot products do.
//
// Families: quant_legacy.cc (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q8_1, IQ4_NL) and quant_kquants.cc (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K).
//
// Thread-safety: every function is pure; kernels may run on many threads
// over disjoint row ranges.
#ifndef KVSERVE_CORE_QUANT_QUANT_H_
#define KVSERVE_CORE_QUANT_QUANT_H_

#include <cstdint>
#include <string_view>

#include "core/util/cpu_features.h"

namespace kvserve::quant {

// Values are ggml's type ids, as GGUF stores them.
enum class Type : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ4_NL = 20,
  kBF16 = 30,
};

// y[r * ldy + i] = Σ_j W[i][j] · x_r[j] for rows i in [row_begin, row_end)
// of W and activation rows r in [0, m).
struct GemvArgs {
  int64_t k = 0;            // row length in elements (multiple of block_elems)
  const void* w = nullptr;  // row 0 of W
  int64_t w_row_bytes = 0;
  int64_t row_begin = 0, row_end = 0;
  // m rows in the weight type's act_type format (QuantizeRow of act_type),
  // x_row_bytes apart.
  const void* x = nullptr;
  int64_t x_row_bytes = 0;
  int m = 1;  // >= 1, any count (kernels walk it in tiles)
  float* y = nullptr;
  int64_t ldy = 0;
  // W's rows in all (not just this call's range), or 0 if unknown: ggml
  // repacks q4_0 matrices of a multiple of 8 rows, which changes the order
  // of its float sums, and the q4_0 kernels follow it (quant_legacy_simd.h).
  int64_t w_rows = 0;
  // From this many activation rows on, the types with activation-lane
  // kernels (faster for prompts and batches) use them, although their sums
  // are not in ggml's order; a huge value keeps ggml's order at every m.
  // q4_0 in its sequential order uses them from 4 rows (the same order).
  int lane_min_rows = 8;
};
using GemvFn = void (*)(const GemvArgs& args);

struct TypeInfo {
  Type type;
  std::string_view name;  // ggml's name: "f16", "q4_0", "q4_K", "iq4_nl", ...
  int block_elems;        // elements per block (1 for F32/F16/BF16)
  int block_bytes;        // bytes per block
  // The activation format this type's Gemv kernels read (kF32, kQ8_0,
  // kQ8_1 or kQ8_K). Activation types are themselves listed here.
  Type act_type;
  // dst[0, n) from n elements' blocks at src. REQUIRES: n % block_elems == 0.
  void (*dequantize)(const void* src, float* dst, int64_t n);
  // The format's reference quantizer (round-trips with dequantize).
  // REQUIRES: n % block_elems == 0.
  void (*quantize)(const float* src, void* dst, int64_t n);
};

// nullptr when `t` (a ggml type id) is not supported.
const TypeInfo* Info(uint32_t ggml_type);
inline const TypeInfo* Info(Type t) { return Info(static_cast<uint32_t>(t)); }
// Bytes of a row of n elements. REQUIRES: Info(t) and n % block_elems == 0.
int64_t RowBytes(Type t, int64_t n);
// Whether `t` can be a weight matrix's type (not an activation-only type
// such as Q8_1 or Q8_K).
bool IsWeightType(Type t);
// The fastest Gemv kernel for weights of type `t` using only `cpu`'s
// features (Cpu() in production; tests pass lower levels). Never nullptr
// for a weight type (a scalar kernel is the floor).
GemvFn SelectGemv(Type t, const CpuFeatures& cpu);
// The name of the kernel SelectGemv picks, for logs and benchmarks
// (e.g. "q4_K/avx512_vnni").
std::string_view GemvName(Type t, const CpuFeatures& cpu);

// q4_0 matrices of a multiple of 8 rows repacked 8 rows interleaved (the
// layout quant_legacy.h describes; the same bytes, ggml's idea for its
// AVX2 q4_0 kernels): the decode kernel then reads one contiguous stream
// and forms 8 rows' block sums in the lanes of one vector, ~2x the row
// kernels' speed. It computes the bits of the q4_0 kernels on the plain
// rows (q4_0's sequential order: GemvArgs::w_rows).
//
// dst gets src's rows × k q4_0 weights repacked. REQUIRES: rows % 8 == 0,
// k % 32 == 0, dst holds rows · RowBytes(kQ4_0, k) bytes.
void RepackQ4_0x8(const void* src, int64_t rows, int64_t k, void* dst);
// dst[0, k) = row `row` of a repacked matrix w, dequantized.
void DequantizeQ4_0x8Row(const void* w, int64_t k, int64_t row, float* dst);
// The kernel for repacked weights: GemvArgs as for q4_0 with w the repacked
// matrix and w_row_bytes = RowBytes(kQ4_0, k) (row_begin and row_end may
// be any rows; multiples of 8 waste nothing).
GemvFn SelectGemvQ4_0x8(const CpuFeatures& cpu);
std::string_view GemvNameQ4_0x8(const CpuFeatures& cpu);

}  // namespace kvserve::quant

#endif  // KVSERVE_CORE_QUANT_QUANT_H_
