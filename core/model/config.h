// The architecture of a Llama-family decoder.
#ifndef KVSERVE_CORE_MODEL_CONFIG_H_
#define KVSERVE_CORE_MODEL_CONFIG_H_

#include <cstdint>

#include "absl/status/status.h"
#include "core/util/dtype.h"

namespace kvserve {

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

  int kv_mul() const { return n_heads / n_kv_heads; }
  int q_dim() const { return n_heads * head_dim; }
  int kv_dim() const { return n_kv_heads * head_dim; }
  int rotary_dim() const { return rope_dim > 0 ? rope_dim : head_dim; }
  // Bytes of K and V of one token over all layers.
  int64_t KvBytesPerToken(DType kv_dtype) const {
    return 2LL * n_layers * n_kv_heads * head_dim * DTypeSize(kv_dtype);
  }

  // OK when every field is positive and the head arithmetic is consistent.
  absl::Status Validate() const;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_CONFIG_H_
