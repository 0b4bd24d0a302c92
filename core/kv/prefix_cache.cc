#include "core/kv/prefix_cache.h"

#include <utility>

#include "absl/hash/hash.h"
#include "core/util/check.h"

namespace kvserve {
namespace {

uint64_t ChainHash(uint64_t parent, absl::Span<const int32_t> tokens) {
  const uint64_t h =
      absl::Hash<std::pair<uint64_t, absl::Span<const int32_t>>>{}(
          {parent, tokens});
  return h == 0 ? 1 : h;  // 0 means "not registered"
}

}  // namespace

void CachedKv::Truncate(int64_t n) {
  table.Truncate(n);
  const size_t full = n / table.pool()->options().block_tokens;
  if (hashes.size() > full) hashes.resize(full);
}

void CachedKv::Clear() {
  table.Clear();
  hashes.clear();
}

CachedKv CachedKv::Fork() const {
  CachedKv fork(table.pool());
  fork.table = table.Fork();
  fork.hashes = hashes;
  fork.salt = salt;
  return fork;
}

PrefixCache::PrefixCache(BlockPool* pool) : pool_(pool) {
  pool_->SetEvictionListener([this](int32_t block, uint64_t hash) {
    auto it = by_hash_.find(hash);
    KVSERVE_CHECK(it != by_hash_.end() && it->second == block);
    by_hash_.erase(it);
  });
}

PrefixCache::~PrefixCache() {
  pool_->SetEvictionListener(nullptr);
  for (const auto& [hash, block] : by_hash_) pool_->SetBlockHash(block, 0);
}

int64_t PrefixCache::Match(absl::Span<const int32_t> tokens, CachedKv& kv,
                           bool new_lookup) {
  const int64_t bt = pool_->options().block_tokens;
  const int64_t start = kv.table.num_tokens();
  const int64_t asked = static_cast<int64_t>(tokens.size()) - start;
  if (new_lookup && asked > 0) queried_tokens_ += asked;
  if (start % bt != 0 || static_cast<int64_t>(kv.hashes.size()) != start / bt) {
    return 0;
  }
  int64_t pos = start;
  while (pos + bt <= static_cast<int64_t>(tokens.size())) {
    const uint64_t parent = kv.hashes.empty() ? kv.salt : kv.hashes.back();
    const uint64_t h = ChainHash(parent, tokens.subspan(pos, bt));
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) break;
    KVSERVE_CHECK(pool_->BlockHash(it->second) == h);
    kv.table.AppendSharedBlock(it->second);
    kv.hashes.push_back(h);
    pos += bt;
  }
  hit_tokens_ += pos - start;
  return pos - start;
}

absl::Status PrefixCache::Extend(CachedKv& kv, int64_t new_num_tokens) {
  const int64_t bt = pool_->options().block_tokens;
  const size_t first_written = kv.table.num_tokens() / bt;
  if (absl::Status s = kv.table.Extend(new_num_tokens); !s.ok()) return s;
  absl::Span<const int32_t> blocks = kv.table.blocks();
  for (size_t i = first_written; i < blocks.size(); ++i) Forget(blocks[i]);
  if (kv.hashes.size() > first_written) kv.hashes.resize(first_written);
  return absl::OkStatus();
}

void PrefixCache::Register(absl::Span<const int32_t> tokens, CachedKv& kv) {
  const int64_t bt = pool_->options().block_tokens;
  const int64_t full = kv.table.num_tokens() / bt;
  absl::Span<const int32_t> blocks = kv.table.blocks();
  for (int64_t i = kv.hashes.size(); i < full; ++i) {
    const uint64_t parent = i == 0 ? kv.salt : kv.hashes[i - 1];
    const uint64_t h = ChainHash(parent, tokens.subspan(i * bt, bt));
    kv.hashes.push_back(h);
    const int32_t block = blocks[i];
    if (pool_->BlockHash(block) == h) continue;
    Forget(block);
    // Another block already holding these tokens keeps the name.
    if (by_hash_.try_emplace(h, block).second) pool_->SetBlockHash(block, h);
  }
}

void PrefixCache::Forget(int32_t block) {
  const uint64_t h = pool_->BlockHash(block);
  if (h == 0) return;
  auto it = by_hash_.find(h);
  KVSERVE_CHECK(it != by_hash_.end() && it->second == block);
  by_hash_.erase(it);
  pool_->SetBlockHash(block, 0);
}

}  // namespace kvserve
