// Turning a tensor as stored in a model file (a ggml type and its bytes) into
// the WeightTensor the forward pass reads: zero-copy where the stored type is
// the compute dtype (and the bytes are aligned for it), otherwise converted
// once into a buffer that ModelWeights::storage owns.
#ifndef KVSERVE_CORE_MODEL_GGUF_TENSOR_H_
#define KVSERVE_CORE_MODEL_GGUF_TENSOR_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/model/gguf.h"
#include "core/model/weights.h"

namespace kvserve {

// --weight_dtype: how matrices are held. kAuto keeps every matrix exactly
// as the file stores it (F32, F16, BF16 and every block type, computed in
// its own format: F16 is never rounded to bf16); kF32 and kBF16 convert
// every matrix once at load. Vectors (norms) are always f32.
enum class WeightDTypeMode { kAuto, kF32, kBF16 };
// Accepts "auto", "f32", "bf16".
absl::StatusOr<WeightDTypeMode> ParseWeightDTypeMode(std::string_view name);

// A tensor's stored form. `data` holds n_bytes = rows * cols elements of
// `type` (a GgmlType value); rows = 1 for a vector.
struct StoredTensor {
  std::string name;  // for errors
  uint32_t type = 0;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  uint64_t n_bytes = 0;
};

// The type a stored matrix or vector is held in under `mode`.
quant::Type HeldType(uint32_t stored_type, bool is_vector,
                     WeightDTypeMode mode);

// Returns the WeightTensor in `type`, pointing into `src.data` when it is
// the stored type (zero-copy), else dequantized once into a new buffer
// appended to weights.storage. UNIMPLEMENTED naming the tensor and its type
// when the stored type is not supported; INVALID_ARGUMENT when the bytes do
// not hold rows x cols elements of it (or cols is not a whole number of
// blocks), or when a value is not finite: an F32, F16 or BF16 element, or a
// block type's half scale (d, m, dmin: the only bytes of a block that can
// be), named by element or block index, row and column. The check is one
// memory-bound pass (one core, resident bytes: 28 GB/s for F32 and F16,
// 30 GB/s for Q8_0, 18 GB/s for Q4_K).
absl::StatusOr<WeightTensor> MaterializeTensor(const StoredTensor& src,
                                               quant::Type type,
                                               ModelWeights& weights);

// The supported stored types, for messages: "F32, F16, BF16, Q4_0, ...".
std::string SupportedTypeNames();

// IEEE half -> float, exact (subnormals, inf and NaN included).
float HalfToFloat(uint16_t h);
// float -> IEEE half, round to nearest even (for the model maker).
uint16_t FloatToHalf(float f);

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_GGUF_TENSOR_H_
