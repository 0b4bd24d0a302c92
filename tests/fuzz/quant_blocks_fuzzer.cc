// Fuzzes every GGUF block type's kernels (core/quant/quant.h) on arbitrary
// block bytes: dequantize, the load-time finiteness check
// (MaterializeTensor, gguf_tensor.h) and every Gemv kernel SelectGemv picks
// at each ISA level this CPU reaches.
//
// Promises checked:
// - MaterializeTensor accepts the bytes exactly when every dequantized value
//   is finite (a non-finite element or block scale is the only way to get a
//   non-finite value, and it is refused);
// - for accepted (finite) weights, every kernel's y is within 1e-4 of
//   Σ|w·x| (plus a term for the VNNI kernels' offset, below) of the
//   double-precision dot product of the dequantized weights
//   and activations (when that is well inside float's range), and rows
//   outside [row_begin, row_end) are untouched.
//
// Input: byte 0 picks the type, byte 1 the activation rows m (1..4) and the
// weight rows (1..3); the rest are the weight rows' blocks (at most 16
// blocks, or 512 elements of a float type, per row).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/model/gguf_tensor.h"
#include "core/model/weights.h"
#include "core/quant/quant.h"
#include "core/util/cpu_features.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

using quant::GemvArgs;
using quant::GemvFn;
using quant::Type;
using quant::TypeInfo;

std::vector<const TypeInfo*>& Types() {
  static std::vector<const TypeInfo*> types;
  return types;
}

std::vector<CpuFeatures>& Levels() {
  static std::vector<CpuFeatures> levels;
  return levels;
}

// Byte offsets of a block's half-precision scales (d, and m or dmin),
// ggml's layouts; none for the float types.
std::vector<int> HalfScaleOffsets(Type t) {
  switch (t) {
    case Type::kQ4_0:
    case Type::kQ5_0:
    case Type::kQ8_0:
    case Type::kIQ4_NL:
      return {0};
    case Type::kQ4_1:
    case Type::kQ5_1:
    case Type::kQ4_K:
    case Type::kQ5_K:
      return {0, 2};
    case Type::kQ2_K:
      return {80, 82};
    case Type::kQ3_K:
      return {108};
    case Type::kQ6_K:
      return {208};
    default:
      return {};
  }
}

bool AllFinite(const std::vector<float>& v) {
  for (float f : v) {
    if (!std::isfinite(f)) return false;
  }
  return true;
}

// Activation rows in [-4, 4], the same for every input: 4 rows of the
// longest k (16 blocks of 256, or 512 floats).
constexpr int64_t kMaxActs = 4 * 16 * 256;
const std::vector<float>& ActValues() {
  static const std::vector<float> v = [] {
    std::vector<float> out(kMaxActs);
    for (int64_t i = 0; i < kMaxActs; ++i) {
      out[i] = 4.0f * std::sin(0.37f * static_cast<float>(i) + 0.1f);
    }
    return out;
  }();
  return v;
}

