// The architecture of a Llama-family decoder. Families (GGUF
// general.architecture llama, qwen2, phi3) differ only in data: these
// fields, and which optional tensors the weights carry (weights.h).
#ifndef KVSERVE_CORE_MODEL_CONFIG_H_
#define KVSERVE_CORE_MODEL_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/util/dtype.h"

namespace kvserve {

// Which dimensions of a head RoPE rotates together (llama.cpp's rope type per
// architecture): kAdjacentPairs (llama.cpp "normal", llama2.c) rotates
// (2i, 2i+1); kSplitHalves (llama.cpp "NEOX": qwen2, phi3) rotates
// (i, i + rotary_dim/2). Both use frequency theta^(-2i / rotary_dim).
enum class RopeStyle { kAdjacentPairs, kSplitHalves };

struct ModelConfig {
  int n_layers = 0;
  int dim = 0;         // residual stream width
  int hidden_dim = 0;  // SwiGLU inner width
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // key/value heads (groups); n_heads % n_kv_heads == 0
  int head_dim = 0;    // dim / n_heads for every supported model
  int vocab_size = 0;
  int context_length = 0;  // longest sequence the model was trained for
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int rope_dim = 0;  // leading dims of each head that RoPE rotates; 0 = all
  RopeStyle rope_style = RopeStyle::kAdjacentPairs;
  // A query at position i attends to positions j with
  // i - sliding_window < j <= i (llama.cpp's LLAMA_SWA_TYPE_STANDARD, in
  // every layer); 0 = no window (all of 0..i).
  int sliding_window = 0;

  int kv_mul() const { return n_heads / n_kv_heads; }
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  int rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }
  // Bytes of K and V of one token over all layers.
  int64_t KvBytesPerToken(DType kv_dtype) const {
    return 2LL * n_layers * n_kv_heads * DTypeRowBytes(kv_dtype, head_dim);
  }

  // OK when every field is positive and the head arithmetic is consistent.
  absl::Status Validate() const;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_CONFIG_H_
