#include "core/model/gguf_tensor.h"

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
  absl::StatusOr<WeightTensor> f = MaterializeTensor(src, DType::kF32, w);
  ASSERT_TRUE(f.ok()) << f.status();
  for (int i = 0; i < 64; ++i) {
    double want = (i < 32 ? 0.5 : -0.25) * q[i];
    ASSERT_EQ(f->f32()[i], want) << i;
  }
  absl::StatusOr<WeightTensor> b = MaterializeTensor(src, DType::kBF16, w);
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
  absl::StatusOr<WeightTensor> t = MaterializeTensor(src, DType::kF32, w);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->data, v.data());
  EXPECT_TRUE(w.storage.empty());
  // Misaligned f32 bytes are copied, not read through a bad pointer.
  std::string shifted(17, '\0');
  std::memcpy(shifted.data() + 1, v.data(), 16);
  src.data = reinterpret_cast<const uint8_t*>(shifted.data()) + 1;
  if (reinterpret_cast<uintptr_t>(src.data) % 4 != 0) {
    t = MaterializeTensor(src, DType::kF32, w);
    ASSERT_TRUE(t.ok());
    EXPECT_NE(static_cast<const void*>(t->data),
              static_cast<const void*>(src.data));
    EXPECT_EQ(t->f32()[2], 3.25f);
  }
}

TEST(GgufTensorTest, RejectsUnsupportedTypesAndSizes) {
  std::string bytes(18, '\0');
  StoredTensor src{"blk.0.attn_q.weight",
                   static_cast<uint32_t>(GgmlType::kQ4_0),
                   1,
                   32,
                   reinterpret_cast<const uint8_t*>(bytes.data()),
                   18};
  ModelWeights w;
  absl::StatusOr<WeightTensor> t = MaterializeTensor(src, DType::kBF16, w);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("blk.0.attn_q.weight"));
  EXPECT_THAT(t.status().message(), HasSubstr("Q4_0"));
  src.type = static_cast<uint32_t>(GgmlType::kF32);
  EXPECT_FALSE(MaterializeTensor(src, DType::kF32, w).ok());  // 18 != 128
}

TEST(GgufTensorTest, DtypeModes) {
  EXPECT_EQ(*ParseWeightDTypeMode("auto"), WeightDTypeMode::kAuto);
  EXPECT_FALSE(ParseWeightDTypeMode("fp16").ok());
  const auto f32 = static_cast<uint32_t>(GgmlType::kF32);
  const auto f16 = static_cast<uint32_t>(GgmlType::kF16);
  const auto q8 = static_cast<uint32_t>(GgmlType::kQ8_0);
  const auto bf16 = static_cast<uint32_t>(GgmlType::kBF16);
  using M = WeightDTypeMode;
  // With bf16 matmuls (AVX-512 BF16 machines).
  EXPECT_EQ(ComputeDType(f32, false, M::kAuto, true), DType::kF32);
  EXPECT_EQ(ComputeDType(f16, false, M::kAuto, true), DType::kF32);
  EXPECT_EQ(ComputeDType(bf16, false, M::kAuto, true), DType::kBF16);
  EXPECT_EQ(ComputeDType(q8, false, M::kAuto, true), DType::kBF16);
  EXPECT_EQ(ComputeDType(f16, true, M::kBF16, true), DType::kF32);
  EXPECT_EQ(ComputeDType(f32, false, M::kBF16, true), DType::kBF16);
  EXPECT_EQ(ComputeDType(q8, false, M::kF32, true), DType::kF32);
  // Without (AVX2): everything f32, whatever the mode.
  for (uint32_t t : {f32, f16, bf16, q8}) {
    for (M mode : {M::kAuto, M::kBF16, M::kF32}) {
      EXPECT_EQ(ComputeDType(t, false, mode, false), DType::kF32);
    }
  }
}

}  // namespace
}  // namespace kvserve
