#include "core/kv/block_pool.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

BlockPoolOptions SmallOptions(DType dtype = DType::kF32) {
  BlockPoolOptions o;
  o.n_layers = 2;
  o.n_kv_heads = 3;
  o.head_dim = 8;
  o.block_tokens = 4;
  o.dtype = dtype;
  o.capacity_bytes = 5 * 2 * 2 * 3 * 4 * 8 * DTypeSize(dtype) + 100;
  return o;
}

TEST(BlockPoolTest, RejectsBadShapesAndTinyBudget) {
  for (int field = 0; field < 4; ++field) {
    BlockPoolOptions o = SmallOptions();
    int* fields[] = {&o.n_layers, &o.n_kv_heads, &o.head_dim, &o.block_tokens};
    *fields[field] = 0;
    EXPECT_EQ(BlockPool::Create(o).status().code(),
              absl::StatusCode::kInvalidArgument)
        << field;
  }
  BlockPoolOptions o = SmallOptions();
  o.capacity_bytes = 2 * 2 * 3 * 4 * 8 * 4 - 1;
  EXPECT_EQ(BlockPool::Create(o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BlockPoolTest, ByteAccountingIsExact) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    auto pool = BlockPool::Create(SmallOptions(dtype));
    ASSERT_TRUE(pool.ok()) << pool.status();
    BlockPool& p = **pool;
    const int64_t size = DTypeSize(dtype);
    EXPECT_EQ(p.bytes_per_token(), 2 * 2 * 3 * 8 * size);
    EXPECT_EQ(p.bytes_per_block(), 4 * p.bytes_per_token());
    EXPECT_EQ(p.num_blocks(), 5);  // the budget's remainder is dropped
    EXPECT_EQ(p.capacity_bytes(), 5 * p.bytes_per_block());
    EXPECT_EQ(p.used_bytes(), 0);
    auto b = p.Allocate();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(p.used_bytes(), p.bytes_per_block());
    p.Unref(*b);
    EXPECT_EQ(p.used_bytes(), 0);
  }
}

// q8_0 and q4_0: blocks of 32 elements with an f16 scale, 34 and 18 bytes
// (0.53x and 0.28x of bf16's 64), so a head_dim must hold whole blocks.
TEST(BlockPoolTest, QuantizedTypesCountTheirBlocksAndNeedWholeOnes) {
  for (auto [dtype, block_bytes] :
       {std::pair{DType::kQ8_0, 34}, std::pair{DType::kQ4_0, 18}}) {
    BlockPoolOptions o = SmallOptions(dtype);
    o.head_dim = 64;
    o.capacity_bytes = 1 << 20;
    auto pool = BlockPool::Create(o);
    ASSERT_TRUE(pool.ok()) << pool.status();
    EXPECT_EQ((*pool)->bytes_per_token(), 2 * 2 * 3 * 2 * block_bytes);
    EXPECT_EQ((*pool)->bytes_per_block(), 4 * (*pool)->bytes_per_token());
    BlockPoolOptions bf16 = o;
    bf16.dtype = DType::kBF16;
    EXPECT_LE((*pool)->bytes_per_token(),
              (dtype == DType::kQ8_0 ? 0.532 : 0.29) *
                  (*BlockPool::Create(bf16))->bytes_per_token());
    o.head_dim = 8;
    const absl::Status refused = BlockPool::Create(o).status();
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(refused.message()).find("head_dim 8"),
              std::string::npos)
        << refused;
    EXPECT_NE(std::string(refused.message()).find(DTypeName(dtype)),
              std::string::npos)
        << refused;
  }
}

TEST(BlockPoolTest, ExhaustionIsAStatusAndLeavesPoolConsistent) {
  auto pool = BlockPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok());
  BlockPool& p = **pool;
  std::vector<int32_t> got;
  for (int i = 0; i < 5; ++i) {
    auto b = p.Allocate();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(p.RefCount(*b), 1);
    got.push_back(*b);
  }
  std::vector<int32_t> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  auto none = p.Allocate();
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(p.num_free_blocks(), 0);
  EXPECT_EQ(p.used_bytes(), p.capacity_bytes());
  p.Unref(got[2]);
  auto again = p.Allocate();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, got[2]);
}

