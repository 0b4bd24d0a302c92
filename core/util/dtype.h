// DType: the element type of a dense f32/bf16 buffer (the KV cache, weights
// converted at load, oneDNN operands), and the two block-quantized types a
// KV cache may also hold (kQ8_0, kQ4_0: never weights or oneDNN operands;
// quantized weight formats are quant::Type, core/quant/quant.h).
//
// A KV row of n elements of a block type is n / 32 blocks laid out as
// ggml's q8_0 ({f16 d; int8 q[32]}, 34 bytes, x = d·q) or q4_0 ({f16 d;
// u8 qs[16]}, 18 bytes, x = d·(q − 8), element j the low nibble of qs[j],
// j + 16 the high one): llama.cpp's q8_0 / q4_0 KV cache blocks.
#ifndef KVSERVE_CORE_UTIL_DTYPE_H_
#define KVSERVE_CORE_UTIL_DTYPE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace kvserve {

enum class DType { kF32, kBF16, kQ8_0, kQ4_0 };

// Elements per block of a block-quantized type.
inline constexpr int kDTypeBlockElems = 32;

constexpr bool IsBlockQuantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0;
}

// Bytes per element of a dense type (f32 4, bf16 2). Block types have no
// element size: use DTypeRowBytes.
inline int64_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

// A block type's bytes of codes per block of 32 elements (q8_0's 32
// int8, q4_0's 16 bytes of nibbles); its f16 scale adds 2.
constexpr int64_t DTypeBlockCodeBytes(DType t) {
  return t == DType::kQ8_0 ? 32 : 16;
}

// Bytes of a row of n elements. REQUIRES for a block type: n % 32 == 0.
inline int64_t DTypeRowBytes(DType t, int64_t n) {
  switch (t) {
    case DType::kF32:
      return 4 * n;
    case DType::kBF16:
      return 2 * n;
    case DType::kQ8_0:
    case DType::kQ4_0:
      return n / kDTypeBlockElems * (DTypeBlockCodeBytes(t) + 2);
  }
  return 0;
}

inline std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
  }
  return "?";
}

// Whether a KV cache of `t` can hold rows of head_dim elements: a block
// type needs whole blocks (INVALID_ARGUMENT naming both otherwise).
inline absl::Status CheckKvRows(DType t, int64_t head_dim) {
  if (IsBlockQuantized(t) && head_dim % kDTypeBlockElems != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a %s KV cache keeps blocks of %d elements of a head, and this "
        "model's head_dim %d is not a multiple of %d: use --kv_dtype=bf16 or "
        "f32",
        DTypeName(t), kDTypeBlockElems, head_dim, kDTypeBlockElems));
  }
  return absl::OkStatus();
}

// Accepts the dense types, "f32" and "bf16".
inline absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown dtype \"%s\" (expected f32 or bf16)", name));
}

// Accepts every type a KV cache can hold: f32, bf16, q8_0 and q4_0.
inline absl::StatusOr<DType> ParseKvDType(std::string_view name) {
  if (name == "q8_0") return DType::kQ8_0;
  if (name == "q4_0") return DType::kQ4_0;
  if (name == "f32" || name == "bf16") return ParseDType(name);
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown KV dtype \"%s\" (expected f32, bf16, q8_0 or q4_0)", name));
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_DTYPE_H_
