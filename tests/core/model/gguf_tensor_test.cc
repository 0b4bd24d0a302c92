#include "core/model/gguf_tensor.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/util/bf16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

// Two Q8_0 blocks (2 rows of 32): scale d, then 32 int8 quants.
std::string Q8Blocks(const std::vector<float>& scales,
                     const std::vector<int8_t>& q) {
  std::string out;
  for (size_t b = 0; b < scales.size(); ++b) {
    uint16_t d = FloatToHalf(scales[b]);
    out.append(reinterpret_cast<const char*>(&d), 2);
    out.append(reinterpret_cast<const char*>(q.data() + 32 * b), 32);
  }
  return out;
}

TEST(GgufTensorTest, DequantizesQ8_0) {
  std::vector<int8_t> q(64);
  for (int i = 0; i < 64; ++i) q[i] = static_cast<int8_t>(i * 4 - 128);
  std::string bytes = Q8Blocks({0.5f, -0.25f}, q);
  StoredTensor src{
      "q8", static_cast<uint32_t>(GgmlType::kQ8_0),         2,
      32,   reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
  ModelWeights w;
  absl::StatusOr<WeightTensor> f = MaterializeTensor(src, quant::Type::kF32, w);
  ASSERT_TRUE(f.ok()) << f.status();
  for (int i = 0; i < 64; ++i) {
    double want = (i < 32 ? 0.5 : -0.25) * q[i];
    ASSERT_EQ(f->f32()[i], want) << i;
  }
  absl::StatusOr<WeightTensor> b =
      MaterializeTensor(src, quant::Type::kBF16, w);
  ASSERT_TRUE(b.ok());
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(Bf16ToFloat(static_cast<const uint16_t*>(b->data)[i]),
              f->f32()[i]);
  }
  EXPECT_EQ(w.storage.size(), 2u);  // two converted buffers kept alive
}

TEST(GgufTensorTest, ZeroCopyOnlyWhenTypesMatchAndAligned) {
  std::vector<float> v = {1.5f, -2.0f, 3.25f, 0.0f};
  StoredTensor src{"f", static_cast<uint32_t>(GgmlType::kF32),      1,
                   4,   reinterpret_cast<const uint8_t*>(v.data()), 16};
  ModelWeights w;
  absl::StatusOr<WeightTensor> t = MaterializeTensor(src, quant::Type::kF32, w);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data, v.data());
  EXPECT_TRUE(w.storage.empty());
  // Misaligned f32 bytes are copied, not read through a bad pointer.
  std::string shifted(17, '\0');
  std::memcpy(shifted.data() + 1, v.data(), 16);
  src.data = reinterpret_cast<const uint8_t*>(shifted.data()) + 1;
  if (reinterpret_cast<uintptr_t>(src.data) % 4 != 0) {
    t = MaterializeTensor(src, quant::Type::kF32, w);
    ASSERT_TRUE(t.ok());
    EXPECT_NE(static_cast<const void*>(t->data),
              static_cast<const void*>(src.data));
    EXPECT_EQ(t->f32()[2], 3.25f);
  }
}

TEST(GgufTensorTest, RejectsUnsupportedTypesAndSizes) {
  std::string bytes(18, '\0');
  StoredTensor src{"blk.0.attn_q.weight",
                   static_cast<uint32_t>(GgmlType::kQ8_1),  // activation-only
                   1,
                   32,
                   reinterpret_cast<const uint8_t*>(bytes.data()),
                   18};
  ModelWeights w;
  absl::StatusOr<WeightTensor> t =
      MaterializeTensor(src, quant::Type::kBF16, w);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(t.status().message(), HasSubstr("blk.0.attn_q.weight"));
  EXPECT_THAT(t.status().message(), HasSubstr("Q8_1"));
  EXPECT_THAT(t.status().message(), HasSubstr("Q4_K"));  // the supported list
  // Q4_0 holds 32 elements in 18 bytes: as stored, zero-copy.
  src.type = static_cast<uint32_t>(GgmlType::kQ4_0);
  t = MaterializeTensor(src, quant::Type::kQ4_0, w);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->data, src.data);
  // Rows that are not whole blocks, and sizes that do not match.
  src.cols = 16;
  EXPECT_EQ(MaterializeTensor(src, quant::Type::kQ4_0, w).status().code(),
            absl::StatusCode::kInvalidArgument);
  src.cols = 32;
  src.type = static_cast<uint32_t>(GgmlType::kF32);
  EXPECT_FALSE(MaterializeTensor(src, quant::Type::kF32, w).ok());  // 18 != 128
}