TEST(BlockPoolTest, RefCountsAndSharedCount) {
  auto pool = BlockPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok());
  BlockPool& p = **pool;
  auto b = p.Allocate();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(p.num_shared_blocks(), 0);
  p.Ref(*b);
  p.Ref(*b);
  EXPECT_EQ(p.RefCount(*b), 3);
  EXPECT_EQ(p.num_shared_blocks(), 1);
  p.Unref(*b);
  EXPECT_EQ(p.num_shared_blocks(), 1);
  p.Unref(*b);
  EXPECT_EQ(p.num_shared_blocks(), 0);
  EXPECT_EQ(p.num_free_blocks(), 4);
  p.Unref(*b);
  EXPECT_EQ(p.RefCount(*b), 0);
  EXPECT_EQ(p.num_free_blocks(), 5);
}

// used + cached + free is every block, and used_bytes follows used.
void ExpectStatesSum(const BlockPool& p) {
  EXPECT_EQ(p.num_used_blocks() + p.num_cached_blocks() + p.num_free_blocks(),
            p.num_blocks());
  EXPECT_EQ(p.num_available_blocks(),
            p.num_cached_blocks() + p.num_free_blocks());
  EXPECT_EQ(p.used_bytes(), p.num_used_blocks() * p.bytes_per_block());
  int used = 0;
  for (int32_t b = 0; b < p.num_blocks(); ++b) used += p.RefCount(b) > 0;
  EXPECT_EQ(p.num_used_blocks(), used);
}

TEST(BlockPoolTest, HashedBlockReleasedByItsLastHolderIsCachedNotFree) {
  auto pool = BlockPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok());
  BlockPool& p = **pool;
  const int32_t hashed = *p.Allocate();
  const int32_t plain = *p.Allocate();
  p.SetBlockHash(hashed, 42);
  p.Ref(hashed);
  p.Unref(hashed);
  EXPECT_EQ(p.num_cached_blocks(), 0);  // still held
  p.Unref(hashed);
  p.Unref(plain);
  EXPECT_EQ(p.RefCount(hashed), 0);
  EXPECT_EQ(p.BlockHash(hashed), 42u);
  EXPECT_EQ(p.num_cached_blocks(), 1);
  EXPECT_EQ(p.num_free_blocks(), 4);
  EXPECT_EQ(p.num_used_blocks(), 0);
  EXPECT_EQ(p.used_bytes(), 0);
  ExpectStatesSum(p);
  // Revived: used again, out of the eviction order, contents and hash kept.
  p.Ref(hashed);
  EXPECT_EQ(p.RefCount(hashed), 1);
  EXPECT_EQ(p.num_cached_blocks(), 0);
  EXPECT_EQ(p.num_used_blocks(), 1);
  EXPECT_EQ(p.BlockHash(hashed), 42u);
  ExpectStatesSum(p);
  // Clearing a cached block's hash frees it.
  p.Unref(hashed);
  ASSERT_EQ(p.num_cached_blocks(), 1);
  p.SetBlockHash(hashed, 0);
  EXPECT_EQ(p.num_cached_blocks(), 0);
  EXPECT_EQ(p.num_free_blocks(), 5);
  ExpectStatesSum(p);
}

TEST(BlockPoolTest, AllocateTakesFreeBlocksFirstThenTheOldestCached) {
  auto pool = BlockPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok());
  BlockPool& p = **pool;
  std::vector<std::pair<int32_t, uint64_t>> evicted;
  p.SetEvictionListener([&](int32_t block, uint64_t hash) {
    EXPECT_EQ(p.BlockHash(block), 0u);  // cleared before the listener runs
    evicted.push_back({block, hash});
  });
  std::vector<int32_t> b;
  for (int i = 0; i < 5; ++i) b.push_back(*p.Allocate());
  // Cached in the order b[3], b[0], b[2]; b[1] and b[4] are plain.
  for (int i : {0, 2, 3}) p.SetBlockHash(b[i], 100 + i);
  for (int i : {3, 1, 0, 4, 2}) p.Unref(b[i]);
  EXPECT_EQ(p.num_cached_blocks(), 3);
  EXPECT_EQ(p.num_free_blocks(), 2);
  ExpectStatesSum(p);

  std::vector<int32_t> got;
  for (int i = 0; i < 2; ++i) got.push_back(*p.Allocate());
  EXPECT_TRUE(evicted.empty()) << "a cached block went while one was free";
  EXPECT_EQ(p.num_cached_blocks(), 3);
  for (int i : {3, 0, 2}) {
    absl::StatusOr<int32_t> next = p.Allocate();
    ASSERT_TRUE(next.ok());
    EXPECT_EQ(*next, b[i]);
    ASSERT_FALSE(evicted.empty());
    EXPECT_EQ(evicted.back(), std::make_pair(b[i], uint64_t{100} + i));
    EXPECT_EQ(p.RefCount(*next), 1);
    EXPECT_EQ(p.BlockHash(*next), 0u);
    ExpectStatesSum(p);
  }
  EXPECT_EQ(evicted.size(), 3u);
  EXPECT_EQ(p.Allocate().status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(p.num_used_blocks(), 5);
}

