#include "core/model/gguf_tensor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/util/bf16.h"
#include "core/util/check.h"

namespace kvserve {

absl::StatusOr<WeightDTypeMode> ParseWeightDTypeMode(std::string_view name) {
  if (name == "auto") return WeightDTypeMode::kAuto;
  if (name == "f32") return WeightDTypeMode::kF32;
  if (name == "bf16") return WeightDTypeMode::kBF16;
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown weight dtype \"%s\" (expected auto, f32 or bf16)", name));
}

quant::Type HeldType(uint32_t stored_type, bool is_vector,
                     WeightDTypeMode mode) {
  if (is_vector) return quant::Type::kF32;
  switch (mode) {
    case WeightDTypeMode::kF32:
      return quant::Type::kF32;
    case WeightDTypeMode::kBF16:
      return quant::Type::kBF16;
    case WeightDTypeMode::kAuto:
      break;
  }
  return static_cast<quant::Type>(stored_type);
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0) {
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;  // 2^-24
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
  }
  if (exp == 31) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  constexpr uint32_t kF32Infinity = 255u << 23;
  constexpr uint32_t kF16Max = (127u + 16u) << 23;  // 65536: rounds to inf
  const float denorm_magic =
      std::bit_cast<float>(((127u - 15u) + (23u - 10u) + 1u) << 23);
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t o;
  if (x >= kF16Max) {
    o = x > kF32Infinity ? 0x7e00 : 0x7c00;
  } else if (x < (113u << 23)) {  // subnormal or zero
    float fx = std::bit_cast<float>(x) + denorm_magic;
    o = static_cast<uint16_t>(std::bit_cast<uint32_t>(fx) -
                              std::bit_cast<uint32_t>(denorm_magic));
  } else {
    uint32_t mant_odd = (x >> 13) & 1;
    x += 0xC8000FFFu;  // rebias exponent (15 - 127) and round
    x += mant_odd;
    o = static_cast<uint16_t>(x >> 13);
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

namespace {

// A 64-byte aligned buffer owned by `weights.storage`.
void* NewBuffer(int64_t bytes, ModelWeights& weights) {
  size_t n = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  std::shared_ptr<void> buf(std::aligned_alloc(64, n), std::free);
  KVSERVE_CHECK(buf != nullptr);
  void* p = buf.get();
  weights.storage.push_back(std::move(buf));
  return p;
}

constexpr quant::Type kSupported[] = {
    quant::Type::kF32,  quant::Type::kF16,   quant::Type::kBF16,
    quant::Type::kQ4_0, quant::Type::kQ4_1,  quant::Type::kQ5_0,
    quant::Type::kQ5_1, quant::Type::kQ8_0,  quant::Type::kQ2_K,
    quant::Type::kQ3_K, quant::Type::kQ4_K,  quant::Type::kQ5_K,
    quant::Type::kQ6_K, quant::Type::kIQ4_NL};

bool Supported(uint32_t type) {
  for (quant::Type t : kSupported) {
    if (static_cast<uint32_t>(t) == type) return quant::Info(t) != nullptr;
  }
  return false;
}

// The IEEE half scales in a block of each block type: their byte offsets in
// the block and their names, as ggml-common.h lays the blocks out (see
// core/quant/quant_legacy.h and quant_kquants.h). Every other byte of a
// block is an integer quant or scale, always finite, so these halves being
// finite is what makes every dequantized value finite.
struct BlockScales {
  quant::Type type;
  int count;
  int offset[2];
  const char* name[2];
};
constexpr BlockScales kBlockScales[] = {
    {quant::Type::kQ4_0, 1, {0}, {"d"}},
    {quant::Type::kQ4_1, 2, {0, 2}, {"d", "m"}},
    {quant::Type::kQ5_0, 1, {0}, {"d"}},
    {quant::Type::kQ5_1, 2, {0, 2}, {"d", "m"}},
    {quant::Type::kQ8_0, 1, {0}, {"d"}},
    {quant::Type::kIQ4_NL, 1, {0}, {"d"}},
    {quant::Type::kQ2_K, 2, {80, 82}, {"d", "dmin"}},
    {quant::Type::kQ3_K, 1, {108}, {"d"}},
    {quant::Type::kQ4_K, 2, {0, 2}, {"d", "dmin"}},
    {quant::Type::kQ5_K, 2, {0, 2}, {"d", "dmin"}},
    {quant::Type::kQ6_K, 1, {208}, {"d"}},
};

const BlockScales* FindBlockScales(uint32_t type) {
  for (const BlockScales& s : kBlockScales) {
    if (static_cast<uint32_t>(s.type) == type) return &s;
  }
  return nullptr;
}

// The first i in [0, n) for which non_finite(i) holds, or n. Chunks are
// scanned with a branch-free OR (which vectorizes for contiguous values) and
// in parallel for large n; only a chunk with a hit is searched again.
template <typename NonFinite>
int64_t FindFirst(int64_t n, NonFinite non_finite) {
  constexpr int64_t kChunk = int64_t{1} << 16;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  int64_t first = n;
#pragma omp parallel for schedule(static) reduction(min : first) if (chunks > 8)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    uint32_t any = 0;
    for (int64_t i = begin; i < end; ++i) any |= non_finite(i);
    if (any == 0) continue;
    int64_t i = begin;
    while (!non_finite(i)) ++i;
    first = std::min(first, i);
  }
  return first;
}

// The first of n values of `Bits` at p whose exponent bits `exp_mask` are
// all ones: inf or NaN.
template <typename Bits>
int64_t FirstNonFinite(const uint8_t* p, int64_t n, Bits exp_mask) {
  return FindFirst(n, [=](int64_t i) {
    Bits v;
    std::memcpy(&v, p + i * sizeof(Bits), sizeof(Bits));
    return static_cast<uint32_t>((v & exp_mask) == exp_mask);
  });
}

constexpr uint16_t kHalfExponent = 0x7c00;

bool HalfIsFinite(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof(h));
  return (h & kHalfExponent) != kHalfExponent;
}

