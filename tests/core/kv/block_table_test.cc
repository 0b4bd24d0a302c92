#include "core/kv/block_table.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "core/kv/kv_rows.h"
#include "core/util/bf16.h"
#include "core/util/fp16.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

constexpr int kLayers = 2;
constexpr int kKvHeads = 2;
constexpr int kHeadDim = 4;
constexpr int kBlockTokens = 4;

std::unique_ptr<BlockPool> MakePool(int num_blocks, DType dtype = DType::kF32) {
  BlockPoolOptions o;
  o.n_layers = kLayers;
  o.n_kv_heads = kKvHeads;
  o.head_dim = kHeadDim;
  o.block_tokens = kBlockTokens;
  o.dtype = dtype;
  o.capacity_bytes = int64_t{num_blocks} * 2 * kLayers * kKvHeads *
                     kBlockTokens * DTypeRowBytes(dtype, kHeadDim);
  auto pool = BlockPool::Create(o);
  EXPECT_TRUE(pool.ok()) << pool.status();
  return std::move(*pool);
}

// A distinct value per (tag, layer, pos, kv_head, d).
float Value(int tag, int layer, int64_t pos, int h, int d) {
  return static_cast<float>(tag * 100000 + layer * 10000 + pos * 100 + h * 10 +
                            d);
}

void WritePositions(BlockTable& t, int tag, int64_t from, int64_t to) {
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int64_t pos = from; pos < to; ++pos) {
      float k[kKvHeads * kHeadDim], v[kKvHeads * kHeadDim];
      for (int h = 0; h < kKvHeads; ++h) {
        for (int d = 0; d < kHeadDim; ++d) {
          k[h * kHeadDim + d] = Value(tag, layer, pos, h, d);
          v[h * kHeadDim + d] = -Value(tag, layer, pos, h, d);
        }
      }
      t.WriteKv(layer, pos, k, v);
    }
  }
}

float ReadK(const BlockTable& t, int layer, int64_t pos, int h, int d) {
  const float* k = static_cast<const float*>(
      t.pool()->KeyBlock(layer, t.blocks()[pos / kBlockTokens]));
  return k[(h * kBlockTokens + pos % kBlockTokens) * kHeadDim + d];
}
float ReadV(const BlockTable& t, int layer, int64_t pos, int h, int d) {
  const float* v = static_cast<const float*>(
      t.pool()->ValueBlock(layer, t.blocks()[pos / kBlockTokens]));
  return v[(h * kBlockTokens + pos % kBlockTokens) * kHeadDim + d];
}

// Expects positions [from, to) to hold `tag`'s values.
void ExpectPositions(const BlockTable& t, int tag, int64_t from, int64_t to) {
  for (int layer = 0; layer < kLayers; ++layer) {
    for (int64_t pos = from; pos < to; ++pos) {
      for (int h = 0; h < kKvHeads; ++h) {
        for (int d = 0; d < kHeadDim; ++d) {
          ASSERT_EQ(ReadK(t, layer, pos, h, d), Value(tag, layer, pos, h, d))
              << "pos " << pos;
          ASSERT_EQ(ReadV(t, layer, pos, h, d), -Value(tag, layer, pos, h, d))
              << "pos " << pos;
        }
      }
    }
  }
}

TEST(BlockTableTest, ExtendAllocatesWholeBlocks) {
  auto pool = MakePool(8);
  BlockTable t(pool.get());
  ASSERT_TRUE(t.Extend(1).ok());
  EXPECT_EQ(t.blocks().size(), 1u);
  ASSERT_TRUE(t.Extend(kBlockTokens).ok());
  EXPECT_EQ(t.blocks().size(), 1u);
  ASSERT_TRUE(t.Extend(kBlockTokens + 1).ok());
  EXPECT_EQ(t.blocks().size(), 2u);
  EXPECT_EQ(t.num_tokens(), kBlockTokens + 1);
  EXPECT_EQ(pool->num_free_blocks(), 6);
  EXPECT_EQ(t.Extend(2).code(), absl::StatusCode::kInvalidArgument);
  WritePositions(t, 1, 0, t.num_tokens());
  ExpectPositions(t, 1, 0, t.num_tokens());
}

