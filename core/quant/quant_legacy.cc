// The legacy ggml weight types: their table entries, scalar dequantizers and
// reference quantizers (ggml's quantize_row_*_ref, step for step), the
// scalar Gemv kernels (the floor, as ggml's reference vec_dot: an integer dot
// per block, then × d_w·d_x), and the dispatch over quant_legacy_x86.cc's
// SIMD kernels.
#include "core/quant/quant_legacy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/quant/quant_internal.h"
#include "core/util/bf16.h"
#include "core/util/fp16.h"
#include "core/util/llama_math.h"

namespace kvserve::quant::internal {
namespace {

using legacy::BlockIq4Nl;
using legacy::BlockQ4_0;
using legacy::BlockQ4_1;
using legacy::BlockQ5_0;
using legacy::BlockQ5_1;
using legacy::BlockQ8_0;
using legacy::BlockQ8_1;
using legacy::kBlockElems;
using legacy::kIq4NlValues;

constexpr int kHalf = kBlockElems / 2;

// ---------------------------------------------------------------------------
// Dequantization: dst[0, n) from the blocks at src.

void DequantizeF32(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}

void DequantizeF16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFloat(h[i]);
}

void DequantizeBf16(const void* src, float* dst, int64_t n) {
  const uint16_t* h = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(h[i]);
}

uint32_t HighBits(const uint8_t qh[4]) {
  uint32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  return bits;
}

void DequantizeQ4_0(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kBlockElems; ++i, dst += kBlockElems) {
    const float d = Fp16ToFloat(b[i].d);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>((b[i].qs[j] & 0xf) - 8) * d;
      dst[j + kHalf] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_1(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kBlockElems; ++i, dst += kBlockElems) {
    const float d = Fp16ToFloat(b[i].d);
    const float m = Fp16ToFloat(b[i].m);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>(b[i].qs[j] & 0xf) * d + m;
      dst[j + kHalf] = static_cast<float>(b[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5-bit quants of a q5 block, element order.
void Q5Quants(const uint8_t qs[16], const uint8_t qh[4], int q[32]) {
  const uint32_t h = HighBits(qh);
  for (int j = 0; j < kHalf; ++j) {
    q[j] = (qs[j] & 0xf) | static_cast<int>((h >> j) & 1u) << 4;
    q[j + kHalf] = (qs[j] >> 4) | static_cast<int>((h >> (j + kHalf)) & 1u)
                                      << 4;
  }
}

void DequantizeQ5_0(const void* src, float* dst, int64_t n) {
  const BlockQ5_0* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kBlockElems; ++i, dst += kBlockElems) {
    const float d = Fp16ToFloat(b[i].d);
    int q[kBlockElems];
    Q5Quants(b[i].qs, b[i].qh, q);
    for (int j = 0; j < kBlockElems; ++j) {
      dst[j] = static_cast<float>(q[j] - 16) * d;
    }
  }
}

void DequantizeQ5_1(const void* src, float* dst, int64_t n) {
  const BlockQ5_1* b = static_cast<const BlockQ5_1*>(src);
  for (int64_t i = 0; i < n / kBlockElems; ++i, dst += kBlockElems) {
    const float d = Fp16ToFloat(b[i].d);
    const float m = Fp16ToFloat(b[i].m);
    int q[kBlockElems];
    Q5Quants(b[i].qs, b[i].qh, q);
    for (int j = 0; j < kBlockElems; ++j) {
      dst[j] = static_cast<float>(q[j]) * d + m;
    }
  }
}

template <typename Block>
void DequantizeQ8(const void* src, float* dst, int64_t n) {
  const Block* b = static_cast<const Block*>(src);
  for (int64_t i = 0; i < n / kBlockElems; ++i, dst += kBlockElems) {
    const float d = Fp16ToFloat(b[i].d);
    for (int j = 0; j < kBlockElems; ++j) {
      dst[j] = static_cast<float>(b[i].qs[j]) * d;
    }
  }
}

void DequantizeIq4Nl(const void* src, float* dst, int64_t n) {
  const BlockIq4Nl* b = static_cast<const BlockIq4Nl*>(src);
  for (int64_t i = 0; i < n / kBlockElems; ++i, dst += kBlockElems) {
    const float d = Fp16ToFloat(b[i].d);
    for (int j = 0; j < kHalf; ++j) {
      dst[j] = static_cast<float>(kIq4NlValues[b[i].qs[j] & 0xf]) * d;
      dst[j + kHalf] = static_cast<float>(kIq4NlValues[b[i].qs[j] >> 4]) * d;
    }
  }
}

// ---------------------------------------------------------------------------
// Reference quantizers.

void QuantizeF32(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}

void QuantizeF16(const float* src, void* dst, int64_t n) {
  uint16_t* h = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = FloatToFp16(src[i]);
}

void QuantizeBf16(const float* src, void* dst, int64_t n) {
  ConvertFloatToBf16(src, n, static_cast<uint16_t*>(dst));
}

// The element of largest magnitude (the first one on ties), signed.
float SignedAbsMax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlockElems; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void MinMax(const float* x, float* min, float* max) {
  *min = x[0];
  *max = x[0];
  for (int j = 1; j < kBlockElems; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

// q4_0: d = max / -8, so the extreme element maps to q = 0 and the others
// to trunc(x/d + 8.5) (round half up) capped at 15.
void QuantizeQ4_0(const float* src, void* dst, int64_t n) {
  BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kBlockElems; ++i, src += kBlockElems) {
    const float d = SignedAbsMax(src) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = FloatToFp16(d);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(
          15, static_cast<int>(static_cast<int8_t>(src[j] * id + 8.5f)));
      const int q1 = std::min(
          15,
          static_cast<int>(static_cast<int8_t>(src[j + kHalf] * id + 8.5f)));
      b[i].qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
    }
  }
}

// q4_1: d = (max − min) / 15, m = min, q = trunc((x − min)/d + 0.5) ≤ 15.
void QuantizeQ4_1(const float* src, void* dst, int64_t n) {
  BlockQ4_1* b = static_cast<BlockQ4_1*>(dst);
  for (int64_t i = 0; i < n / kBlockElems; ++i, src += kBlockElems) {
    float min, max;
    MinMax(src, &min, &max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = FloatToFp16(d);
    b[i].m = FloatToFp16(min);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = std::min(
          15,
          static_cast<int>(static_cast<int8_t>((src[j] - min) * id + 0.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(
                                      (src[j + kHalf] - min) * id + 0.5f)));
      b[i].qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
    }
  }
}

// Packs 32 5-bit quants (element order) into qs and qh.
void PackQ5(const int q[32], uint8_t qs[16], uint8_t qh[4]) {
  uint32_t h = 0;
  for (int j = 0; j < kHalf; ++j) {
    qs[j] = static_cast<uint8_t>((q[j] & 0xf) | (q[j + kHalf] & 0xf) << 4);
    h |= static_cast<uint32_t>(q[j] >> 4 & 1) << j;
    h |= static_cast<uint32_t>(q[j + kHalf] >> 4 & 1) << (j + kHalf);
  }
  std::memcpy(qh, &h, sizeof(h));
}

// q5_0: as q4_0 with d = max / -16 and q ≤ 31.
void QuantizeQ5_0(const float* src, void* dst, int64_t n) {
  BlockQ5_0* b = static_cast<BlockQ5_0*>(dst);
  for (int64_t i = 0; i < n / kBlockElems; ++i, src += kBlockElems) {
    const float d = SignedAbsMax(src) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = FloatToFp16(d);
    int q[kBlockElems];
    for (int j = 0; j < kBlockElems; ++j) {
      q[j] = std::min(
          31, static_cast<int>(static_cast<int8_t>(src[j] * id + 16.5f)));
    }
    PackQ5(q, b[i].qs, b[i].qh);
  }
}

// q5_1: as q4_1 with d = (max − min) / 31 (ggml caps nothing here: the
// largest element maps to 31 exactly, up to rounding).
void QuantizeQ5_1(const float* src, void* dst, int64_t n) {
  BlockQ5_1* b = static_cast<BlockQ5_1*>(dst);
  for (int64_t i = 0; i < n / kBlockElems; ++i, src += kBlockElems) {
    float min, max;
    MinMax(src, &min, &max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = FloatToFp16(d);
    b[i].m = FloatToFp16(min);
    int q[kBlockElems];
    for (int j = 0; j < kBlockElems; ++j) {
      q[j] = static_cast<uint8_t>((src[j] - min) * id + 0.5f);
    }
    PackQ5(q, b[i].qs, b[i].qh);
  }
}

// q8_0 / q8_1: d = amax / 127, q = round(x / d) (half away from zero).
template <typename Block>
void QuantizeQ8(const float* src, void* dst, int64_t n) {
  Block* b = static_cast<Block*>(dst);
  for (int64_t i = 0; i < n / kBlockElems; ++i, src += kBlockElems) {
    float amax = 0.0f;
    for (int j = 0; j < kBlockElems; ++j) {
      amax = std::max(amax, std::fabs(src[j]));
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = FloatToFp16(d);
    int sum = 0;
    for (int j = 0; j < kBlockElems; ++j) {
      b[i].qs[j] = static_cast<int8_t>(std::round(src[j] * id));
      sum += b[i].qs[j];
    }
    if constexpr (sizeof(Block) == sizeof(BlockQ8_1)) {
      b[i].s = FloatToFp16(static_cast<float>(sum) * d);
    }
  }
}

// The index of the level nearest to x (the lower one on ties).
int NearestIq4Nl(float x) {
  if (x <= kIq4NlValues[0]) return 0;
  if (x >= kIq4NlValues[15]) return 15;
  int lo = 0, hi = 15;  // kIq4NlValues[lo] <= x < kIq4NlValues[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < kIq4NlValues[mid]) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return x - kIq4NlValues[lo] < kIq4NlValues[hi] - x ? lo : hi;
}

// iq4_nl, ggml's reference search (quantize_row_iq4_nl_impl with one block
// per super-block, no importance matrix): weights w = x², levels chosen for
// a trial scale, the weighted least-squares scale Σwqx / Σwq² for those
// levels, kept when it lowers the weighted error; trial inverse scales
// (v₀ + t) / max for t in [-7, 7]. The levels are then re-chosen for the
// final (f32) scale.
void QuantizeIq4Nl(const float* src, void* dst, int64_t n) {
  constexpr int kTries = 7;
  constexpr float kZeroBlock = 1e-15f;  // ggml's GROUP_MAX_EPS
  BlockIq4Nl* b = static_cast<BlockIq4Nl*>(dst);
  for (int64_t i = 0; i < n / kBlockElems; ++i, src += kBlockElems) {
    const float max = SignedAbsMax(src);
    float d = 0.0f;
    if (std::fabs(max) >= kZeroBlock) {
      // The weighted fit Σwqx / Σwq² and its merit (Σwqx)² / Σwq² for the
      // levels nearest to x·id.
      auto fit = [src](float id, float* sumqx, float* sumq2) {
        *sumqx = *sumq2 = 0.0f;
        for (int j = 0; j < kBlockElems; ++j) {
          const float q = kIq4NlValues[NearestIq4Nl(id * src[j])];
          const float w = src[j] * src[j];
          *sumqx += w * q * src[j];
          *sumq2 += w * q * q;
        }
      };
      float sumqx, sumq2;
      fit(1.0f / (-max / kIq4NlValues[0]), &sumqx, &sumq2);
      d = sumqx / sumq2;
      float best = d * sumqx;
      for (int t = -kTries; t <= kTries; ++t) {
        fit((t + kIq4NlValues[0]) / max, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
          d = sumqx / sumq2;
          best = d * sumqx;
        }
      }
    }
    b[i].d = FloatToFp16(d);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kHalf; ++j) {
      b[i].qs[j] = static_cast<uint8_t>(NearestIq4Nl(id * src[j]) |
                                        NearestIq4Nl(id * src[j + kHalf]) << 4);
    }
  }
}

// ---------------------------------------------------------------------------
// Scalar Gemv kernels.

// The signed values ggml's dots multiply with the activation quants, per
// element of one weight block, and the block's min (0 without one).
void Values(const BlockQ4_0& w, int v[kBlockElems]) {
  for (int j = 0; j < kHalf; ++j) {
    v[j] = (w.qs[j] & 0xf) - 8;
    v[j + kHalf] = (w.qs[j] >> 4) - 8;
  }
}
void Values(const BlockQ4_1& w, int v[kBlockElems]) {
  for (int j = 0; j < kHalf; ++j) {
    v[j] = w.qs[j] & 0xf;
    v[j + kHalf] = w.qs[j] >> 4;
  }
}
void Values(const BlockQ5_0& w, int v[kBlockElems]) {
  Q5Quants(w.qs, w.qh, v);
  for (int j = 0; j < kBlockElems; ++j) v[j] -= 16;
}
void Values(const BlockQ5_1& w, int v[kBlockElems]) { Q5Quants(w.qs, w.qh, v); }
void Values(const BlockQ8_0& w, int v[kBlockElems]) {
  for (int j = 0; j < kBlockElems; ++j) v[j] = w.qs[j];
}
void Values(const BlockIq4Nl& w, int v[kBlockElems]) {
  for (int j = 0; j < kHalf; ++j) {
    v[j] = kIq4NlValues[w.qs[j] & 0xf];
    v[j + kHalf] = kIq4NlValues[w.qs[j] >> 4];
  }
}
template <typename WBlock>
constexpr bool kHasMin =
    std::is_same_v<WBlock, BlockQ4_1> || std::is_same_v<WBlock, BlockQ5_1>;

// One weight row against one activation row in ggml's order, as the SIMD
// kernels compute it (quant_legacy_simd.h): `sequential` (q4_0 in
// matrices of a multiple of 8 rows) or lanes, `pairs` the two-accumulator
// lanes form (iq4_nl, one activation row).
template <typename WBlock, typename XBlock>
float DotRow(const WBlock* w, const XBlock* x, int64_t nb, bool sequential,
             bool pairs) {
  float y = 0.0f, mins = 0.0f;
  float acc[2][8] = {};
  const int64_t paired = pairs ? nb - nb % 2 : 0;
  for (int64_t b = 0; b < nb; ++b) {
    int v[kBlockElems];
    Values(w[b], v);
    int lanes[8] = {};
    for (int j = 0; j < kBlockElems; ++j) lanes[j / 4] += v[j] * x[b].qs[j];
    const float s = Fp16ToFloat(w[b].d) * Fp16ToFloat(x[b].d);
    if constexpr (kHasMin<WBlock>) {
      mins = std::fma(Fp16ToFloat(w[b].m), Fp16ToFloat(x[b].s), mins);
    }
    if (sequential || (pairs && b >= paired)) {
      int sum = 0;
      for (int j = 0; j < 8; ++j) sum += lanes[j];
      if (sequential) {
        y = std::fma(static_cast<float>(sum), s, y);
      } else {
        float total[8];
        for (int j = 0; j < 8; ++j) total[j] = acc[0][j] + acc[1][j];
        y = std::fma(s, static_cast<float>(sum), HsumFloat8(total));
      }
      continue;
    }
    float* a = acc[pairs ? b % 2 : 0];
    for (int j = 0; j < 8; ++j) {
      a[j] = std::fma(s, static_cast<float>(lanes[j]), a[j]);
    }
  }
  if (!sequential && !(pairs && paired < nb)) {
    float total[8];
    for (int j = 0; j < 8; ++j) total[j] = acc[0][j] + acc[1][j];
    y = HsumFloat8(total);
  }
  return kHasMin<WBlock> ? y + mins : y;
}

template <typename WBlock, typename XBlock>
void GemvBlocksScalar(const GemvArgs& a) {
  const int64_t nb = a.k / kBlockElems;
  const uint8_t* w_base = static_cast<const uint8_t*>(a.w);
  const uint8_t* x_base = static_cast<const uint8_t*>(a.x);
  const bool sequential =
      std::is_same_v<WBlock, BlockQ4_0> && a.w_rows > 0 && a.w_rows % 8 == 0;
  const bool pairs = std::is_same_v<WBlock, BlockIq4Nl> && a.m == 1;
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    const WBlock* w =
        reinterpret_cast<const WBlock*>(w_base + i * a.w_row_bytes);
    for (int r = 0; r < a.m; ++r) {
      const XBlock* x =
          reinterpret_cast<const XBlock*>(x_base + r * a.x_row_bytes);
      a.y[r * a.ldy + i] = DotRow(w, x, nb, sequential, pairs);
    }
  }
}

// Block b of row r (0..7) of a q4_0x8 group, as a plain q4_0 block.
BlockQ4_0 X8Block(const uint8_t* group, int64_t b, int r) {
  const uint8_t* rec = group + b * legacy::kQ4_0x8RecordBytes;
  BlockQ4_0 out;
  std::memcpy(&out.d, rec + 2 * r, sizeof(out.d));
  for (int h = 0; h < 2; ++h) {
    std::memcpy(out.qs + 8 * h, rec + legacy::Q4_0x8QsOffset(r, h), 8);
  }
  return out;
}

void GemvQ4_0x8Scalar(const GemvArgs& a) {
  const int64_t nb = a.k / kBlockElems;
  const uint8_t* x_base = static_cast<const uint8_t*>(a.x);
  thread_local std::vector<BlockQ4_0> row;
  row.resize(nb);
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    const uint8_t* group =
        static_cast<const uint8_t*>(a.w) + (i / 8) * 8 * a.w_row_bytes;
    for (int64_t b = 0; b < nb; ++b) {
      row[b] = X8Block(group, b, static_cast<int>(i % 8));
    }
    for (int r = 0; r < a.m; ++r) {
      const BlockQ8_0* x =
          reinterpret_cast<const BlockQ8_0*>(x_base + r * a.x_row_bytes);
      a.y[r * a.ldy + i] = DotRow(row.data(), x, nb, true, false);
    }
  }
}

template <typename T, float (*kLoad)(T)>
void GemvFloatScalar(const GemvArgs& a) {
  const uint8_t* w_base = static_cast<const uint8_t*>(a.w);
  const uint8_t* x_base = static_cast<const uint8_t*>(a.x);
  for (int64_t i = a.row_begin; i < a.row_end; ++i) {
    const T* w = reinterpret_cast<const T*>(w_base + i * a.w_row_bytes);
    for (int r = 0; r < a.m; ++r) {
      const float* x =
          reinterpret_cast<const float*>(x_base + r * a.x_row_bytes);
      float sum = 0.0f;
      for (int64_t j = 0; j < a.k; ++j) sum += kLoad(w[j]) * x[j];
      a.y[r * a.ldy + i] = sum;
    }
  }
}

float LoadF32(float x) { return x; }

// ---------------------------------------------------------------------------
// The table.

constexpr TypeInfo kTypes[] = {
    {Type::kF32, "f32", 1, 4, Type::kF32, DequantizeF32, QuantizeF32},
    {Type::kF16, "f16", 1, 2, Type::kF32, DequantizeF16, QuantizeF16},
    {Type::kBF16, "bf16", 1, 2, Type::kF32, DequantizeBf16, QuantizeBf16},
    {Type::kQ4_0, "q4_0", kBlockElems, sizeof(BlockQ4_0), Type::kQ8_0,
     DequantizeQ4_0, QuantizeQ4_0},
    {Type::kQ4_1, "q4_1", kBlockElems, sizeof(BlockQ4_1), Type::kQ8_1,
     DequantizeQ4_1, QuantizeQ4_1},
    {Type::kQ5_0, "q5_0", kBlockElems, sizeof(BlockQ5_0), Type::kQ8_0,
     DequantizeQ5_0, QuantizeQ5_0},
    {Type::kQ5_1, "q5_1", kBlockElems, sizeof(BlockQ5_1), Type::kQ8_1,
     DequantizeQ5_1, QuantizeQ5_1},
    {Type::kQ8_0, "q8_0", kBlockElems, sizeof(BlockQ8_0), Type::kQ8_0,
     DequantizeQ8<BlockQ8_0>, QuantizeQ8<BlockQ8_0>},
    {Type::kQ8_1, "q8_1", kBlockElems, sizeof(BlockQ8_1), Type::kQ8_1,
     DequantizeQ8<BlockQ8_1>, QuantizeQ8<BlockQ8_1>},
    {Type::kIQ4_NL, "iq4_nl", kBlockElems, sizeof(BlockIq4Nl), Type::kQ8_0,
     DequantizeIq4Nl, QuantizeIq4Nl},
};

// The kernel of `set` for weight type t (nullptr for a non-weight type).
GemvFn Pick(const legacy::KernelSet& set, Type t) {
  switch (t) {
    case Type::kF32:
      return set.f32;
    case Type::kF16:
      return set.f16;
    case Type::kBF16:
      return set.bf16;
    case Type::kQ4_0:
      return set.q4_0;
    case Type::kQ4_1:
      return set.q4_1;
    case Type::kQ5_0:
      return set.q5_0;
    case Type::kQ5_1:
      return set.q5_1;
    case Type::kQ8_0:
      return set.q8_0;
    case Type::kIQ4_NL:
      return set.iq4_nl;
    default:
      return nullptr;
  }
}

constexpr legacy::KernelSet kScalarKernels = {
    .f32 = GemvFloatScalar<float, LoadF32>,
    .f16 = GemvFloatScalar<uint16_t, Fp16ToFloat>,
    .bf16 = GemvFloatScalar<uint16_t, Bf16ToFloat>,
    .q4_0 = GemvBlocksScalar<BlockQ4_0, BlockQ8_0>,
    .q4_1 = GemvBlocksScalar<BlockQ4_1, BlockQ8_1>,
    .q5_0 = GemvBlocksScalar<BlockQ5_0, BlockQ8_0>,
    .q5_1 = GemvBlocksScalar<BlockQ5_1, BlockQ8_1>,
    .q8_0 = GemvBlocksScalar<BlockQ8_0, BlockQ8_0>,
    .iq4_nl = GemvBlocksScalar<BlockIq4Nl, BlockQ8_0>,
    .q4_0x8 = GemvQ4_0x8Scalar,
};

enum Level { kScalar, kAvx2, kAvxVnni, kAvx512, kAvx512Vnni, kNumLevels };
constexpr std::string_view kLevelNames[kNumLevels] = {
    "scalar", "avx2", "avx_vnni", "avx512", "avx512_vnni"};

const legacy::KernelSet& KernelsOf(Level level) {
  switch (level) {
    case kAvx2:
      return legacy::Avx2Kernels();
    case kAvxVnni:
      return legacy::AvxVnniKernels();
    case kAvx512:
      return legacy::Avx512Kernels();
    case kAvx512Vnni:
      return legacy::Avx512VnniKernels();
    default:
      return kScalarKernels;
  }
}

bool IsFloat(Type t) {
  return t == Type::kF32 || t == Type::kF16 || t == Type::kBF16;
}

// The highest level whose features `cpu` has. VNNI only speeds up the
// integer dot products, so the float types stop at the plain levels.
Level BestLevel(Type t, const CpuFeatures& cpu) {
  if (!cpu.avx2_fma()) return kScalar;
  const bool vnni_helps = !IsFloat(t);
  if (cpu.avx512()) {
    return cpu.avx512_vnni && vnni_helps ? kAvx512Vnni : kAvx512;
  }
  return cpu.avx_vnni && vnni_helps ? kAvxVnni : kAvx2;
}

// "<type>/<level>", e.g. "q4_0/avx2", with static storage.
std::string_view KernelName(const TypeInfo& info, Level level) {
  static const auto* names = [] {
    auto* n = new std::string[std::size(kTypes)][kNumLevels];
    for (size_t i = 0; i < std::size(kTypes); ++i) {
      for (int l = 0; l < kNumLevels; ++l) {
        n[i][l] = std::string(kTypes[i].name);
        n[i][l] += '/';
        n[i][l] += kLevelNames[l];
      }
    }
    return n;
  }();
  return names[&info - kTypes][level];
}

}  // namespace

const TypeInfo* LegacyInfo(Type t) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == t) return &info;
  }
  return nullptr;
}

