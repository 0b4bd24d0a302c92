// LlamaExpf (ggml_v_expf's approximation, which the attention over an f32
// cache and the SwiGLU use to compute llama.cpp's values to the bit)
// against e^x in double: within 2 ulp over the range the softmax feeds it
// (x <= 0) and beyond, and its special values.
#include "core/util/llama_math.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

TEST(LlamaExpf, WithinTwoUlpOfExp) {
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    const float got = LlamaExpf(x);
    const double ulp = std::nextafter(static_cast<float>(want), INFINITY) -
                       static_cast<float>(want);
    const double err = std::fabs(got - want) / ulp;
    worst = std::max(worst, err);
    ASSERT_LE(err, 2.0) << "x " << x << ": " << got << " vs " << want;
  }
  // The approximation is not exact anywhere near: it is not libm's expf.
  EXPECT_GT(worst, 0.5);
}

TEST(LlamaExpf, SpecialValues) {
  EXPECT_EQ(LlamaExpf(0.0f), 1.0f);
  EXPECT_EQ(LlamaExpf(-0.0f), 1.0f);
  // Masked scores: -inf - max.
  EXPECT_EQ(LlamaExpf(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(LlamaExpf(-200.0f), 0.0f);
  EXPECT_EQ(LlamaExpf(200.0f), std::numeric_limits<float>::infinity());
  // Beyond |n| > 126 (the two-factor scale): still within 2 ulp.
  for (const float x : {-88.5f, -95.0f, 88.5f}) {
    const double want = std::exp(static_cast<double>(x));
    const float got = LlamaExpf(x);
    if (want < std::numeric_limits<float>::min()) {
      EXPECT_NEAR(got, want, std::numeric_limits<float>::denorm_min() * 2) << x;
    } else {
      EXPECT_NEAR(got, want, want * 2.5e-7) << x;
    }
  }
}

}  // namespace
}  // namespace kvserve