void FuzzType(const TypeInfo& info, uint8_t shape, const uint8_t* blocks,
              size_t size) {
  const int m = 1 + (shape & 3);
  const int rows = 1 + (shape >> 2) % 3;
  const bool is_float = info.block_elems == 1;
  int64_t nb = static_cast<int64_t>(size / rows) / info.block_bytes;
  nb = std::min<int64_t>(nb, is_float ? 512 : 16);  // k <= 4096
  if (is_float) nb -= nb % 32;  // whole SIMD widths for the float kernels
  if (nb == 0) return;
  const int64_t k = nb * info.block_elems;
  if (info.dequantize == nullptr) return;
  const int64_t row_bytes = nb * info.block_bytes;
  // The blocks at a 64-byte aligned address, as tensors in a mapped GGUF
  // file are (general.alignment is a multiple of 8, and 32 by default).
  std::vector<uint64_t> aligned((rows * row_bytes + 63) / 8 + 8);
  uint8_t* copy = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(aligned.data()) + 63) & ~uintptr_t{63});
  std::memcpy(copy, blocks, rows * row_bytes);
  blocks = copy;

  std::vector<float> w(rows * k);
  for (int i = 0; i < rows; ++i) {
    info.dequantize(blocks + i * row_bytes, w.data() + i * k, k);
  }
  const bool finite = AllFinite(w);
  if (!quant::IsWeightType(info.type)) return;

  ModelWeights weights;
  StoredTensor src;
  src.name = "fuzz";
  src.type = static_cast<uint32_t>(info.type);
  src.rows = rows;
  src.cols = k;
  src.data = blocks;
  src.n_bytes = static_cast<uint64_t>(rows * row_bytes);
  absl::StatusOr<WeightTensor> held =
      MaterializeTensor(src, info.type, weights);
  FUZZ_CHECK(held.ok() == finite, "%s: MaterializeTensor %s but values %s",
             std::string(info.name).c_str(), held.status().ToString().c_str(),
             finite ? "finite" : "not finite");

  // Activations in the kernels' format, and as the kernels see them.
  const TypeInfo& act = *quant::Info(info.act_type);
  const int64_t x_row_bytes = quant::RowBytes(info.act_type, k);
  std::vector<uint8_t> x(m * x_row_bytes);
  const std::vector<float>& xf = ActValues();
  std::vector<float> xq(m * k);
  for (int r = 0; r < m; ++r) {
    act.quantize(xf.data() + r * k, x.data() + r * x_row_bytes, k);
    act.dequantize(x.data() + r * x_row_bytes, xq.data() + r * k, k);
  }
  // The VNNI kernels multiply unsigned by signed bytes with an offset of
  // 128 and subtract the offset's share again in float, so their error also
  // scales with each block's scale times Σ|x| over the block, even where
  // the block's quants are 0: that term is in the bound too.
  const std::vector<int> scale_offsets = HalfScaleOffsets(info.type);
  std::vector<double> want(m * rows), bound(m * rows);
  for (int r = 0; r < m; ++r) {
    for (int i = 0; i < rows; ++i) {
      double dot = 0, abs_dot = 0, scale_mass = 0;
      for (int64_t b = 0; b < nb; ++b) {
        double abs_x = 0;
        for (int64_t e = b * info.block_elems; e < (b + 1) * info.block_elems;
             ++e) {
          const double p = double{w[i * k + e]} * xq[r * k + e];
          dot += p;
          abs_dot += std::fabs(p);
          abs_x += std::fabs(xq[r * k + e]);
        }
        const uint8_t* block = blocks + i * row_bytes + b * info.block_bytes;
        for (int off : scale_offsets) {
          uint16_t h;
          std::memcpy(&h, block + off, 2);
          scale_mass += std::fabs(HalfToFloat(h)) * 128 * abs_x;
        }
      }
      want[r * rows + i] = dot;
      bound[r * rows + i] = 1e-4 * abs_dot + 1e-6 * scale_mass + 1e-6;
    }
  }

  // Rows [0, rows) of W; y gets two sentinel columns on each side.
  const int64_t ldy = rows + 4;
  const int row_begin = rows > 2 ? 1 : 0, row_end = rows;
  for (const CpuFeatures& cpu : Levels()) {
    const GemvFn gemv = quant::SelectGemv(info.type, cpu);
    FUZZ_CHECK(gemv != nullptr, "no kernel for %s",
               std::string(info.name).c_str());
    std::vector<float> y(m * ldy, -1234.5f);
    GemvArgs a;
    a.k = k;
    a.w = blocks;
    a.w_row_bytes = row_bytes;
    a.row_begin = row_begin;
    a.row_end = row_end;
    a.x = x.data();
    a.x_row_bytes = x_row_bytes;
    a.m = m;
    a.y = y.data();
    a.ldy = ldy;
    gemv(a);
    const std::string name(quant::GemvName(info.type, cpu));
    for (int r = 0; r < m; ++r) {
      for (int i = 0; i < ldy; ++i) {
        const float got = y[r * ldy + i];
        if (i < row_begin || i >= row_end) {
          FUZZ_CHECK(got == -1234.5f, "%s wrote row %d outside [%d, %d)",
                     name.c_str(), i, row_begin, row_end);
          continue;
        }
        // Finite F32/BF16 weights near FLT_MAX can overflow a float sum:
        // only sums well inside float's range are compared.
        if (!finite || bound[r * rows + i] > 1e30) continue;
        FUZZ_CHECK(std::fabs(got - want[r * rows + i]) <= bound[r * rows + i],
                   "%s: row %d act %d: %g, want %g (k %lld)", name.c_str(), i,
                   r, got, want[r * rows + i], static_cast<long long>(k));
      }
    }
  }
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace kvserve;
  for (uint32_t t = 0; t < 64; ++t) {
    if (const quant::TypeInfo* info = quant::Info(t)) Types().push_back(info);
  }
  // Each ISA level this CPU reaches, once (the kernels' features differ).
  for (IsaLevel level : {IsaLevel::kScalar, IsaLevel::kAvx2, IsaLevel::kAvx512,
                         IsaLevel::kAvx512Bf16, IsaLevel::kNative}) {
    if (level > DetectedIsa()) break;
    Levels().push_back(CappedAt(DetectedCpu(), level));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  if (size < 2) return 0;
  const quant::TypeInfo& info = *Types()[data[0] % Types().size()];
  FuzzType(info, data[1], data + 2, size - 2);
  return 0;
}
