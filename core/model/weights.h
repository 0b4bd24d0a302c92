// A model's weights as the forward pass reads them. Matrices are row-major
// [rows][cols] with y = W x (rows = output features, cols = input features),
// the layout of both GGUF and llama2.c files. Vectors (norm weights) are f32.
#ifndef KVSERVE_CORE_MODEL_WEIGHTS_H_
#define KVSERVE_CORE_MODEL_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.h"

namespace kvserve {

// A view of one tensor; the bytes are owned by ModelWeights::storage.
struct WeightTensor {
  DType dtype = DType::kF32;
  int64_t rows = 0;  // 1 for a vector
  int64_t cols = 0;
  const void* data = nullptr;

  int64_t bytes() const { return rows * cols * DTypeSize(dtype); }
  const float* f32() const { return static_cast<const float*>(data); }
};

struct LayerWeights {
  WeightTensor attn_norm;  // [dim] f32
  WeightTensor wq;         // [n_heads * head_dim][dim]
  WeightTensor wk;         // [n_kv_heads * head_dim][dim]
  WeightTensor wv;         // [n_kv_heads * head_dim][dim]
  WeightTensor wo;         // [dim][n_heads * head_dim]
  WeightTensor ffn_norm;   // [dim] f32
  WeightTensor w_gate;     // [hidden_dim][dim]   (llama2.c w1)
  WeightTensor w_down;     // [dim][hidden_dim]   (llama2.c w2)
  WeightTensor w_up;       // [hidden_dim][dim]   (llama2.c w3)
};

struct ModelWeights {
  ModelConfig config;
  std::string name;
  WeightTensor token_embd;  // [vocab_size][dim]
  std::vector<LayerWeights> layers;
  WeightTensor output_norm;  // [dim] f32
  WeightTensor output;       // [vocab_size][dim]; == token_embd when tied
  // Llama 3.1+ per-frequency divisors, [rotary_dim / 2]; empty when absent.
  std::vector<float> rope_freq_factors;
  // Hex digest of the weights' bytes as loaded from the file.
  std::string fingerprint;
  // What the loader wants an operator to know (e.g. weights widened to f32
  // because this CPU has no bf16 matmuls, and the memory that costs).
  std::vector<std::string> warnings;
  // Bytes held beyond what bf16 would take, for matrices held as f32 only
  // because bf16 cannot be computed here.
  int64_t f32_instead_of_bf16_bytes = 0;
  // Keeps the bytes behind every WeightTensor alive (buffers, mappings).
  std::vector<std::shared_ptr<const void>> storage;

  // Sum of the bytes of all distinct weight tensors.
  int64_t TotalBytes() const;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_WEIGHTS_H_