const char* NonFiniteName(float v) {
  return std::isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf");
}

// OK, or INVALID_ARGUMENT naming the first element (F32, F16, BF16) or
// block scale (block types) of `src` that is not finite. REQUIRES: the
// bytes hold src.rows x src.cols elements of src.type.
absl::Status CheckFinite(const StoredTensor& src, const quant::TypeInfo& in) {
  const int64_t n = src.rows * src.cols;
  const std::string type = GgmlTypeName(src.type);
  auto element_error = [&](int64_t i, float v) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s': %s element %d (row %d, column %d) at byte %d of its "
        "data is %s; weights must be finite",
        src.name, type, i, i / src.cols, i % src.cols, i * in.block_bytes,
        NonFiniteName(v)));
  };
  switch (static_cast<quant::Type>(src.type)) {
    case quant::Type::kF32: {
      const int64_t i = FirstNonFinite<uint32_t>(src.data, n, 0x7f800000u);
      if (i == n) return absl::OkStatus();
      float v;
      std::memcpy(&v, src.data + 4 * i, 4);
      return element_error(i, v);
    }
    case quant::Type::kF16:
    case quant::Type::kBF16: {
      const bool f16 = src.type == static_cast<uint32_t>(quant::Type::kF16);
      const int64_t i = FirstNonFinite<uint16_t>(
          src.data, n, f16 ? kHalfExponent : uint16_t{0x7f80});
      if (i == n) return absl::OkStatus();
      uint16_t h;
      std::memcpy(&h, src.data + 2 * i, 2);
      return element_error(i, f16 ? HalfToFloat(h) : Bf16ToFloat(h));
    }
    default:
      break;
  }
  const BlockScales* scales = FindBlockScales(src.type);
  KVSERVE_CHECK(scales != nullptr);  // every supported block type is listed
  // One pass over the blocks, reading each block's scales together.
  const int64_t blocks = n / in.block_elems;
  const int64_t b = FindFirst(blocks, [&](int64_t i) {
    const uint8_t* block = src.data + i * in.block_bytes;
    uint32_t bad = 0;
    for (int k = 0; k < scales->count; ++k) {
      bad |= !HalfIsFinite(block + scales->offset[k]);
    }
    return bad;
  });
  if (b == blocks) return absl::OkStatus();
  const uint8_t* block = src.data + b * in.block_bytes;
  int k = 0;
  while (HalfIsFinite(block + scales->offset[k])) ++k;
  uint16_t h;
  std::memcpy(&h, block + scales->offset[k], 2);
  const int64_t blocks_per_row = src.cols / in.block_elems;
  const int64_t col = b % blocks_per_row * in.block_elems;
  return absl::InvalidArgumentError(absl::StrFormat(
      "tensor '%s': %s block %d (row %d, columns %d..%d) at byte %d of its "
      "data: scale %s is %s; weights must be finite",
      src.name, type, b, b / blocks_per_row, col, col + in.block_elems - 1,
      b * in.block_bytes, scales->name[k], NonFiniteName(HalfToFloat(h))));
}

}  // namespace

