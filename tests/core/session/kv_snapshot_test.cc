#include "core/session/kv_snapshot.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/kv/kv_rows.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

class KvSnapshotTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    // The block types need whole blocks of 32 per head.
    head_dim_ = IsBlockQuantized(GetParam()) ? 32 : 4;
    options_ = {.n_layers = 2,
                .n_kv_heads = 2,
                .head_dim = head_dim_,
                .block_tokens = 4,
                .dtype = GetParam(),
                .capacity_bytes = 1 << 20};
    pool_ = *BlockPool::Create(options_);
    key_ = {.model_fingerprint = "abc",
            .dtype = GetParam(),
            .n_layers = 2,
            .n_kv_heads = 2,
            .head_dim = head_dim_};
  }

  // Position p, layer l, element i of K holds Value(l, p, i) (V its negation).
  static float Value(int l, int64_t p, int i) {
    return std::ldexp(1.0f + i % 7, l) + p * 0.25f;
  }

  BlockTable Filled(int64_t n) {
    BlockTable t(pool_.get());
    EXPECT_TRUE(t.Extend(n).ok());
    std::vector<float> k(2 * head_dim_), v(2 * head_dim_);
    for (int l = 0; l < 2; ++l) {
      for (int64_t p = 0; p < n; ++p) {
        for (int i = 0; i < 2 * head_dim_; ++i) v[i] = -(k[i] = Value(l, p, i));
        t.WriteKv(l, p, k.data(), v.data());
      }
    }
    return t;
  }

  // The stored bytes of K and V of head h at layer l, position p.
  std::string RowsOf(const BlockTable& t, int l, int64_t p, int h) {
    const DType dtype = GetParam();
    const int32_t block = t.blocks()[p / 4];
    std::string out;
    for (const void* base :
         {pool_->KeyBlock(l, block), pool_->ValueBlock(l, block)}) {
      std::string row(DTypeRowBytes(dtype, head_dim_), '\0');
      ReadKvRowAt(dtype, static_cast<const char*>(base) + pool_->GroupOffset(h),
                  head_dim_, 4, p % 4, row.data());
      out += row;
    }
    return out;
  }

  int head_dim_ = 0;
  BlockPoolOptions options_;
  std::unique_ptr<BlockPool> pool_;
  KvSnapshotKey key_;
  std::vector<int32_t> tokens_ = {1, 5, 9, 2, 7, 7, 3};
};

TEST_P(KvSnapshotTest, RoundTripsIntoAnotherTable) {
  BlockTable a = Filled(7);
  const std::string bytes = EncodeKvSnapshot(key_, tokens_, a);
  // The session has grown since: the snapshot still fits its prefix.
  std::vector<int32_t> longer = tokens_;
  longer.push_back(4);
  auto n = CheckKvSnapshot(bytes, key_, longer);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 7);
  BlockTable b(pool_.get());
  ASSERT_TRUE(b.Extend(6).ok());
  RestoreKvSnapshot(bytes, 0, 6, &b);
  // Every row comes back as it was stored (a quantized one is not
  // quantized again).
  for (int l = 0; l < 2; ++l) {
    for (int64_t p = 0; p < 6; ++p) {
      for (int h = 0; h < 2; ++h) {
        EXPECT_EQ(RowsOf(b, l, p, h), RowsOf(a, l, p, h)) << l << " " << p;
      }
    }
  }
}

TEST_P(KvSnapshotTest, RefusesAnotherModelOrDtype) {
  const std::string bytes = EncodeKvSnapshot(key_, tokens_, Filled(7));
  KvSnapshotKey other = key_;
  other.model_fingerprint = "def";
  auto n = CheckKvSnapshot(bytes, other, tokens_);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(n.status().message().find("model abc"), absl::string_view::npos);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    if (dtype == GetParam()) continue;
    other = key_;
    other.dtype = dtype;
    n = CheckKvSnapshot(bytes, other, tokens_);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(
        n.status().message().find("kv " + std::string(DTypeName(GetParam()))),
        absl::string_view::npos)
        << n.status();
  }
}

TEST_P(KvSnapshotTest, RefusesOtherTokens) {
  const std::string bytes = EncodeKvSnapshot(key_, tokens_, Filled(7));
  std::vector<int32_t> other = tokens_;
  other[3] = 8;
  EXPECT_EQ(CheckKvSnapshot(bytes, key_, other).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckKvSnapshot(bytes, key_, absl::MakeConstSpan(tokens_).first(5))
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(KvSnapshotTest, DetectsDamage) {
  const std::string bytes = EncodeKvSnapshot(key_, tokens_, Filled(7));
  for (size_t pos :
       {size_t{0}, size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    std::string damaged = bytes;
    damaged[pos] ^= 0x10;
    EXPECT_EQ(CheckKvSnapshot(damaged, key_, tokens_).status().code(),
              absl::StatusCode::kDataLoss)
        << pos;
  }
  for (size_t len : {size_t{0}, size_t{7}, bytes.size() - 9}) {
    EXPECT_EQ(
        CheckKvSnapshot(bytes.substr(0, len), key_, tokens_).status().code(),
        absl::StatusCode::kDataLoss)
        << len;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, KvSnapshotTest,
                         ::testing::Values(DType::kF32, DType::kBF16,
                                           DType::kQ8_0, DType::kQ4_0),
                         [](const auto& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace kvserve
