#include "core/kv/prefix_cache.h"

#include <numeric>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

constexpr int kBlock = 4;

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeCache(32); }

  void MakeCache(int num_blocks) {
    cache_.reset();
    pool_ = *BlockPool::Create({.n_layers = 1,
                                .n_kv_heads = 1,
                                .head_dim = 2,
                                .block_tokens = kBlock,
                                .dtype = DType::kF32,
                                .capacity_bytes = num_blocks * kBlock * 2 * 2 *
                                                  int64_t{sizeof(float)}});
    cache_ = std::make_unique<PrefixCache>(pool_.get());
  }

  // Computes (writes) `tokens` into kv from its current length, tagging
  // each position's K with its token id, and registers the full blocks.
  void Compute(const std::vector<int32_t>& tokens, CachedKv& kv) {
    const int64_t start = kv.table.num_tokens();
    ASSERT_TRUE(cache_->Extend(kv, tokens.size()).ok());
    for (size_t p = start; p < tokens.size(); ++p) {
      const float k[2] = {static_cast<float>(tokens[p]), 0};
      kv.table.WriteKv(0, p, k, k);
    }
    cache_->Register(tokens, kv);
  }

  // Every block is used, cached or free; the cache names exactly the
  // hashed blocks, and a cached block is always one of them.
  void ExpectConsistent() {
    EXPECT_EQ(pool_->num_used_blocks() + pool_->num_cached_blocks() +
                  pool_->num_free_blocks(),
              pool_->num_blocks());
    int hashed = 0, unheld_hashed = 0;
    for (int32_t b = 0; b < pool_->num_blocks(); ++b) {
      hashed += pool_->BlockHash(b) != 0;
      unheld_hashed += pool_->BlockHash(b) != 0 && pool_->RefCount(b) == 0;
    }
    EXPECT_EQ(cache_->size(), hashed);
    EXPECT_EQ(pool_->num_cached_blocks(), unheld_hashed);
  }

  float KeyAt(const CachedKv& kv, int64_t pos) {
    const float* block = static_cast<const float*>(
        pool_->KeyBlock(0, kv.table.blocks()[pos / kBlock]));
    return block[(pos % kBlock) * 2];
  }

  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<PrefixCache> cache_;
};

std::vector<int32_t> Range(int n, int first = 100) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST_F(PrefixCacheTest, SecondSequenceAdoptsTheFullBlocksOfTheFirst) {
  const std::vector<int32_t> tokens = Range(10);
  CachedKv a(pool_.get()), b(pool_.get());
  Compute(tokens, a);
  const int free_before = pool_->num_free_blocks();
  EXPECT_EQ(cache_->Match(tokens, b), 8);  // two full blocks of 4
  EXPECT_EQ(pool_->num_free_blocks(), free_before);
  EXPECT_EQ(pool_->num_shared_blocks(), 2);
  EXPECT_EQ(b.table.blocks()[0], a.table.blocks()[0]);
  Compute(tokens, b);  // the partial tail is b's own
  EXPECT_NE(b.table.blocks()[2], a.table.blocks()[2]);
  for (int p = 0; p < 10; ++p) EXPECT_EQ(KeyAt(b, p), tokens[p]);
}

TEST_F(PrefixCacheTest, MatchesWholePrefixesOnly) {
  CachedKv a(pool_.get()), b(pool_.get()), c(pool_.get());
  std::vector<int32_t> tokens = Range(8);
  Compute(tokens, a);
  // Same second block, different first block: the chain hash differs.
  std::vector<int32_t> other = tokens;
  other[0] = 7;
  EXPECT_EQ(cache_->Match(other, b), 0);
  // A diverging second block: only the first is shared.
  std::vector<int32_t> diverge = tokens;
  diverge[6] = 7;
  EXPECT_EQ(cache_->Match(diverge, c), 4);
}

TEST_F(PrefixCacheTest, BlocksReleasedByTheirLastHolderAreFoundAgain) {
  const std::vector<int32_t> tokens = Range(10);
  std::vector<int32_t> blocks;
  {
    CachedKv a(pool_.get());
    Compute(tokens, a);
    blocks.assign(a.table.blocks().begin(), a.table.blocks().begin() + 2);
  }
  EXPECT_EQ(pool_->num_used_blocks(), 0);
  EXPECT_EQ(pool_->num_cached_blocks(), 2);  // the partial block is free
  ExpectConsistent();
  CachedKv b(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, b), 8);
  EXPECT_EQ(
      std::vector<int32_t>(b.table.blocks().begin(), b.table.blocks().end()),
      blocks);
  // Revived: used by b alone, no longer cached.
  EXPECT_EQ(pool_->num_cached_blocks(), 0);
  EXPECT_EQ(pool_->RefCount(blocks[0]), 1);
  EXPECT_EQ(pool_->RefCount(blocks[1]), 1);
  ExpectConsistent();
  for (int p = 0; p < 8; ++p) EXPECT_EQ(KeyAt(b, p), tokens[p]);
  Compute(tokens, b);
  for (int p = 0; p < 10; ++p) EXPECT_EQ(KeyAt(b, p), tokens[p]);
}

