// The oneDNN matmul paths of GqaAttention (v2 API primitives, created once
// and reused; user-managed scratchpads so OpenMP threads can execute them
// concurrently, each on its own stream).
//
// Prefill: per KV group, the context's K and V are gathered into f32
// matrices; per query head and tile of query rows, S = Q·Kᵀ and O = P·V are
// two matmuls with runtime M and N, with a causal softmax between them
// (over the tile's columns from its first row's window start, if any).
//
// Decode: per run of blocks, maximal stretches of consecutive block ids are
// one batched matmul each (batch = blocks, strided through the pool), as
// oneDNN 2.6 costs ~1 µs per call. A bf16 cache means bf16 queries and
// probabilities (oneDNN 2.6 has bf16×bf16→f32 but not f32×bf16).
//
// Internal to core/attention.
#ifndef KVSERVE_CORE_ATTENTION_ONEDNN_ATTENTION_H_
#define KVSERVE_CORE_ATTENTION_ONEDNN_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "core/attention/decode_kernel.h"
#include "core/attention/gqa_attention.h"
#include "core/kv/block_pool.h"
#include "dnnl.hpp"

namespace kvserve::attention_internal {

class OneDnnAttention {
 public:
  // sliding_window: as GqaAttentionOptions (0 = none).
  OneDnnAttention(const BlockPool* pool, int n_heads, int sliding_window);

  // As GqaAttention::GqaPrefill. Parallelises with OpenMP.
  void Prefill(int layer, const SeqKv& seq, int64_t start_pos, int64_t n_new,
               const float* q, float* out);

  // A DecodeKernel: the state of one run. Safe to call from several
  // OpenMP threads at once.
  void DecodeRun(const DecodeArgs& args, PartialState st);

 private:
  struct DecodePrims {
    dnnl::matmul qk;
    dnnl::memory::desc q_md, k_md, s_md;
    dnnl::matmul pv;
    dnnl::memory::desc p_md, v_md, o_md;
    int64_t scratchpad_bytes = 0;
  };
  // Primitives for a stretch of `blocks` consecutive blocks.
  const DecodePrims& Decode(int blocks);

  // Constant after construction.
  const BlockPool* pool_;
  int n_heads_;
  int sliding_window_;
  int n_kv_heads_;
  int head_dim_;
  int kv_mul_;
  int block_tokens_;
  DType dtype_;
  int max_stretch_blocks_;  // longest stretch per batched matmul
  RowOps row_ops_;
  // Prefill primitives: runtime M and N.
  dnnl::matmul prefill_qk_;
  dnnl::matmul prefill_pv_;
  int64_t prefill_scratchpad_bytes_ = 0;

  absl::Mutex mu_;
  absl::flat_hash_map<int, std::unique_ptr<DecodePrims>> decode_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace kvserve::attention_internal

#endif  // KVSERVE_CORE_ATTENTION_ONEDNN_ATTENTION_H_
