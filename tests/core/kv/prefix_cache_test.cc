#include "core/kv/prefix_cache.h"

#include <numeric>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

constexpr int kBlock = 4;

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    pool_ = *BlockPool::Create({.n_layers = 1,
                                .n_kv_heads = 1,
                                .head_dim = 2,
                                .block_tokens = kBlock,
                                .dtype = DType::kF32,
                                .capacity_bytes = 32 * kBlock * 2 * 2 * 4});
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

TEST_F(PrefixCacheTest, FreedBlocksAreNotFound) {
  const std::vector<int32_t> tokens = Range(8);
  {
    CachedKv a(pool_.get());
    Compute(tokens, a);
  }
  CachedKv b(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, b), 0);
  // Reuse of the freed blocks for other tokens never resurrects them.
  CachedKv c(pool_.get());
  Compute(Range(8, 500), c);
  CachedKv d(pool_.get());
  EXPECT_EQ(cache_->Match(tokens, d), 0);
  EXPECT_EQ(cache_->Match(Range(8, 500), d), 8);
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
