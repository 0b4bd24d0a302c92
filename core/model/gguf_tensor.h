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

// --weight_dtype: how matrices are held for compute. kAuto keeps F32 and F16
// as f32 (F16 is never rounded to bf16: it would lose three mantissa bits)
// and holds BF16 and Q8_0 as bf16 where bf16 matmuls exist. kBF16 asks for
// bf16 everywhere it can be computed. Vectors (norms) are always f32.
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

// The compute dtype for a stored matrix or vector under `mode`, where
// `bf16_compute` says whether bf16 matmuls exist on this CPU
// (DnnlHasBf16Matmul()); without them bf16 becomes f32.
DType ComputeDType(uint32_t stored_type, bool is_vector, WeightDTypeMode mode,
                   bool bf16_compute);

// ComputeDType on this CPU; a matrix held as f32 only because bf16 cannot
// be computed here adds its extra bytes to
// weights.f32_instead_of_bf16_bytes.
DType ChooseDType(uint32_t stored_type, int64_t rows, int64_t cols,
                  WeightDTypeMode mode, ModelWeights& weights);
// A warning naming that cost, or "" when there is none.
std::string WidenedWeightsWarning(const ModelWeights& weights);

// Returns the WeightTensor in `dtype`, pointing into `src.data` when no
// conversion is needed, else into a new buffer appended to weights.storage.
// Errors name the tensor and its type when the type is not supported
// (supported: F32, F16, BF16, Q8_0).
absl::StatusOr<WeightTensor> MaterializeTensor(const StoredTensor& src,
                                               DType dtype,
                                               ModelWeights& weights);

// IEEE half -> float, exact (subnormals, inf and NaN included).
float HalfToFloat(uint16_t h);
// float -> IEEE half, round to nearest even (for the model maker).
uint16_t FloatToHalf(float f);

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_GGUF_TENSOR_H_