TEST(BlockTableTest, ExhaustionChangesNothing) {
  auto pool = MakePool(3);
  BlockTable t(pool.get());
  ASSERT_TRUE(t.Extend(5).ok());
  WritePositions(t, 1, 0, 5);
  const std::vector<int32_t> before(t.blocks().begin(), t.blocks().end());
  EXPECT_EQ(t.Extend(4 * kBlockTokens).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t.num_tokens(), 5);
  EXPECT_EQ(std::vector<int32_t>(t.blocks().begin(), t.blocks().end()), before);
  EXPECT_EQ(pool->num_free_blocks(), 1);
  ExpectPositions(t, 1, 0, 5);
  // Exactly filling the pool still works.
  ASSERT_TRUE(t.Extend(3 * kBlockTokens).ok());
  EXPECT_EQ(pool->num_free_blocks(), 0);
}

TEST(BlockTableTest, CopyOnWriteKeepsTheOtherSequence) {
  auto pool = MakePool(8);
  BlockTable a(pool.get());
  ASSERT_TRUE(a.Extend(6).ok());  // one full block, one half-full
  WritePositions(a, 1, 0, 6);
  BlockTable b = a.Fork();
  EXPECT_EQ(pool->num_shared_blocks(), 2);
  EXPECT_EQ(pool->num_free_blocks(), 6);

  ASSERT_TRUE(b.Extend(7).ok());
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);  // full block stays shared
  EXPECT_NE(b.blocks()[1], a.blocks()[1]);  // partial block copied
  EXPECT_EQ(pool->RefCount(a.blocks()[1]), 1);
  EXPECT_EQ(pool->RefCount(b.blocks()[1]), 1);
  EXPECT_EQ(pool->RefCount(a.blocks()[0]), 2);
  ExpectPositions(b, 1, 0, 6);  // the copy carries the shared prefix
  WritePositions(b, 2, 6, 7);
  ExpectPositions(b, 2, 6, 7);
  ExpectPositions(a, 1, 0, 6);

  // The original also gets its own block when it grows.
  ASSERT_TRUE(a.Extend(8).ok());
  WritePositions(a, 3, 6, 8);
  ExpectPositions(a, 3, 6, 8);
  ExpectPositions(b, 1, 0, 6);
  ExpectPositions(b, 2, 6, 7);
}

