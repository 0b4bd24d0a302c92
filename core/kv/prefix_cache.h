// PrefixCache: finds full KV blocks by the tokens they hold, so sequences
// with a common prefix (a shared system prompt, a fork, an earlier turn) hold
// one copy of its blocks.
//
// A full block is named by its chain hash: Hash(parent block's chain hash,
// the block's token ids), so equal hashes mean equal whole prefixes. Only
// full blocks are registered. A full block is never written again (writes go
// to a table's partial last block, and BlockTable copies a shared one first),
// so a registered block's contents stay valid while any table references it.
// A freed block is found no more; one about to be written must be forgotten
// first (Forget), which the owner does for every block a BlockTable::Extend
// may have allocated or will write.
//
// Thread-safety: not thread-safe; owned by the engine thread.
#ifndef KVSERVE_CORE_KV_PREFIX_CACHE_H_
#define KVSERVE_CORE_KV_PREFIX_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "core/kv/block_table.h"

namespace kvserve {

// A sequence's KV cache with the chain hashes of its full blocks.
// Invariant: hashes.size() <= table.num_tokens() / block_tokens, and
// hashes[i] names blocks()[i].
struct CachedKv {
  explicit CachedKv(BlockPool* pool) : table(pool) {}
  BlockTable table;
  std::vector<uint64_t> hashes;

  // Keeps the first n positions (hashes of blocks no longer full go).
  void Truncate(int64_t n);
  void Clear();
  CachedKv Fork() const;
};

class PrefixCache {
 public:
  // REQUIRES: pool outlives the cache.
  explicit PrefixCache(BlockPool* pool);

  // Appends to `kv` the cached full blocks that hold tokens[kv.num_tokens()
  // ...] and returns how many positions it adopted. Adopts nothing unless
  // kv.table.num_tokens() is a multiple of the block size and kv's full
  // blocks are all hashed.
  int64_t Match(absl::Span<const int32_t> tokens, CachedKv& kv);

  // Makes [kv.num_tokens(), new_num_tokens) writable (BlockTable::Extend)
  // and forgets every block that Extend may have allocated or that will be
  // written.
  absl::Status Extend(CachedKv& kv, int64_t new_num_tokens);

  // Registers kv's full blocks that are not hashed yet. REQUIRES: their K/V
  // are written, and tokens[0, kv.num_tokens()) are the tokens they hold.
  void Register(absl::Span<const int32_t> tokens, CachedKv& kv);

  int64_t size() const { return by_hash_.size(); }

 private:
  void Forget(int32_t block);

  BlockPool* pool_;
  absl::flat_hash_map<uint64_t, int32_t> by_hash_;
  std::vector<uint64_t> hash_of_block_;  // 0: not registered
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_KV_PREFIX_CACHE_H_
