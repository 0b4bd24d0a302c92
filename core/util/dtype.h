// DType: the element type of a dense f32/bf16 buffer (the KV cache, weights
// converted at load, oneDNN operands). Quantized block formats are
// quant::Type (core/quant/quant.h).
#ifndef KVSERVE_CORE_UTIL_DTYPE_H_
#define KVSERVE_CORE_UTIL_DTYPE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace kvserve {

enum class DType { kF32, kBF16 };

inline int64_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

inline std::string_view DTypeName(DType t) {
  return t == DType::kF32 ? "f32" : "bf16";
}

// Accepts "f32" and "bf16".
inline absl::StatusOr<DType> ParseDType(std::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown dtype \"%s\" (expected f32 or bf16)", name));
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_DTYPE_H_
