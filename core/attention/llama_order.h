// Attention over an f32 KV cache in the float order of llama.cpp's CPU
// backend (c392e50, flash attention off, f32 K and V: what the goldens in
// ../shared were made with), so that a model served with an f32 cache
// computes llama.cpp's attention to the bit. A 1-ulp difference here
// flips activation roundings of the quantized matrices later, which the
// goldens' synthetic models turn into 0.1-0.3 of logit within a few steps.
//
// Per query head, over the attended positions p of its KV group:
//   s_p   = DotF32(K_p, q) · scale         (ggml_vec_dot_f32, then the
//                                          softmax's scale; f32 products)
//   e_p   = LlamaExpf(s_p − max_p s_p)     (ggml_v_expf)
//   Z     = Σ over chunks of 8 positions (8c .. 8c + 7, absolute) of the
//           chunk's hsum_float_8, summed in double
//   w_p   = e_p · (float)(1 / Z)
//   out_d = Σ_p w_p · V_p[d], positions in 8 lanes by p % 8, fma'd in
//           position order, then hsum_float_8 (llamafile's tinyBLAS: a
//           prompt's queries), or in 4 × 8 lanes by p % 32 reduced as
//           ggml_vec_dot_f32 does (one query: decode).
// Positions outside the causal (and sliding-window) mask are ggml's -inf
// scores, whose weights are exactly 0: they are skipped.
//
// Internal to core/attention. Thread-safety: pure functions.
#ifndef KVSERVE_CORE_ATTENTION_LLAMA_ORDER_H_
#define KVSERVE_CORE_ATTENTION_LLAMA_ORDER_H_

#include <cstdint>
#include <vector>

#include "core/kv/block_pool.h"

namespace kvserve::attention_internal {

struct LlamaOrderArgs {
  const BlockPool* pool = nullptr;
  int layer = 0;
  const int32_t* blocks = nullptr;  // the sequence's block table
  int group = 0;                    // KV head
  int kv_mul = 0;                   // query heads of the group
  int64_t start = 0;                // first attended position
  int64_t n_ctx = 0;                // attends [start, n_ctx)
  bool prompt = false;              // tinyBLAS's value order (else vec_dot's)
};

// q, out: [kv_mul][head_dim]. scratch is resized as needed.
void LlamaOrderRows(const LlamaOrderArgs& a, const float* q, float* out,
                    std::vector<float>* scratch);

}  // namespace kvserve::attention_internal

#endif  // KVSERVE_CORE_ATTENTION_LLAMA_ORDER_H_
