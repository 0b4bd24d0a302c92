// Linear (single and fused weights, f32 and bf16) against a plain
// double-precision y = x Wᵀ, for row counts that hit oneDNN's tails.
#include "core/dnnl/linear.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dnnl/context.h"
#include "core/quant/activation.h"
#include "core/quant/quant.h"
#include "core/util/bf16.h"
#include "core/util/cpu_features.h"
#include "core/util/dtype.h"
#include "core/util/fp16.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/sanitizers.h"

namespace kvserve {
namespace {

// A [rows][cols] matrix stored as `type` (f32, f16 or bf16) with values
// ~ U(-1, 1) / sqrt(cols).
struct Matrix {
  Matrix(quant::Type type, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
    values.resize(rows * cols);
    for (float& v : values) v = u(rng) * scale;
    tensor.type = type;
    tensor.rows = rows;
    tensor.cols = cols;
    if (type == quant::Type::kF32) {
      tensor.data = values.data();
      return;
    }
    halves.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      halves[i] = type == quant::Type::kBF16 ? FloatToBf16(values[i])
                                             : FloatToFp16(values[i]);
      // The reference sees the weights as stored.
      values[i] = type == quant::Type::kBF16 ? Bf16ToFloat(halves[i])
                                             : Fp16ToFloat(halves[i]);
    }
    tensor.data = halves.data();
  }
  Matrix(DType dtype, int64_t rows, int64_t cols, uint32_t seed)
      : Matrix(dtype == DType::kF32 ? quant::Type::kF32 : quant::Type::kBF16,
               rows, cols, seed) {}
  std::vector<float> values;
  std::vector<uint16_t> halves;
  WeightTensor tensor;
};

std::vector<float> RandomInput(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(m * k);
  for (float& v : x) v = g(rng);
  return x;
}

// x as a matrix stored as `type` multiplies it: rounded to f16 or bf16
// (oneDNN's bf16 matmul reads bf16; our kernels round x as ggml does).
double AsMultiplied(quant::Type type, float x) {
  if (type == quant::Type::kBF16) return Bf16ToFloat(FloatToBf16(x));
  if (type == quant::Type::kF16) return Fp16ToFloat(FloatToFp16(x));
  return x;
}

// Whether ExpectMatches computes row r of m. Under a sanitizer, which looks
// for memory errors and not at the numbers, a sample: the first 8 rows
// (the Gemv kernels' tiles), every 16th and the last 2, so a 513-row
// product costs 42 rows of reference instead of 513 (the double reference
// was 90 s of linear_test under ASan). The other rows must still be
// written: finite, never the NaN y starts as.
bool ReferenceRow(int64_t r, int64_t m) {
  return !testing::kSanitizer || r < 8 || r % 16 == 0 || r >= m - 2;
}

// Checks y [m][n] against x Wᵀ in double, with W = the matrices stacked
// along n, each reading x as AsMultiplied.
void ExpectMatches(const std::vector<const Matrix*>& ws,
                   const std::vector<float>& x, int64_t m, int64_t k,
                   const std::vector<float>& y) {
  int64_t n = 0;
  for (const Matrix* w : ws) n += w->tensor.rows;
  int bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    if (!ReferenceRow(r, m)) {
      for (int64_t j = 0; j < n; ++j) {
        if (!std::isfinite(y[r * n + j]) && ++bad <= 5) {
          ADD_FAILURE() << "y[" << r << "][" << j << "] = " << y[r * n + j];
        }
      }
      continue;
    }
    int64_t col = 0;
    for (const Matrix* w : ws) {
      for (int64_t j = 0; j < w->tensor.rows; ++j, ++col) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double p =
              AsMultiplied(w->tensor.type, x[r * k + i]) * w->values[j * k + i];
          ref += p;
          mag += std::abs(p);
        }
        // f32 accumulation of k products of this magnitude.
        const double tol =
            1e-6 + 4e-6 * std::sqrt(static_cast<double>(k)) * mag;
        const double got = y[r * n + col];
        if (!(std::abs(got - ref) <= tol) && ++bad <= 5) {
          ADD_FAILURE() << "y[" << r << "][" << col << "] = " << got
                        << ", reference " << ref << " (tolerance " << tol
                        << ")";
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << m * n << " outputs";
}

// Declares `var`, a Linear over `weights` probed up to 513 rows; skips the
// test when this CPU (under KVSERVE_MAX_ISA) cannot compute the dtype.
#define MAKE_LINEAR_OR_SKIP(var, weights)                             \
  auto var##_or = Linear::Create(weights, {.max_rows = 513});         \
  if (var##_or.status().code() == absl::StatusCode::kUnimplemented) { \
    GTEST_SKIP() << "not on this CPU (" << CpuSummary()               \
                 << "): " << var##_or.status();                       \
  }                                                                   \
  ASSERT_TRUE(var##_or.ok()) << var##_or.status();                    \
  Linear& var = **var##_or

struct Case {
  DType dtype;
  int64_t n, k;
};

class LinearTest : public ::testing::TestWithParam<Case> {};

TEST_P(LinearTest, MatchesDoubleReferenceForEveryRowCount) {
  const Case c = GetParam();
  Matrix w(c.dtype, c.n, c.k, 7);
  MAKE_LINEAR_OR_SKIP(linear, w.tensor);
  EXPECT_EQ(linear.in_features(), c.k);
  EXPECT_EQ(linear.out_features(), c.n);
  // Each m twice, interleaved, so cached primitives are reused; 100 and
  // 513 run padded (linear_internal::PrimitiveRows), 112 on 100's primitive.
  for (int pass = 0; pass < 2; ++pass) {
    for (int64_t m : {1, 3, 64, 100, 112, 513}) {
      SCOPED_TRACE(::testing::Message() << "m=" << m << " pass " << pass);
      const std::vector<float> x = RandomInput(m, c.k, 100 + m + pass);
      std::vector<float> y(m * c.n, std::numeric_limits<float>::quiet_NaN());
      ASSERT_TRUE(linear.Forward(x.data(), m, y.data()).ok());
      ExpectMatches({&w}, x, m, c.k, y);
    }
  }
}

TEST_P(LinearTest, FusedWeightsGiveEachMatrixsOutputSideBySide) {
  const Case c = GetParam();
  Matrix a(c.dtype, c.n, c.k, 1), b(c.dtype, 5, c.k, 2),
      d(c.dtype, c.n + 17, c.k, 3);
  const std::vector<WeightTensor> parts = {a.tensor, b.tensor, d.tensor};
  MAKE_LINEAR_OR_SKIP(linear, parts);
  EXPECT_EQ(linear.out_features(), 2 * c.n + 22);
  // The stacked copy is Linear's own: the sources may go away.
  a.values.assign(a.values.size(), 0.0f);
  for (int64_t m : {1, 3, 64, 513}) {
    SCOPED_TRACE(::testing::Message() << "m=" << m);
    const std::vector<float> x = RandomInput(m, c.k, 200 + m);
    std::vector<float> y(m * linear.out_features(),
                         std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(linear.Forward(x.data(), m, y.data()).ok());
    Matrix a_again(c.dtype, c.n, c.k, 1);
    ExpectMatches({&a_again, &b, &d}, x, m, c.k, y);
  }
}

// Each matrix of a mixed stack reads x its own way: f32 as is, f16 and
// bf16 rounded to their type (as ggml's CPU backend converts activations),
// in the Gemv kernels (m <= 8) and in the dequantized panels alike.
TEST(LinearMixedTest, MixedTypesRunInTheirOwnFormats) {
  Matrix a(quant::Type::kF32, 33, 65, 4), b(quant::Type::kBF16, 31, 65, 5),
      c(quant::Type::kF16, 17, 65, 6);
  const std::vector<WeightTensor> parts = {a.tensor, b.tensor, c.tensor};
  MAKE_LINEAR_OR_SKIP(linear, parts);
  EXPECT_THAT(linear.Describe(), ::testing::HasSubstr("blocks"));
  for (int64_t m : {1, 3, 64, 513}) {
    SCOPED_TRACE(::testing::Message() << "m=" << m);
    std::vector<float> x = RandomInput(m, 65, 300 + m);
    // Values that tell the three ways apart, so a matrix reading x any
    // other way fails the reference: 1 + 2^-12 is f32-exact and rounds to
    // 1 in f16 and bf16; 1 + 2^-10 is f16-exact and rounds to 1 in bf16;
    // 70000 overflows f16 only.
    x[0] = 1.0f + 0x1p-12f;
    x[1] = 1.0f + 0x1p-10f;
    x[3] = 70000.0f;
    std::vector<float> y(m * 81, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(linear.Forward(x.data(), m, y.data()).ok());
    // f16 overflow: c's outputs of row 0 are ±inf, as in ggml.
    for (int64_t j = 64; j < 81; ++j) EXPECT_TRUE(std::isinf(y[j])) << j;
    x[3] = 7.0f;
    ASSERT_TRUE(linear.Forward(x.data(), m, y.data()).ok());
    ExpectMatches({&a, &b, &c}, x, m, 65, y);
  }
}

// A quantized matrix stored as `type`: random rows quantized with the
// type's reference quantizer; `values` its dequantized weights.
struct QuantMatrix {
  QuantMatrix(quant::Type type, int64_t rows, int64_t cols, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> f(rows * cols);
    for (float& v : f) v = g(rng) / std::sqrt(static_cast<float>(cols));
    const quant::TypeInfo& info = *quant::Info(type);
    const int64_t row_bytes = quant::RowBytes(type, cols);
    bytes.resize(rows * row_bytes);
    values.resize(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      info.quantize(&f[r * cols], &bytes[r * row_bytes], cols);
      info.dequantize(&bytes[r * row_bytes], &values[r * cols], cols);
    }
    tensor = {.type = type, .rows = rows, .cols = cols, .data = bytes.data()};
  }
  std::vector<uint8_t> bytes;
  std::vector<float> values;
  WeightTensor tensor;
};

// Outputs of y (m rows of the stack `parts` side by side) off the
// double-precision product of the weights as stored and x as the linear
// read it: quantized to each type's activation format (the int8 kernels),
// or as is (`panels`: the dequantized panels' sgemm). Reports the first 5.
int Mismatches(const std::vector<const QuantMatrix*>& parts,
               const std::vector<float>& x, int64_t m, int64_t k,
               const std::vector<float>& y, bool panels) {
  int64_t n = 0;
  for (const QuantMatrix* w : parts) n += w->tensor.rows;
  int bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    int64_t col = 0;
    for (const QuantMatrix* w : parts) {
      std::vector<float> xd(x.begin() + r * k, x.begin() + (r + 1) * k);
      if (!panels) {
        const quant::Type act = quant::Info(w->tensor.type)->act_type;
        std::vector<uint8_t> xq(quant::RowBytes(act, k));
        quant::QuantizeActivation(act, &x[r * k], k, xq.data());
        quant::Info(act)->dequantize(xq.data(), xd.data(), k);
      }
      for (int64_t j = 0; j < w->tensor.rows; ++j, ++col) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          ref += static_cast<double>(w->values[j * k + i]) * xd[i];
          mag += std::abs(static_cast<double>(w->values[j * k + i]) * xd[i]);
        }
        const double got = y[r * n + col];
        if (!(std::abs(got - ref) <= 1e-6 + 1e-5 * mag) && ++bad <= 5) {
          ADD_FAILURE() << "y[" << r << "][" << col << "] = " << got
                        << ", reference " << ref;
        }
      }
    }
  }
  return bad;
}

// The int8 kernels take every row count for most quantized types (Q8_0,
// Q4_K here: DefaultGemvMaxRows), in activation tiles of 8 and calls of
// 64 rows: each output is the double-precision product of the weights as
// stored and its activation row as the kernels read it (quantized to the
// type's activation format), across tile and chunk boundaries.
TEST(LinearQuantizedTest, Int8KernelsTakeEveryRowCount) {
  constexpr int64_t k = 512;
  QuantMatrix a(quant::Type::kQ4_K, 40, k, 11),
      b(quant::Type::kQ8_0, 24, k, 12);
  const std::vector<WeightTensor> parts = {a.tensor, b.tensor};
  MAKE_LINEAR_OR_SKIP(linear, parts);
  for (int64_t m : {1, 5, 9, 64, 65, 130}) {
    SCOPED_TRACE(::testing::Message() << "m=" << m);
    const std::vector<float> x = RandomInput(m, k, 500 + m);
    std::vector<float> y(m * 64, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(linear.Forward(x.data(), m, y.data()).ok());
    EXPECT_EQ(Mismatches({&a, &b}, x, m, k, y, false), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, LinearTest,
    ::testing::Values(Case{DType::kF32, 37, 29}, Case{DType::kF32, 259, 1001},
                      Case{DType::kF32, 1, 7}, Case{DType::kBF16, 37, 29},
                      Case{DType::kBF16, 259, 1001}, Case{DType::kBF16, 1, 7},
                      // >= 2 MiB: packed on huge pages.
                      Case{DType::kF32, 1031, 517},
                      Case{DType::kBF16, 2053, 517}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(DTypeName(info.param.dtype)) + "_n" +
             std::to_string(info.param.n) + "_k" + std::to_string(info.param.k);
    });

// bf16 runs on every CPU: through oneDNN where it has bf16 matmuls, else
// through our kernels over the bf16 bytes (never widened).
// q4_0 matrices of a multiple of 8 rows are computed from a repacked copy
// (8 rows interleaved): here one starts at output 12 of the stack (its
// groups straddle the threads' row split), beside a q8_0 and a q3_K matrix
// whose 64-row limit sends 130 rows to the dequantized panels, which read
// the repacked rows too. The kernels take x quantized to q8_0 / q8_K, the
// panels x itself; each output is checked against the double-precision
// product of the weights as stored and x as it was read.
TEST(LinearQuantizedTest, RepackedQ4_0InAStackAndInPanels) {
  constexpr int64_t k = 256;
  QuantMatrix a(quant::Type::kQ8_0, 12, k, 21),
      b(quant::Type::kQ4_0, 24, k, 22), c(quant::Type::kQ3_K, 8, k, 23);
  const std::vector<uint8_t> b_bytes = b.bytes;
  const std::vector<WeightTensor> parts = {a.tensor, b.tensor, c.tensor};
  MAKE_LINEAR_OR_SKIP(linear, parts);
  EXPECT_EQ(b.bytes, b_bytes) << "the file's bytes are never written";
  for (int64_t m : {1, 3, 9, 64, 130}) {
    SCOPED_TRACE(::testing::Message() << "m=" << m);
    const std::vector<float> x = RandomInput(m, k, 700 + m);
    std::vector<float> y(m * 44, std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(linear.Forward(x.data(), m, y.data()).ok());
    EXPECT_EQ(Mismatches({&a, &b, &c}, x, m, k, y, m > 64), 0);
  }
}

TEST(LinearCreateTest, Bf16RunsOnEveryCpu) {
  Matrix w(DType::kBF16, 64, 128, 9);
  absl::StatusOr<std::unique_ptr<Linear>> l =
      Linear::Create(w.tensor, {.max_rows = 512});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(
      (*l)->Describe(),
      ::testing::HasSubstr(DnnlHasBf16Matmul() ? "onednn bf16" : "blocks bf16"))
      << CpuSummary();
  // A cap below AVX-512 leaves oneDNN without bf16, as on AVX2-only CPUs.
  if (EffectiveIsa() < IsaLevel::kAvx512) {
    EXPECT_FALSE(DnnlHasBf16Matmul());
  }
}

// A server's batches take every size up to max_batch_tokens; the
// primitives made for them must not (tests/soak saw ~200 KiB per size).
TEST(PrimitiveRowsTest, FewSizesLittlePaddingExactForDecode) {
  using linear_internal::PrimitiveRows;
  std::set<int64_t> sizes;
  for (int64_t m = 1; m <= 512; ++m) {
    const int64_t rows = PrimitiveRows(m);
    ASSERT_GE(rows, m);
    if (m <= 16) {
      EXPECT_EQ(rows, m);
    }
    if (m > 128) {
      EXPECT_LE(rows, m + m / 8) << m;
    }
    EXPECT_EQ(PrimitiveRows(rows), rows) << m;  // each size is its own
    sizes.insert(rows);
  }
  EXPECT_EQ(sizes.size(), 39u);
  for (int64_t m : {32, 64, 128, 256, 512, 1024}) {
    EXPECT_EQ(PrimitiveRows(m), m);
  }
  EXPECT_EQ(PrimitiveRows(17), 32);
  EXPECT_EQ(PrimitiveRows(129), 144);
  EXPECT_EQ(PrimitiveRows(513), 576);
}

TEST(LinearCreateTest, RejectsMismatchedColumns) {
  Matrix a(DType::kF32, 4, 8, 1), b(DType::kF32, 4, 9, 2);
  const std::vector<WeightTensor> parts = {a.tensor, b.tensor};
  EXPECT_EQ(Linear::Create(parts, {.max_rows = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConvertFloatToBf16Test, MatchesScalarRoundingIncludingSpecialValues) {
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          1.00390625f,   // exactly halfway, even below
                          1.01171875f,   // exactly halfway, odd below
                          1.0f + 1e-7f,  // not representable
                          3.4e38f,       // rounds to infinity
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::signaling_NaN()};
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000; ++i) {
    const uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, sizeof f);
    x.push_back(f);
  }
  std::vector<uint16_t> out(x.size());
  ConvertFloatToBf16(x.data(), x.size(), out.data());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(out[i], FloatToBf16(x[i])) << "x[" << i << "] = " << x[i];
  }
  EXPECT_EQ(FloatToBf16(1.00390625f), 0x3f80);  // ties to even: down
  EXPECT_EQ(FloatToBf16(1.01171875f), 0x3f82);  // ties to even: up
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(x[10]))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(x[11]))));
}

}  // namespace
}  // namespace kvserve
