// WeightTensor: a view of one weight matrix or vector as a file stores it.
// Matrices are row-major [rows][cols] with y = W x (rows = output features,
// cols = input features), the layout of both GGUF and llama2.c files.
//
// Thread-safety: a plain value; the bytes it points to are immutable and
// owned elsewhere (ModelWeights::storage).
#ifndef KVSERVE_CORE_QUANT_WEIGHT_TENSOR_H_
#define KVSERVE_CORE_QUANT_WEIGHT_TENSOR_H_

#include <cstdint>

#include "core/quant/quant.h"

namespace kvserve {

// `type` is the layout of the bytes: F32, BF16, or any GGUF block type
// (F16, Q8_0, Q4_K, ...) kept exactly as the file stores it; a row is
// quant::RowBytes(type, cols) bytes.
struct WeightTensor {
  quant::Type type = quant::Type::kF32;
  int64_t rows = 0;  // 1 for a vector
  int64_t cols = 0;
  const void* data = nullptr;

  int64_t row_bytes() const { return quant::RowBytes(type, cols); }
  int64_t bytes() const { return rows * row_bytes(); }
  const float* f32() const { return static_cast<const float*>(data); }
  const uint8_t* row(int64_t i) const {
    return static_cast<const uint8_t*>(data) + i * row_bytes();
  }
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_QUANT_WEIGHT_TENSOR_H_
