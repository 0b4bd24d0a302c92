// The fused paged decode kernel: for one KV group and a run of its blocks,
// the unnormalised attention state of all kv_mul query heads of the group,
// in one pass over the blocks' K and V (online softmax across blocks).
//
// Internal to core/attention. Variants, chosen at run time from Cpu()
// (core/util/cpu_features.h; the build has no -march flags): AVX-512 with
// AVX512_BF16 dot products for bf16 caches, AVX512_VNNI integer dot
// products for q8_0 and q4_0 caches (q·k and p·v), AVX-512 FMA (f32, and
// bf16, q8_0 and q4_0 widened to f32 as they are read: no dequantized copy
// of a block is kept), AVX2, and a portable scalar one for any head_dim.
//
// Thread-safety: kernels are pure functions of their arguments; each
// thread passes its own scratch and state.
#ifndef KVSERVE_CORE_ATTENTION_DECODE_KERNEL_H_
#define KVSERVE_CORE_ATTENTION_DECODE_KERNEL_H_

#include <cstdint>
#include <string_view>

#include "core/util/dtype.h"

namespace kvserve::attention_internal {

// Softmax state of kv_mul rows over the positions seen so far, in base 2:
// the attention output is acc[h] / l[h], and l[h] = Σ 2^(s − m[h]) with s
// the scores in log2 units (q is pre-scaled by log2(e) / sqrt(head_dim)).
struct PartialState {
  float* m;    // [kv_mul] running max of the scores
  float* l;    // [kv_mul] running sum of 2^(s − m)
  float* acc;  // [kv_mul][head_dim] running Σ 2^(s − m) · v
};

struct DecodeArgs {
  int head_dim = 0;
  int kv_mul = 0;
  int block_tokens = 0;
  // [kv_mul][head_dim] f32, already scaled by log2(e) / sqrt(head_dim).
  const float* q = nullptr;
  // The group's K (V) in block b (block_tokens positions in the pool's
  // dtype, the kernel's, laid out as core/kv/kv_rows.h says) starts at
  // k_base (v_base) + b * block_stride bytes.
  const void* k_base = nullptr;
  const void* v_base = nullptr;
  int64_t block_stride = 0;
  const int32_t* blocks = nullptr;  // the run, in position order
  int n_blocks = 0;                 // >= 1
  int last_block_tokens = 0;        // valid positions in the last block, >= 1
  // Positions of the first block before this one are skipped (not read):
  // a sliding window starting inside it. < its valid positions.
  int first_block_skip = 0;
  // Where the caller reads next (the K and V rows of the next block it
  // will pass, block_tokens of each), or nullptr: prefetched while the
  // run's last block is scored (each earlier block prefetches the run's
  // next one), so a run of one block (the block-major order) does not
  // start each block from memory.
  const void* next_k = nullptr;
  const void* next_v = nullptr;
  // Per-thread scratch of at least DecodeScratchFloats() floats.
  float* scratch = nullptr;
  // The state passed in already holds earlier positions of the same query
  // (an earlier call's result): it is continued instead of started.
  bool continue_state = false;
};

int64_t DecodeScratchFloats(int head_dim, int kv_mul, int block_tokens);

// Computes the state of the run's positions into `out`, from scratch or
// (continue_state) on top of what `out` holds.
using DecodeKernel = void (*)(const DecodeArgs& args, PartialState out);

// The state before any position (m = −inf, l = 0, acc = 0), or `st` left
// as it is when a.continue_state: how every kernel (and oneDNN's decode
// run) starts.
void StartState(const DecodeArgs& a, PartialState st);

// kAvx512Bf16 adds AVX512_BF16 dot products for bf16 caches.
enum class Isa { kScalar, kAvx2, kAvx512, kAvx512Bf16 };
// The best variant for Cpu() (core/util/cpu_features.h: the CPU's features
// under the KVSERVE_MAX_ISA cap).
Isa BestIsa();
std::string_view IsaName(Isa isa);
// The fastest kernel for the shape on `isa`.
DecodeKernel SelectDecodeKernel(Isa isa, DType dtype, int head_dim);

// 2^x for the kernels' softmax (scalar; exact to a few ulp).
float Exp2(float x);

// Vectorised softmax pieces for the oneDNN paths, on `isa`.
struct RowOps {
  float (*max)(const float* s, int n);
  // s[t] = 2^(s[t] - m) for t < n; returns the sum.
  float (*exp2_sum)(float* s, int n, float m);
};
RowOps SelectRowOps(Isa isa);

}  // namespace kvserve::attention_internal

#endif  // KVSERVE_CORE_ATTENTION_DECODE_KERNEL_H_
