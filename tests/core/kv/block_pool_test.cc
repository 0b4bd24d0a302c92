#include "core/kv/block_pool.h"

#include <algorithm>
#include <cstring>
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