TEST(BlockTableTest, CopyOnWriteNeedsABlockAndFailsCleanly) {
  auto pool = MakePool(2);
  BlockTable a(pool.get());
  ASSERT_TRUE(a.Extend(2).ok());
  WritePositions(a, 1, 0, 2);
  BlockTable b = a.Fork();
  BlockTable filler(pool.get());
  ASSERT_TRUE(filler.Extend(1).ok());
  EXPECT_EQ(b.Extend(3).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(b.num_tokens(), 2);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(pool->RefCount(a.blocks()[0]), 2);
  filler.Clear();
  ASSERT_TRUE(b.Extend(3).ok());
  EXPECT_NE(b.blocks()[0], a.blocks()[0]);
  ExpectPositions(b, 1, 0, 2);
}

TEST(BlockTableTest, TruncateForkClearReturnEveryBlock) {
  auto pool = MakePool(16);
  {
    BlockTable a(pool.get());
    ASSERT_TRUE(a.Extend(11).ok());
    WritePositions(a, 1, 0, 11);
    BlockTable b = a.Fork();
    BlockTable c = b.Fork();
    EXPECT_EQ(pool->num_free_blocks(), 13);
    b.Truncate(5);
    EXPECT_EQ(b.blocks().size(), 2u);
    EXPECT_EQ(b.num_tokens(), 5);
    ASSERT_TRUE(b.Extend(9).ok());  // COW of block 1, then a new block
    WritePositions(b, 2, 5, 9);
    ExpectPositions(a, 1, 0, 11);
    ExpectPositions(c, 1, 0, 11);
    ExpectPositions(b, 1, 0, 5);
    ExpectPositions(b, 2, 5, 9);
    c.Truncate(0);
    EXPECT_TRUE(c.blocks().empty());
    BlockTable moved = std::move(b);
    EXPECT_EQ(b.num_tokens(), 0);
    EXPECT_EQ(moved.num_tokens(), 9);
    a.Clear();
    EXPECT_EQ(a.num_tokens(), 0);
    EXPECT_EQ(pool->num_free_blocks(), 16 - 3);
  }
  EXPECT_EQ(pool->num_free_blocks(), 16);
  EXPECT_EQ(pool->num_shared_blocks(), 0);
  EXPECT_EQ(pool->used_bytes(), 0);
}

// Gives each of t's blocks a hash (as the prefix cache names full blocks).
void HashBlocks(BlockTable& t, uint64_t first) {
  for (int32_t b : t.blocks()) t.pool()->SetBlockHash(b, first++);
}

TEST(BlockTableTest, ExtendCountsCachedBlocksAsAvailable) {
  auto pool = MakePool(4);
  std::vector<int32_t> evicted;
  pool->SetEvictionListener(
      [&](int32_t block, uint64_t) { evicted.push_back(block); });
  BlockTable live(pool.get());
  ASSERT_TRUE(live.Extend(kBlockTokens).ok());
  {
    BlockTable gone(pool.get());
    ASSERT_TRUE(gone.Extend(3 * kBlockTokens).ok());
    HashBlocks(gone, 1);
  }
  ASSERT_EQ(pool->num_free_blocks(), 0);
  ASSERT_EQ(pool->num_cached_blocks(), 3);
  // More than free + cached: refused, and no cached block is given up.
  BlockTable t(pool.get());
  EXPECT_EQ(t.Extend(4 * kBlockTokens).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(pool->num_cached_blocks(), 3);
  EXPECT_TRUE(evicted.empty());
  // Within free + cached: granted from the cached blocks.
  ASSERT_TRUE(t.Extend(3 * kBlockTokens).ok());
  EXPECT_EQ(pool->num_cached_blocks(), 0);
  EXPECT_EQ(evicted.size(), 3u);
  EXPECT_EQ(pool->num_used_blocks(), 4);
  WritePositions(t, 2, 0, t.num_tokens());
  ExpectPositions(t, 2, 0, t.num_tokens());
  EXPECT_EQ(live.num_tokens(), kBlockTokens);
}

TEST(BlockTableTest, CopyOnWriteMayUseACachedBlock) {
  auto pool = MakePool(3);
  BlockTable a(pool.get());
  ASSERT_TRUE(a.Extend(2).ok());
  WritePositions(a, 1, 0, 2);
  BlockTable b = a.Fork();
  {
    BlockTable gone(pool.get());
    ASSERT_TRUE(gone.Extend(2 * kBlockTokens).ok());
    HashBlocks(gone, 1);
  }
  ASSERT_EQ(pool->num_free_blocks(), 0);
  ASSERT_TRUE(b.Extend(3).ok());
  EXPECT_NE(b.blocks()[0], a.blocks()[0]);
  EXPECT_EQ(pool->num_cached_blocks(), 1);
  ExpectPositions(b, 1, 0, 2);
}

TEST(BlockTableTest, ReleasedBlocksAreCachedLastPositionFirst) {
  auto pool = MakePool(3);
  BlockTable a(pool.get());
  ASSERT_TRUE(a.Extend(3 * kBlockTokens).ok());
  HashBlocks(a, 1);
  const std::vector<int32_t> blocks(a.blocks().begin(), a.blocks().end());
  a.Clear();
  ASSERT_EQ(pool->num_cached_blocks(), 3);
  // The pool reuses the tail of the released prefix first, its head last.
  for (int i = 2; i >= 0; --i) EXPECT_EQ(*pool->Allocate(), blocks[i]) << i;
}

TEST(BlockTableTest, AdoptTakesOwnership) {
  auto pool = MakePool(4);
  std::vector<int32_t> blocks;
  for (int i = 0; i < 2; ++i) blocks.push_back(*pool->Allocate());
  {
    BlockTable t(pool.get());
    t.Adopt(blocks, 6);
    EXPECT_EQ(t.num_tokens(), 6);
    WritePositions(t, 1, 0, 6);
    ExpectPositions(t, 1, 0, 6);
  }
  EXPECT_EQ(pool->num_free_blocks(), 4);
}

TEST(BlockTableTest, Bf16IsRoundedToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between odd 1+2^-7 and even 1+2^-6.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)),
            0x3f81);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_TRUE(std::isnan(
      Bf16ToFloat(FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));

  auto pool = MakePool(2, DType::kBF16);
  BlockTable t(pool.get());
  ASSERT_TRUE(t.Extend(3).ok());
  float k[kKvHeads * kHeadDim], v[kKvHeads * kHeadDim];
  for (int i = 0; i < kKvHeads * kHeadDim; ++i) {
    k[i] = 1.0f + std::ldexp(1.0f, -8) * (i + 1);
    v[i] = -0.1f * i;
  }
  t.WriteKv(1, 2, k, v);
  const uint16_t* kb =
      static_cast<const uint16_t*>(pool->KeyBlock(1, t.blocks()[0]));
  const uint16_t* vb =
      static_cast<const uint16_t*>(pool->ValueBlock(1, t.blocks()[0]));
  for (int h = 0; h < kKvHeads; ++h) {
    for (int d = 0; d < kHeadDim; ++d) {
      const int64_t at = (h * kBlockTokens + 2) * kHeadDim + d;
      EXPECT_EQ(kb[at], FloatToBf16(k[h * kHeadDim + d]));
      EXPECT_EQ(vb[at], FloatToBf16(v[h * kHeadDim + d]));
      EXPECT_NEAR(Bf16ToFloat(kb[at]), k[h * kHeadDim + d], 1.0f / 128);
    }
  }
}