std::string SupportedTypeNames() {
  std::string out;
  for (quant::Type t : kSupported) {
    if (!out.empty()) out += ", ";
    out += GgmlTypeName(static_cast<uint32_t>(t));
  }
  return out;
}

absl::StatusOr<WeightTensor> MaterializeTensor(const StoredTensor& src,
                                               quant::Type type,
                                               ModelWeights& weights) {
  if (!Supported(src.type)) {
    return absl::UnimplementedError(absl::StrFormat(
        "tensor '%s' has type %s, which is not supported (supported: %s)",
        src.name, GgmlTypeName(src.type), SupportedTypeNames()));
  }
  const quant::TypeInfo& in = *quant::Info(src.type);
  if (src.cols % in.block_elems != 0 ||
      static_cast<uint64_t>(src.rows * (src.cols / in.block_elems) *
                            in.block_bytes) != src.n_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s': %d bytes of %s do not hold %d rows of %d elements "
        "(rows of %s are whole blocks of %d)",
        src.name, src.n_bytes, GgmlTypeName(src.type), src.rows, src.cols,
        GgmlTypeName(src.type), in.block_elems));
  }
  if (absl::Status s = CheckFinite(src, in); !s.ok()) return s;
  WeightTensor t;
  t.type = type;
  t.rows = src.rows;
  t.cols = src.cols;
  const bool f32_aligned = reinterpret_cast<uintptr_t>(src.data) % 4 == 0;
  if (static_cast<uint32_t>(type) == src.type &&
      (type != quant::Type::kF32 || f32_aligned)) {
    t.data = src.data;  // zero-copy: the mapping is in weights.storage
    return t;
  }
  // Converted (only f32 and bf16 are asked for): row by row through f32.
  KVSERVE_CHECK(type == quant::Type::kF32 || type == quant::Type::kBF16);
  uint8_t* dst = static_cast<uint8_t*>(NewBuffer(t.bytes(), weights));
  const int64_t in_row = src.n_bytes / std::max<int64_t>(1, src.rows);
  const int64_t out_row = t.row_bytes();
#pragma omp parallel if (t.rows * t.cols > (1 << 20))
  {
    std::vector<float> row(t.cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < t.rows; ++r) {
      in.dequantize(src.data + r * in_row, row.data(), t.cols);
      if (type == quant::Type::kF32) {
        std::memcpy(dst + r * out_row, row.data(), out_row);
      } else {
        ConvertFloatToBf16(row.data(), t.cols,
                           reinterpret_cast<uint16_t*>(dst + r * out_row));
      }
    }
  }
  t.data = dst;
  return t;
}

}  // namespace kvserve
