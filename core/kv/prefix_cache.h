// PrefixCache: finds full KV blocks by the tokens they hold, so sequences
// with a common prefix (a shared system prompt, a fork, an earlier turn, the
// same conversation re-sent without a session) hold one copy of its blocks.
//
// A full block is named by its chain hash: Hash(parent block's chain hash,
// the block's token ids), so equal hashes mean equal whole prefixes. Only
// full blocks are registered. A full block is never written again (writes go
// to a table's partial last block, and BlockTable copies a shared one first),
// so a registered block's contents stay valid while it is registered. One
// about to be written must be forgotten first (Forget), which the owner does
// for every block a BlockTable::Extend may have allocated or will write.
//
// Registration outlives the tables: a registered block whose last table
// releases it becomes cached in the pool (BlockPool), still found by Match,
// which revives it. Nothing can write a cached block (no table holds it);
// when the pool reuses it for new contents (Allocate, only once no block is
// free) it tells this cache, which forgets the hash.
//
// Invariant: by_hash_[h] == b exactly when pool->BlockHash(b) == h != 0.
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
  // The first block's chain parent: sequences with different salts (the
  // sessions of different owners) never find each other's blocks, so a
  // cache hit cannot reveal another owner's prompt.
  uint64_t salt = 0;

  // Keeps the first n positions (hashes of blocks no longer full go).
  void Truncate(int64_t n);
  void Clear();
  CachedKv Fork() const;
};

class PrefixCache {
 public:
  // Installs itself as the pool's eviction listener. REQUIRES: pool
  // outlives the cache; one PrefixCache per pool.
  explicit PrefixCache(BlockPool* pool);
  // Forgets every block (cached ones become free) and removes the listener.
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Appends to `kv` the registered full blocks (used or cached) that hold
  // tokens[kv.num_tokens()...] and returns how many positions it adopted.
  // Adopts nothing unless kv.table.num_tokens() is a multiple of the block
  // size and kv's full blocks are all hashed. A new lookup (a request's
  // prompt) counts in queried_tokens(); a retry for the same prompt (blocks
  // another sequence finished meanwhile) passes new_lookup = false.
  int64_t Match(absl::Span<const int32_t> tokens, CachedKv& kv,
                bool new_lookup = true);

  // Makes [kv.num_tokens(), new_num_tokens) writable (BlockTable::Extend,
  // which may reuse cached blocks) and forgets every block that Extend may
  // have allocated or that will be written.
  absl::Status Extend(CachedKv& kv, int64_t new_num_tokens);

  // Registers kv's full blocks that are not hashed yet. REQUIRES: their K/V
  // are written, and tokens[0, kv.num_tokens()) are the tokens they hold.
  // A block whose tokens another block already holds stays unregistered.
  void Register(absl::Span<const int32_t> tokens, CachedKv& kv);

  // Registered blocks, used or cached.
  int64_t size() const { return by_hash_.size(); }
  // Cumulative, in tokens: the positions new lookups asked for past what
  // their tables held (tokens.size() - kv.table.num_tokens() when
  // positive), and the positions any Match adopted.
  int64_t queried_tokens() const { return queried_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }

 private:
  void Forget(int32_t block);

  BlockPool* pool_;
  absl::flat_hash_map<uint64_t, int32_t> by_hash_;
  int64_t queried_tokens_ = 0;
  int64_t hit_tokens_ = 0;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_KV_PREFIX_CACHE_H_