TEST_F(PrefixCacheTest, EvictedBlocksAreNoLongerMatched) {
  MakeCache(3);
  const std::vector<int32_t> tokens = Range(8);
  {
    CachedKv a(pool_.get());
    Compute(tokens, a);
  }
  ASSERT_EQ(pool_->num_cached_blocks(), 2);
  // Three blocks of other tokens: the free block first, then both cached.
  CachedKv c(pool_.get());
  Compute(Range(12, 500), c);
  EXPECT_EQ(pool_->num_cached_blocks(), 0);
  EXPECT_EQ(cache_->size(), 3);
  ExpectConsistent();
  CachedKv d(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, d), 0);
  c.Clear();
  EXPECT_EQ(cache_->Match(Range(12, 500), d), 12);
  for (int p = 0; p < 12; ++p) EXPECT_EQ(KeyAt(d, p), 500 + p);
}

TEST_F(PrefixCacheTest, LeastRecentlyUsedPrefixIsEvictedFirstTailFirst) {
  MakeCache(6);
  const std::vector<int32_t> old_tokens = Range(8, 100);
  const std::vector<int32_t> new_tokens = Range(8, 200);
  {
    CachedKv a(pool_.get());
    Compute(old_tokens, a);
  }
  {
    CachedKv b(pool_.get());
    Compute(new_tokens, b);
  }
  ASSERT_EQ(pool_->num_cached_blocks(), 4);
  ASSERT_EQ(pool_->num_free_blocks(), 2);
  // Two blocks come from the free list: nothing cached is given up.
  CachedKv c(pool_.get());
  ASSERT_TRUE(cache_->Extend(c, 2 * kBlock).ok());
  EXPECT_EQ(pool_->num_cached_blocks(), 4);
  {
    CachedKv probe(pool_.get());
    EXPECT_EQ(cache_->Match(old_tokens, probe), 8);
  }
  // Re-released by the probe, old_tokens' blocks are now the most recent.
  // One more block: new_tokens' last block goes, its head stays.
  ASSERT_TRUE(cache_->Extend(c, 3 * kBlock).ok());
  ExpectConsistent();
  CachedKv d(pool_.get()), e(pool_.get());
  EXPECT_EQ(cache_->Match(new_tokens, d), 4);
  EXPECT_EQ(cache_->Match(old_tokens, e), 8);
}

TEST_F(PrefixCacheTest, ChainHashesStayRightAfterEvictionAndReuse) {
  MakeCache(4);
  const std::vector<int32_t> tokens = Range(8);
  {
    CachedKv a(pool_.get());
    Compute(tokens, a);
  }
  // Fill the pool: two free blocks, then tokens' second block (released
  // first) is reused for other tokens.
  CachedKv other(pool_.get());
  Compute(Range(12, 500), other);
  ASSERT_EQ(pool_->num_cached_blocks(), 1);
  CachedKv b(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, b), 4);  // the head only
  // Recomputing the second block registers it again under its chain hash.
  other.Clear();
  Compute(tokens, b);
  ExpectConsistent();
  b.Clear();
  CachedKv c(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, c), 8);
  for (int p = 0; p < 8; ++p) EXPECT_EQ(KeyAt(c, p), tokens[p]);
  // other's blocks were cached tail first: its tail gave the block.
  CachedKv d(pool_.get());
  EXPECT_EQ(cache_->Match(Range(12, 500), d), 8);
  for (int p = 0; p < 8; ++p) EXPECT_EQ(KeyAt(d, p), 500 + p);
  // other's second block's tokens after tokens' head: another chain.
  std::vector<int32_t> mixed = tokens;
  for (int p = 4; p < 8; ++p) mixed[p] = 504 + p - 4;
  CachedKv m(pool_.get());
  EXPECT_EQ(cache_->Match(mixed, m), 4);
}

