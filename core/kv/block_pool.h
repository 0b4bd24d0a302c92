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
// (BlockTable does that). Every block is in exactly one state:
//   used    refcount > 0: held by one or more BlockTables;
//   cached  refcount 0 with a block hash (the prefix cache's name for its
//           contents): it keeps its K/V, Ref revives it, and Allocate reuses
//           it only when no block is free, least recently cached first;
//   free    refcount 0, no hash: holds nothing anyone can find.
// num_used_blocks() + num_cached_blocks() + num_free_blocks() ==
// num_blocks(). Free and cached blocks are both available to Allocate.
// Running out of available blocks is a RESOURCE_EXHAUSTED status, never a
// crash.
//
// Thread-safety: not thread-safe; owned by the engine thread. Readers of
// block data (attention kernels) may run on OpenMP threads while no block is
// allocated or freed.
#ifndef KVSERVE_CORE_KV_BLOCK_POOL_H_
#define KVSERVE_CORE_KV_BLOCK_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "core/util/dtype.h"

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
  // INVALID_ARGUMENT for non-positive shapes, a budget below one block, or
  // a block-quantized dtype with head_dim not a multiple of 32.
  static absl::StatusOr<std::unique_ptr<BlockPool>> Create(
      const BlockPoolOptions& options);

  // A block with refcount 1 and no hash: a free one, else the least
  // recently cached one (its hash is cleared and the eviction listener told
  // first). RESOURCE_EXHAUSTED when every block is used.
  absl::StatusOr<int32_t> Allocate();
  // REQUIRES: the block is used or cached; a cached block is revived (leaves
  // the eviction order).
  void Ref(int32_t block);
  // When the refcount reaches 0 the block becomes cached if it has a hash
  // (the most recently cached), free otherwise.
  void Unref(int32_t block);
  int RefCount(int32_t block) const;
  // Copies K and V of all layers from `src` to `dst`.
  void CopyBlock(int32_t src, int32_t dst);

  // The prefix cache's name for a block's contents; 0 for none. Only the
  // PrefixCache sets it. REQUIRES for a nonzero hash: the block is used.
  // Clearing a cached block's hash frees it.
  uint64_t BlockHash(int32_t block) const;
  void SetBlockHash(int32_t block, uint64_t hash);
  // Called by Allocate with a cached block it takes and the hash it had
  // (already cleared); must not call back into the pool. One listener (the
  // PrefixCache's); an empty function removes it.
  using EvictionListener = std::function<void(int32_t block, uint64_t hash)>;
  void SetEvictionListener(EvictionListener listener);

  const BlockPoolOptions& options() const;
  int32_t num_blocks() const;
  int32_t num_used_blocks() const;    // refcount > 0
  int32_t num_free_blocks() const;    // refcount 0, no hash
  int32_t num_cached_blocks() const;  // refcount 0, hashed
  // What Allocate can hand out: free + cached. Capacity checks use this.
  int32_t num_available_blocks() const;
  int32_t num_shared_blocks() const;  // refcount > 1
  int64_t bytes_per_block() const;    // K+V, all layers
  int64_t bytes_per_token() const;    // 2*n_layers*n_kv_heads*row bytes
  int64_t capacity_bytes() const;     // num_blocks * bytes_per_block
  int64_t used_bytes() const;         // num_used_blocks * bytes_per_block

  // Bytes of one position's row of one KV head, and where the group of
  // `kv_head` (its block_tokens rows, core/kv/kv_rows.h) starts in a
  // block's K or V.
  int64_t row_bytes() const;
  int64_t GroupOffset(int kv_head) const {
    return int64_t{kv_head} * options().block_tokens * row_bytes();
  }
  // Start of a layer's K (V) in a block: n_kv_heads groups of block_tokens
  // positions, each position DTypeRowBytes(options().dtype, head_dim)
  // bytes of floats, bf16 bits or q8_0 / q4_0 codes and scales, laid out as
  // core/kv/kv_rows.h says (StoreKvRowAt, LoadKvRowAt).
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