TEST(GgufTensorTest, DtypeModes) {
  EXPECT_EQ(*ParseWeightDTypeMode("auto"), WeightDTypeMode::kAuto);
  EXPECT_FALSE(ParseWeightDTypeMode("fp16").ok());
  const auto f32 = static_cast<uint32_t>(GgmlType::kF32);
  const auto f16 = static_cast<uint32_t>(GgmlType::kF16);
  const auto q4k = static_cast<uint32_t>(GgmlType::kQ4_K);
  using M = WeightDTypeMode;
  using T = quant::Type;
  EXPECT_EQ(HeldType(f32, false, M::kAuto), T::kF32);
  EXPECT_EQ(HeldType(f16, false, M::kAuto), T::kF16);  // never bf16
  EXPECT_EQ(HeldType(q4k, false, M::kAuto), T::kQ4_K);
  EXPECT_EQ(HeldType(f16, true, M::kBF16), T::kF32);  // vectors stay f32
  EXPECT_EQ(HeldType(f32, false, M::kBF16), T::kBF16);
  EXPECT_EQ(HeldType(q4k, false, M::kF32), T::kF32);
}

// For every block type, a half NaN or inf written at any even byte of a
// block makes the load fail exactly when it makes the block dequantize to a
// non-finite value: the check reads every scale, and nothing else.
TEST(GgufTensorTest, NonFiniteBlockScalesAreRejectedAndNothingElse) {
  const GgmlType types[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ5_0,
                            GgmlType::kQ5_1, GgmlType::kQ8_0, GgmlType::kIQ4_NL,
                            GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kQ4_K,
                            GgmlType::kQ5_K, GgmlType::kQ6_K};
  for (GgmlType type : types) {
    const quant::TypeInfo& info = *quant::Info(type);
    // Two rows of two blocks; block 3 (row 1) gets the bad half.
    const int64_t cols = 2 * info.block_elems;
    std::vector<float> values(2 * cols);
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] = std::sin(0.37 * i) * (1.0 + i % 7);
    }
    std::string good(2 * 2 * info.block_bytes, '\0');
    info.quantize(values.data(), good.data(), values.size());
    int rejected = 0;
    for (uint16_t bad : {uint16_t{0x7c00}, uint16_t{0xfe00}}) {
      for (int at = 0; at + 2 <= info.block_bytes; at += 2) {
        std::string bytes = good;
        std::memcpy(&bytes[3 * info.block_bytes + at], &bad, 2);
        std::vector<float> row(cols);
        info.dequantize(bytes.data() + 2 * info.block_bytes, row.data(), cols);
        bool finite = true;
        for (float x : row) finite = finite && std::isfinite(x);
        StoredTensor src{"t",
                         static_cast<uint32_t>(type),
                         2,
                         cols,
                         reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size()};
        ModelWeights w;
        absl::StatusOr<WeightTensor> t =
            MaterializeTensor(src, static_cast<quant::Type>(type), w);
        EXPECT_EQ(t.ok(), finite)
            << info.name << " half 0x" << std::hex << bad << " at byte "
            << std::dec << at << ": " << t.status();
        if (!t.ok()) {
          ++rejected;
          EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
          EXPECT_THAT(std::string(t.status().message()),
                      HasSubstr("block 3 (row 1, columns "));
        }
      }
    }
    EXPECT_GT(rejected, 0) << info.name;
  }
}

}  // namespace
}  // namespace kvserve
