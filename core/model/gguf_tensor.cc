#include "core/model/gguf_tensor.h"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "core/dnnl/context.h"
#include "core/util/bf16.h"
#include "core/util/check.h"
#include "core/util/cpu_features.h"

namespace kvserve {

absl::StatusOr<WeightDTypeMode> ParseWeightDTypeMode(std::string_view name) {
  if (name == "auto") return WeightDTypeMode::kAuto;
  if (name == "f32") return WeightDTypeMode::kF32;
  if (name == "bf16") return WeightDTypeMode::kBF16;
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown weight dtype \"%s\" (expected auto, f32 or bf16)", name));
}

DType ComputeDType(uint32_t stored_type, bool is_vector, WeightDTypeMode mode,
                   bool bf16_compute) {
  if (is_vector || !bf16_compute) return DType::kF32;
  switch (mode) {
    case WeightDTypeMode::kF32:
      return DType::kF32;
    case WeightDTypeMode::kBF16:
      return DType::kBF16;
    case WeightDTypeMode::kAuto:
      break;
  }
  const GgmlType t = static_cast<GgmlType>(stored_type);
  return t == GgmlType::kBF16 || t == GgmlType::kQ8_0 ? DType::kBF16
                                                      : DType::kF32;
}

DType ChooseDType(uint32_t stored_type, int64_t rows, int64_t cols,
                  WeightDTypeMode mode, ModelWeights& weights) {
  const bool is_vector = rows == 1;
  const DType d =
      ComputeDType(stored_type, is_vector, mode, DnnlHasBf16Matmul());
  if (d == DType::kF32 &&
      ComputeDType(stored_type, is_vector, mode, true) == DType::kBF16) {
    weights.f32_instead_of_bf16_bytes += rows * cols * 2;
  }
  return d;
}

std::string WidenedWeightsWarning(const ModelWeights& weights) {
  if (weights.f32_instead_of_bf16_bytes == 0) return "";
  return absl::StrFormat(
      "weights that would be bf16 are held as f32: oneDNN has no bf16 matmul "
      "at ISA %s (CPU level %s); this costs %.1f MiB more memory and weight "
      "reads",
      DnnlIsaName(), IsaLevelName(EffectiveIsa()),
      weights.f32_instead_of_bf16_bytes / 1048576.0);
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

// Element i of the stored tensor as float. REQUIRES: a supported type.
template <uint32_t kType>
inline float Load(const uint8_t* data, int64_t i) {
  if constexpr (kType == 0) {  // F32
    float v;
    std::memcpy(&v, data + 4 * i, 4);
    return v;
  } else if constexpr (kType == 1) {  // F16
    uint16_t h;
    std::memcpy(&h, data + 2 * i, 2);
    return HalfToFloat(h);
  } else if constexpr (kType == 30) {  // BF16
    uint16_t h;
    std::memcpy(&h, data + 2 * i, 2);
    return Bf16ToFloat(h);
  } else {  // Q8_0: blocks of {f16 d; int8 q[32]}
    const uint8_t* block = data + (i / 32) * 34;
    uint16_t d;
    std::memcpy(&d, block, 2);
    return HalfToFloat(d) *
           static_cast<float>(static_cast<int8_t>(block[2 + i % 32]));
  }
}

template <uint32_t kType>
void Convert(const uint8_t* src, int64_t n, DType dtype, void* dst) {
  if (dtype == DType::kF32) {
    float* out = static_cast<float*>(dst);
#pragma omp parallel for schedule(static) if (n > (1 << 20))
    for (int64_t i = 0; i < n; ++i) out[i] = Load<kType>(src, i);
  } else {
    uint16_t* out = static_cast<uint16_t*>(dst);
#pragma omp parallel for schedule(static) if (n > (1 << 20))
    for (int64_t i = 0; i < n; ++i) out[i] = FloatToBf16(Load<kType>(src, i));
  }
}

}  // namespace

absl::StatusOr<WeightTensor> MaterializeTensor(const StoredTensor& src,
                                               DType dtype,
                                               ModelWeights& weights) {
  WeightTensor t;
  t.dtype = dtype;
  t.rows = src.rows;
  t.cols = src.cols;
  const int64_t n = src.rows * src.cols;
  const auto type = static_cast<GgmlType>(src.type);
  int64_t block_elems = 0, block_bytes = 0;
  bool known = GgmlTypeLayout(src.type, &block_elems, &block_bytes);
  if (!known || (type != GgmlType::kF32 && type != GgmlType::kF16 &&
                 type != GgmlType::kBF16 && type != GgmlType::kQ8_0)) {
    return absl::UnimplementedError(absl::StrFormat(
        "tensor '%s' has type %s, which is not supported (supported: F32, "
        "F16, BF16, Q8_0)",
        src.name, GgmlTypeName(src.type)));
  }
  if (n % block_elems != 0 ||
      static_cast<uint64_t>(n / block_elems * block_bytes) != src.n_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tensor '%s': %d bytes of %s do not hold %d x %d elements", src.name,
        src.n_bytes, GgmlTypeName(src.type), src.rows, src.cols));
  }
  const bool same = (type == GgmlType::kF32 && dtype == DType::kF32) ||
                    (type == GgmlType::kBF16 && dtype == DType::kBF16);
  const uintptr_t align = dtype == DType::kF32 ? alignof(float) : 2;
  if (same && reinterpret_cast<uintptr_t>(src.data) % align == 0) {
    t.data = src.data;  // zero-copy: the mapping is in weights.storage
    return t;
  }
  void* dst = NewBuffer(n * DTypeSize(dtype), weights);
  switch (type) {
    case GgmlType::kF32:
      Convert<0>(src.data, n, dtype, dst);
      break;
    case GgmlType::kF16:
      Convert<1>(src.data, n, dtype, dst);
      break;
    case GgmlType::kBF16:
      Convert<30>(src.data, n, dtype, dst);
      break;
    default:
      Convert<8>(src.data, n, dtype, dst);
      break;
  }
  t.data = dst;
  return t;
}

}  // namespace kvserve
