// BlockPool: the KV cache's memory, a fixed number of blocks allocated once
// from a byte budget. A block holds K and V of `block_tokens` consecutive
// positions of one sequence, for every layer.
//
// Layout (one allocation each for K and V):
//   k[layer][block][kv_head][token_in_block][head_dim]
//   v[layer][block][kv_head][token_in_block][head_dim]
// so one KV group's K (or V) for one block is contiguous
// (block_tokens * head_dim elements).
//
// Blocks are reference-counted; a block with refcount > 1 is shared (by
// forked sequences or a common prefix) and must be copied before writing
// (BlockTable does that). Running out of blocks is a RESOURCE_EXHAUSTED
// status, never a crash.
//
// Thread-safety: not thread-safe; owned by the engine thread. Readers of
// block data (attention kernels) may run on OpenMP threads while no block is
// allocated or freed.
#ifndef KVSERVE_CORE_KV_BLOCK_POOL_H_
#define KVSERVE_CORE_KV_BLOCK_POOL_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/model/config.h"

namespace kvserve {

struct BlockPoolOptions {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  // Positions per block. 128 by measurement (bench/attention_bench's
  // block_sweep, fused decode, 32/8 heads x 128 dims, T = 4096): per block
  // the kernel pays a fixed softmax/rescale cost and the hardware
  // prefetcher restarts its stream, so 16-token blocks decoded 1.3-2x slower
  // than 128 (bf16 hot-cache: 47 vs 73 GB/s per core); 256 gained nothing
  // more, and every block costs up to block_tokens - 1 positions of slack
  // per sequence and one block copy per copy-on-write.
  int block_tokens = 128;
  DType dtype = DType::kF32;
  int64_t capacity_bytes = 0;  // K+V budget; rounded down to whole blocks
};

class BlockPool {
 public:
  // INVALID_ARGUMENT for non-positive shapes or a budget below one block.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(
      const BlockPoolOptions& options);

  // A free block with refcount 1, or RESOURCE_EXHAUSTED.
  absl::StatusOr<int32_t> Allocate();
  void Ref(int32_t block);
  // Returns the block to the free list when its refcount reaches 0.
  void Unref(int32_t block);
  int RefCount(int32_t block) const;
  // Copies K and V of all layers from `src` to `dst`.
  void CopyBlock(int32_t src, int32_t dst);

  const BlockPoolOptions& options() const;
  int32_t num_blocks() const;
  int32_t num_free_blocks() const;
  int32_t num_shared_blocks() const;  // refcount > 1
  int64_t bytes_per_block() const;    // K+V, all layers
  int64_t bytes_per_token() const;    // 2*n_layers*n_kv_heads*head_dim*size
  int64_t capacity_bytes() const;     // num_blocks * bytes_per_block
  int64_t used_bytes() const;         // blocks in use * bytes_per_block

  // Start of [kv_head][token_in_block][head_dim] for one layer and block;
  // elements are float or uint16_t (bf16 bits) as options().dtype says.
  void* KeyBlock(int layer, int32_t block);
  void* ValueBlock(int layer, int32_t block);
  const void* KeyBlock(int layer, int32_t block) const;
  const void* ValueBlock(int layer, int32_t block) const;

  ~BlockPool();

 private:
  struct Impl;
  explicit BlockPool(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_KV_BLOCK_POOL_H_