GemvFn LegacyGemv(Type t, const CpuFeatures& cpu, std::string_view* name) {
  const TypeInfo* info = LegacyInfo(t);
  if (info == nullptr) return nullptr;
  const Level level = BestLevel(t, cpu);
  const GemvFn f = Pick(KernelsOf(level), t);
  if (f != nullptr) *name = KernelName(*info, level);
  return f;  // nullptr for q8_1, an activation type
}

GemvFn LegacyGemvQ4_0x8(const CpuFeatures& cpu, std::string_view* name) {
  static const auto* names = [] {
    auto* n = new std::string[kNumLevels];
    for (int l = 0; l < kNumLevels; ++l) {
      n[l] = "q4_0x8/" + std::string(kLevelNames[l]);
    }
    return n;
  }();
  const Level level = BestLevel(Type::kQ4_0, cpu);
  *name = names[level];
  return KernelsOf(level).q4_0x8;
}

}  // namespace kvserve::quant::internal

namespace kvserve::quant {

void RepackQ4_0x8(const void* src, int64_t rows, int64_t k, void* dst) {
  const int64_t nb = k / legacy::kBlockElems;
  const auto* in = static_cast<const legacy::BlockQ4_0*>(src);
  uint8_t* out = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < rows / 8; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* rec = out + (g * nb + b) * legacy::kQ4_0x8RecordBytes;
      for (int r = 0; r < 8; ++r) {
        const legacy::BlockQ4_0& w = in[(8 * g + r) * nb + b];
        std::memcpy(rec + 2 * r, &w.d, sizeof(w.d));
        for (int h = 0; h < 2; ++h) {
          std::memcpy(rec + legacy::Q4_0x8QsOffset(r, h), w.qs + 8 * h, 8);
        }
      }
    }
  }
}

void DequantizeQ4_0x8Row(const void* w, int64_t k, int64_t row, float* dst) {
  const int64_t nb = k / legacy::kBlockElems;
  const uint8_t* group = static_cast<const uint8_t*>(w) +
                         (row / 8) * nb * legacy::kQ4_0x8RecordBytes;
  for (int64_t b = 0; b < nb; ++b) {
    const legacy::BlockQ4_0 block =
        internal::X8Block(group, b, static_cast<int>(row % 8));
    internal::DequantizeQ4_0(&block, dst + b * legacy::kBlockElems,
                             legacy::kBlockElems);
  }
}

GemvFn SelectGemvQ4_0x8(const CpuFeatures& cpu) {
  std::string_view name;
  return internal::LegacyGemvQ4_0x8(cpu, &name);
}

std::string_view GemvNameQ4_0x8(const CpuFeatures& cpu) {
  std::string_view name;
  internal::LegacyGemvQ4_0x8(cpu, &name);
  return name;
}

}  // namespace kvserve::quant
