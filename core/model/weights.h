// A model's weights as the forward pass reads them: one WeightTensor
// (core/quant/weight_tensor.h, row-major [rows][cols] with y = W x) per
// matrix, as the file stores it. Vectors (norm weights) are f32.
#ifndef KVSERVE_CORE_MODEL_WEIGHTS_H_
#define KVSERVE_CORE_MODEL_WEIGHTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/quant/weight_tensor.h"

namespace kvserve {

struct LayerWeights {
  WeightTensor attn_norm;  // [dim] f32
  WeightTensor wq;         // [n_heads * head_dim][dim]
  WeightTensor wk;         // [n_kv_heads * head_dim][dim]
  WeightTensor wv;         // [n_kv_heads * head_dim][dim]
  // Added to q, k, v after the projection, before RoPE (qwen2); f32, rows 1,
  // data nullptr when the file has none.
  WeightTensor bq;        // [n_heads * head_dim]
  WeightTensor bk;        // [n_kv_heads * head_dim]
  WeightTensor bv;        // [n_kv_heads * head_dim]
  WeightTensor wo;        // [dim][n_heads * head_dim]
  WeightTensor ffn_norm;  // [dim] f32
  WeightTensor w_gate;    // [hidden_dim][dim]   (llama2.c w1)
  WeightTensor w_down;    // [dim][hidden_dim]   (llama2.c w2)
  WeightTensor w_up;      // [hidden_dim][dim]   (llama2.c w3)
  // The file's fused matrices when it stores them so (phi3's attn_qkv: rows
  // q, k, v; its ffn_up: rows gate, then up); wq, wk, wv (w_gate, w_up) are
  // then views of their row ranges. data nullptr otherwise.
  WeightTensor wqkv;       // [(n_heads + 2 * n_kv_heads) * head_dim][dim]
  WeightTensor w_gate_up;  // [2 * hidden_dim][dim]
};

struct ModelWeights {
  ModelConfig config;
  std::string name;
  // The family, as GGUF's general.architecture names it: "llama", "qwen2"
  // or "phi3" (llama2.c checkpoints are "llama").
  std::string architecture = "llama";
  WeightTensor token_embd;  // [vocab_size][dim]
  std::vector<LayerWeights> layers;
  WeightTensor output_norm;  // [dim] f32
  WeightTensor output;       // [vocab_size][dim]; == token_embd when tied
  // Llama 3.1+ per-frequency divisors, [rotary_dim / 2]; empty when absent.
  std::vector<float> rope_freq_factors;
  // Hex digest of the weights' bytes as loaded from the file.
  std::string fingerprint;
  // Keeps the bytes behind every WeightTensor alive (buffers, mappings).
  std::vector<std::shared_ptr<const void>> storage;

  // Sum of the bytes of all distinct weight tensors.
  int64_t TotalBytes() const;
  // "q4_K x 145, q6_K x 25, f32 x 65": the types of all distinct tensors.
  std::string TypeSummary() const;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_WEIGHTS_H_
