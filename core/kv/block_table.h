// BlockTable: the blocks holding one sequence's KV cache, in position order.
// Position p lives in block blocks()[p / block_tokens] at slot
// p % block_tokens. Owns one reference to each of its blocks, and releases
// them last position first (Truncate, Clear), so that a released prefix's
// blocks become cached tail first and the pool reuses its tail before its
// head (a chain-hashed prefix is only found from its head).
//
// Thread-safety: not thread-safe; used by the engine thread only.
#ifndef KVSERVE_CORE_KV_BLOCK_TABLE_H_
#define KVSERVE_CORE_KV_BLOCK_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/kv/block_pool.h"

namespace kvserve {

class BlockTable {
 public:
  explicit BlockTable(BlockPool* pool);
  ~BlockTable();  // releases every block
  BlockTable(BlockTable&& other) noexcept;
  BlockTable& operator=(BlockTable&& other) noexcept;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;

  // Makes positions [num_tokens(), new_num_tokens) writable: allocates blocks
  // as needed and copies a shared last block before it is written
  // (copy-on-write). Cached blocks count as available (BlockPool reuses them
  // when no block is free), so RESOURCE_EXHAUSTED means every other block is
  // used; then nothing changes. Otherwise
  // num_tokens() == new_num_tokens; the new positions hold garbage until
  // written with WriteKv.
  absl::Status Extend(int64_t new_num_tokens);

  // Stores one position's K and V for one layer; k and v are
  // [n_kv_heads][head_dim] f32 (converted to the pool's dtype).
  // REQUIRES: pos < num_tokens() and pos's block is not shared.
  void WriteKv(int layer, int64_t pos, const float* k, const float* v);

  // Keeps the first n positions, releasing blocks past them (last first).
  // REQUIRES: n <= num_tokens().
  void Truncate(int64_t n);

  // Appends `block`, a full block shared with other tables or cached (its
  // refcount is incremented; a cached block is revived), as positions
  // [num_tokens(), num_tokens() + block_tokens).
  // REQUIRES: num_tokens() is a multiple of block_tokens.
  void AppendSharedBlock(int32_t block);

  // A table sharing every block of this one (refcounts incremented).
  BlockTable Fork() const;

  // Releases every block, last first; num_tokens() becomes 0.
  void Clear();

  // Adopts `blocks` (already referenced once for this table) as the table's
  // first blocks, holding `num_tokens` positions. REQUIRES: empty table.
  void Adopt(std::vector<int32_t> blocks, int64_t num_tokens);

  int64_t num_tokens() const { return num_tokens_; }
  absl::Span<const int32_t> blocks() const { return blocks_; }
  BlockPool* pool() const { return pool_; }

 private:
  BlockPool* pool_;
  std::vector<int32_t> blocks_;
  int64_t num_tokens_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_KV_BLOCK_TABLE_H_