TEST(BlockPoolTest, RevivedBlockLeavesTheEvictionOrder) {
  auto pool = BlockPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok());
  BlockPool& p = **pool;
  std::vector<int32_t> b;
  for (int i = 0; i < 5; ++i) b.push_back(*p.Allocate());
  for (int i = 0; i < 5; ++i) p.SetBlockHash(b[i], 7 + i);
  for (int i = 0; i < 5; ++i) p.Unref(b[i]);  // b[0] is the oldest
  ASSERT_EQ(p.num_cached_blocks(), 5);
  p.Ref(b[0]);
  p.Ref(b[2]);
  EXPECT_EQ(p.num_cached_blocks(), 3);
  EXPECT_EQ(*p.Allocate(), b[1]);
  // Released again, b[0] is now the most recently cached.
  p.Unref(b[0]);
  EXPECT_EQ(*p.Allocate(), b[3]);
  EXPECT_EQ(*p.Allocate(), b[4]);
  EXPECT_EQ(*p.Allocate(), b[0]);
  EXPECT_EQ(p.RefCount(b[2]), 1);
  EXPECT_EQ(p.BlockHash(b[2]), 9u);
  ExpectStatesSum(p);
}

TEST(BlockPoolTest, OnlyUsedOrCachedBlocksCanBeReferenced) {
  auto pool = BlockPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok());
  BlockPool& p = **pool;
  const int32_t b = *p.Allocate();
  p.Unref(b);  // free: it holds nothing to share
  EXPECT_DEATH(p.Ref(b), "check failed");
  EXPECT_DEATH(p.SetBlockHash(b, 1), "check failed");
}

TEST(BlockPoolTest, LayoutAndCopyBlock) {
  auto pool = BlockPool::Create(SmallOptions());
  ASSERT_TRUE(pool.ok());
  BlockPool& p = **pool;
  auto a = p.Allocate();
  auto b = p.Allocate();
  ASSERT_TRUE(a.ok() && b.ok());
  const int64_t block_elems = 3 * 4 * 8;  // [kv_head][token][head_dim]
  // Blocks and layers do not overlap.
  for (int layer = 0; layer < 2; ++layer) {
    for (int32_t blk : {*a, *b}) {
      float* k = static_cast<float*>(p.KeyBlock(layer, blk));
      float* v = static_cast<float*>(p.ValueBlock(layer, blk));
      for (int64_t i = 0; i < block_elems; ++i) {
        k[i] = static_cast<float>(layer * 1000 + blk * 100 + i);
        v[i] = -k[i];
      }
    }
  }
  for (int layer = 0; layer < 2; ++layer) {
    for (int32_t blk : {*a, *b}) {
      const float* k = static_cast<const float*>(p.KeyBlock(layer, blk));
      const float* v = static_cast<const float*>(p.ValueBlock(layer, blk));
      for (int64_t i = 0; i < block_elems; ++i) {
        ASSERT_EQ(k[i], static_cast<float>(layer * 1000 + blk * 100 + i));
        ASSERT_EQ(v[i], -k[i]);
      }
    }
  }
  p.CopyBlock(*a, *b);
  for (int layer = 0; layer < 2; ++layer) {
    EXPECT_EQ(std::memcmp(p.KeyBlock(layer, *a), p.KeyBlock(layer, *b),
                          block_elems * 4),
              0);
    EXPECT_EQ(std::memcmp(p.ValueBlock(layer, *a), p.ValueBlock(layer, *b),
                          block_elems * 4),
              0);
  }
}

}  // namespace
}  // namespace kvserve