TEST_F(PrefixCacheTest, ADuplicateBlockStaysUnregistered) {
  const std::vector<int32_t> tokens = Range(8);
  CachedKv a(pool_.get()), b(pool_.get());
  Compute(tokens, a);
  Compute(tokens, b);  // computed without matching: same tokens, own blocks
  EXPECT_EQ(cache_->size(), 2);
  ExpectConsistent();
  a.Clear();
  b.Clear();
  EXPECT_EQ(pool_->num_cached_blocks(), 2);
  EXPECT_EQ(pool_->num_free_blocks(), pool_->num_blocks() - 2);
  CachedKv c(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, c), 8);
}

TEST_F(PrefixCacheTest, DifferentSaltsNeverShareBlocks) {
  const std::vector<int32_t> tokens = Range(10);
  CachedKv a(pool_.get());
  a.salt = 7;
  Compute(tokens, a);
  CachedKv other(pool_.get());
  other.salt = 8;
  EXPECT_EQ(cache_->Match(tokens, other), 0);
  CachedKv same(pool_.get());
  same.salt = 7;
  EXPECT_EQ(cache_->Match(tokens, same), 8);
  EXPECT_EQ(a.Fork().salt, 7u);
}

TEST_F(PrefixCacheTest, CountsQueriedAndHitTokens) {
  const std::vector<int32_t> tokens = Range(10);
  {
    CachedKv a(pool_.get());
    EXPECT_EQ(cache_->Match(tokens, a), 0);
    EXPECT_EQ(cache_->queried_tokens(), 10);
    EXPECT_EQ(cache_->hit_tokens(), 0);
    Compute(tokens, a);
    // Asked about nothing past what a holds.
    EXPECT_EQ(cache_->Match(tokens, a), 0);
    EXPECT_EQ(cache_->queried_tokens(), 10);
  }
  CachedKv b(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, b), 8);
  EXPECT_EQ(cache_->queried_tokens(), 20);
  EXPECT_EQ(cache_->hit_tokens(), 8);
  // A longer prompt from where b stands: 6 more asked, none found.
  EXPECT_EQ(cache_->Match(Range(14), b), 0);
  EXPECT_EQ(cache_->queried_tokens(), 26);
  EXPECT_EQ(cache_->hit_tokens(), 8);
  // A retry of the same prompt adopts (and counts hits) without counting
  // its tokens as queried again.
  CachedKv c(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, c, /*new_lookup=*/false), 8);
  EXPECT_EQ(cache_->queried_tokens(), 26);
  EXPECT_EQ(cache_->hit_tokens(), 16);
}

TEST_F(PrefixCacheTest, DestroyingTheCacheFreesCachedBlocks) {
  {
    CachedKv a(pool_.get());
    Compute(Range(8), a);
  }
  CachedKv held(pool_.get());
  Compute(Range(8, 300), held);
  ASSERT_EQ(pool_->num_cached_blocks(), 2);
  cache_.reset();
  EXPECT_EQ(pool_->num_cached_blocks(), 0);
  EXPECT_EQ(pool_->num_free_blocks(), pool_->num_blocks() - 2);
  EXPECT_EQ(pool_->BlockHash(held.table.blocks()[0]), 0u);
  held.Clear();
  EXPECT_EQ(pool_->num_free_blocks(), pool_->num_blocks());
}

TEST_F(PrefixCacheTest, RewrittenBlocksAreForgotten) {
  const std::vector<int32_t> tokens = Range(8);
  CachedKv a(pool_.get());
  Compute(tokens, a);
  // Rewind into the second block and write other tokens there.
  a.Truncate(6);
  std::vector<int32_t> rewritten = tokens;
  rewritten[6] = 1;
  rewritten[7] = 2;
  Compute(rewritten, a);
  CachedKv b(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, b), 4);  // the old second block is gone
  CachedKv c(pool_.get());
  EXPECT_EQ(cache_->Match(rewritten, c), 8);
  for (int p = 0; p < 8; ++p) EXPECT_EQ(KeyAt(c, p), rewritten[p]);
}

TEST_F(PrefixCacheTest, SharedBlockRewrittenByOneKeepsTheOther) {
  const std::vector<int32_t> tokens = Range(8);
  CachedKv a(pool_.get()), b(pool_.get());
  Compute(tokens, a);
  ASSERT_EQ(cache_->Match(tokens, b), 8);
  b.Truncate(6);
  std::vector<int32_t> rewritten = tokens;
  rewritten[6] = 1;
  Compute(std::vector<int32_t>(rewritten.begin(), rewritten.begin() + 7), b);
  for (int p = 0; p < 8; ++p) EXPECT_EQ(KeyAt(a, p), tokens[p]);
  CachedKv c(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, c), 8);
}

}  // namespace
}  // namespace kvserve