// A q8_0 / q4_0 pool quantizes each head's row by blocks of 32 when a
// position is written, by ggml's rule (computed here in double): per block
// a scale d (q8_0: amax / 127; q4_0: the value of largest magnitude / -8),
// kept as f16, and levels q = round(x / d) (q8_0) or
// min(15, floor(x / d + 8.5)) (q4_0) from the unrounded d; x is read back
// as f16(d) · q (q8_0) or f16(d) · (q − 8) (q4_0).
TEST(BlockTableTest, QuantizedPoolsStoreGgmlsBlocksOf32) {
  constexpr int kDim = 64;
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    BlockPoolOptions o;
    o.n_layers = 1;
    o.n_kv_heads = 2;
    o.head_dim = kDim;
    o.block_tokens = 4;
    o.dtype = dtype;
    o.capacity_bytes = 1 << 16;
    std::unique_ptr<BlockPool> pool = *BlockPool::Create(o);
    BlockTable t(pool.get());
    ASSERT_TRUE(t.Extend(3).ok());
    std::vector<double> x(2 * kDim);
    std::vector<float> k(2 * kDim), v(2 * kDim);
    for (int i = 0; i < 2 * kDim; ++i) {
      x[i] = std::sin(0.7 * i) * (1 + i % 5) + (i == 40 ? -9.0 : 0.0);
      k[i] = static_cast<float>(x[i]);
      v[i] = -k[i];
    }
    t.WriteKv(0, 2, k.data(), v.data());
    const int64_t block_bytes = dtype == DType::kQ8_0 ? 34 : 18;
    for (int h = 0; h < 2; ++h) {
      std::vector<char> row(DTypeRowBytes(dtype, kDim));
      ReadKvRowAt(dtype,
                  static_cast<const char*>(pool->KeyBlock(0, t.blocks()[0])) +
                      pool->GroupOffset(h),
                  kDim, 4, 2, row.data());
      const char* stored = row.data();
      std::vector<float> back(kDim);
      LoadKvRow(dtype, stored, kDim, back.data());
      for (int b = 0; b < kDim / 32; ++b) {
        const double* xb = &x[h * kDim + b * 32];
        double amax = 0, extreme = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::abs(xb[j]) > amax) extreme = xb[j];
          amax = std::max(amax, std::abs(xb[j]));
        }
        const double d = dtype == DType::kQ8_0 ? amax / 127 : extreme / -8;
        uint16_t bits;
        std::memcpy(&bits, stored + b * block_bytes, 2);
        const double d16 = Fp16ToFloat(bits);
        EXPECT_NEAR(d16, d, std::abs(d) * 1e-3) << b;
        for (int j = 0; j < 32; ++j) {
          const double want =
              dtype == DType::kQ8_0
                  ? d16 * std::round(xb[j] / d)
                  : d16 * (std::min(15.0, std::floor(xb[j] / d + 8.5)) - 8);
          EXPECT_NEAR(back[b * 32 + j], want, 1e-5)
              << DTypeName(dtype) << " head " << h << " element " << b * 32 + j
              << " of " << xb[j];
        }
      }
    }
  }
}

