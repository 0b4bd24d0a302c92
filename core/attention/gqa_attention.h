// Grouped-query attention over a paged KV cache (BlockPool + block tables).
//
// Query head j reads KV group g(j) = j / kv_mul, kv_mul = n_heads /
// n_kv_heads; one pass over a group's K/V serves all kv_mul heads of the
// group. Scores are scaled by 1/sqrt(head_dim).
//
// With a sliding window W, the query at position i attends to positions j
// with i - W < j <= i (llama.cpp's standard SWA mask); blocks wholly before
// the window are not read.
//
// Thread-safety: an instance is used by one thread at a time (the engine
// thread); it parallelises internally with OpenMP.
#ifndef KVSERVE_CORE_ATTENTION_GQA_ATTENTION_H_
#define KVSERVE_CORE_ATTENTION_GQA_ATTENTION_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/kv/block_pool.h"
#include "core/util/team.h"

namespace kvserve {

// One sequence's view of the cache: its block table and how many positions
// are valid (for decode: the context including the new token).
struct SeqKv {
  absl::Span<const int32_t> blocks;
  int64_t n_ctx = 0;
};

// How attention is computed; any value but kAuto forces a path, for tests
// and benchmarks. kFused is the hand-written paged kernel (decode_kernel.h:
// one pass over a group's blocks, online softmax, split-K across threads);
// kOneDnn uses oneDNN matmul primitives (onednn_attention.h). kAuto is what
// bench/attention_bench measured faster: fused for decode (it beat oneDNN in
// every case, as oneDNN pays ~1 µs per call and cannot fuse the softmax),
// oneDNN for prefill chunks of 16 or more queries (gemm-shaped work), fused
// for shorter ones. kLlamaOrder computes llama.cpp's attention to the bit
// over an f32 cache (llama_order.h), at a cost: decode ~0.15 of the read
// bandwidth against the fused kernel's 0.5-0.8, prompts ~20 GFLOP/s
// against oneDNN's ~200 (bench/attention_bench).
enum class AttentionPath { kAuto, kFused, kOneDnn, kLlamaOrder };

struct GqaAttentionOptions {
  int n_heads = 0;  // query heads; the pool gives n_kv_heads and head_dim
  int sliding_window = 0;  // W above; 0 = none (every position up to i)
  AttentionPath decode_path = AttentionPath::kAuto;
  AttentionPath prefill_path = AttentionPath::kAuto;
};

class GqaAttention {
 public:
  // INVALID_ARGUMENT when n_heads is not a positive multiple of the pool's
  // n_kv_heads, or sliding_window is negative.
  static absl::StatusOr<std::unique_ptr<GqaAttention>> Create(
      const BlockPool* pool, const GqaAttentionOptions& options);
  ~GqaAttention();

  // One new query per sequence, at position seqs[b].n_ctx - 1: it attends
  // to the positions [0, n_ctx) of `layer` (the last W with a window).
  // q, out: [seqs.size()][n_heads][head_dim] f32.
  void GqaDecode(int layer, absl::Span<const SeqKv> seqs, const float* q,
                 float* out);

  // GqaDecode computed by the members of `team` (every member calls it
  // with the same arguments; the caller syncs the team before reading
  // out). REQUIRES: DecodeRunsInTeam().
  void GqaDecodeInTeam(int layer, absl::Span<const SeqKv> seqs, const float* q,
                       float* out, const Team& team);
  // Whether decode runs on our kernels (not oneDNN primitives, which
  // cannot run inside another parallel region).
  bool DecodeRunsInTeam() const;

  // A chunk of n_new queries of one sequence at positions
  // [start_pos, start_pos + n_new); query i attends causally to positions
  // [0, start_pos + i] (the last W of them with a window). Their K/V must
  // already be written.
  // REQUIRES: seq.n_ctx >= start_pos + n_new.
  // q, out: [n_new][n_heads][head_dim] f32.
  void GqaPrefill(int layer, const SeqKv& seq, int64_t start_pos, int64_t n_new,
                  const float* q, float* out);

 private:
  struct Impl;
  explicit GqaAttention(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_ATTENTION_GQA_ATTENTION_H_