// A group keeps a block type's rows as two planes: every position's codes,
// then the f16 scales block by block ([head_dim / 32][block_tokens]), so a
// kernel loads 16 positions' scales of a block at once; the rows read back
// as written.
TEST(BlockTableTest, QuantizedGroupsKeepCodesThenScalesByBlock) {
  constexpr int kDim = 64;
  constexpr int kBt = 5;
  for (DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
    const int64_t row_bytes = DTypeRowBytes(dtype, kDim);
    const int64_t code_bytes = dtype == DType::kQ8_0 ? 32 : 16;  // per block
    ASSERT_EQ(KvCodeBytes(dtype, kDim), 2 * code_bytes);
    ASSERT_EQ(KvScalesOffset(dtype, kDim, kBt), kBt * 2 * code_bytes);
    std::vector<char> group(kBt * row_bytes, 0);
    std::vector<std::vector<char>> rows;
    for (int slot = 0; slot < kBt; ++slot) {
      std::vector<float> x(kDim);
      for (int i = 0; i < kDim; ++i) {
        x[i] = std::sin(0.3 * i + slot) * (1 + slot + (i >= 32 ? 4 : 0));
      }
      rows.emplace_back(row_bytes);
      StoreKvRow(dtype, x.data(), kDim, rows.back().data());
      StoreKvRowAt(dtype, x.data(), kDim, kBt, slot, group.data());
    }
    for (int slot = 0; slot < kBt; ++slot) {
      const char* row = rows[slot].data();
      for (int b = 0; b < 2; ++b) {
        const char* blk = row + b * (2 + code_bytes);
        EXPECT_EQ(std::memcmp(group.data() + KvScalesOffset(dtype, kDim, kBt) +
                                  (b * kBt + slot) * 2,
                              blk, 2),
                  0)
            << DTypeName(dtype) << " slot " << slot << " block " << b;
        EXPECT_EQ(
            std::memcmp(group.data() + slot * 2 * code_bytes + b * code_bytes,
                        blk + 2, code_bytes),
            0)
            << DTypeName(dtype) << " slot " << slot << " block " << b;
      }
      std::vector<char> back(row_bytes);
      ReadKvRowAt(dtype, group.data(), kDim, kBt, slot, back.data());
      EXPECT_EQ(back, rows[slot]) << DTypeName(dtype) << " slot " << slot;
      std::vector<float> want(kDim), got(kDim);
      LoadKvRow(dtype, row, kDim, want.data());
      LoadKvRowAt(dtype, group.data(), kDim, kBt, slot, got.data());
      EXPECT_EQ(got, want) << DTypeName(dtype) << " slot " << slot;
    }
  }
}

}  // namespace
}  // namespace kvserve
