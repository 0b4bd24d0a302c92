// Every quantized file in ../shared/models/quant served as stored (an f32
// KV cache as the goldens', llama.cpp's order: --numerics=llama) against
// the golden of an independent implementation (llama.cpp c392e50, f32 KV cache)
// in
// ../shared/golden/quant, with the issue's rule on every file: greedy
// tokens agree until the first disagreement, allowed only at a near tie
// (golden gap < 0.1), and at every compared step the top-5 logits relative
// to the top-1 are within 0.1 of the golden's (0.001 for the F32 file).
//
// The rule holds because the model computes llama.cpp's x86 float order
// (the goldens were made by its AVX2 build: built here, it reproduces all
// 14): the quantized kernels' sums (core/quant: the same bits at every ISA
// level), RoPE's f32 angles and fmas, SwiGLU's vector exp and the
// attention's order over an f32 cache (core/attention/llama_order.h).
// This synthetic model turns one flipped 8-bit activation rounding (after
// a 1-ulp difference upstream) into 0.1-0.3 of logit a few steps later, so
// nothing less does: with the previous kernels 8 of the 14 files met it.
// Measured (Zen 5; native, avx2 cap and scalar alike): 12 files equal the
// golden exactly over all 32 steps; F32 (oneDNN's sgemm order) within 4e-5,
// stories260K-q8_0 (its F16 ffn_down, in our float kernels' order at
// AVX-512) within 0.054. ctest runs this binary again under
// KVSERVE_MAX_ISA=avx2.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>

#include "core/kv/block_pool.h"
#include "core/model/loader.h"
#include "core/model/model.h"
#include "core/util/cpu_features.h"
#include "gtest/gtest.h"
#include "tests/testing/greedy_reference.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

LoadOptions ModelAt(const std::string& path) {
  LoadOptions o;
  o.model_path = path;
  return o;
}

// The issue's bound on logits and near ties.
constexpr double kIssueTol = 0.1;

// The worst |difference| of step `step`'s top-5 logits relative to the
// top-1 (the golden's ids looked up in our logits).
double StepDiff(const testing::ReferenceRun& ref, const testing::OurRun& ours,
                size_t step) {
  const std::vector<float>& l = ours.logits[step];
  const float top = *std::max_element(l.begin(), l.end());
  double worst = 0;
  for (const auto& [id, logit] : ref.top5[step]) {
    worst = std::max<double>(
        worst, std::abs((l[id] - top) - (logit - ref.top5[step][0].second)));
  }
  return worst;
}

// Our greedy run of the golden's prompt and length over a KV cache of
// `kv_dtype` (llama.cpp's attention order with `llama_order`).
testing::OurRun RunOver(const LoadedModel& files,
                        const testing::ReferenceRun& ref, DType kv_dtype,
                        bool llama_order) {
  const ModelConfig& c = files.weights->config;
  const int64_t n_ctx = ref.prompt.size() + ref.tokens.size() + 16;
  std::unique_ptr<BlockPool> pool = *BlockPool::Create(
      {.n_layers = c.n_layers,
       .n_kv_heads = c.n_kv_heads,
       .head_dim = c.head_dim,
       .block_tokens = 16,
       .dtype = kv_dtype,
       .capacity_bytes = n_ctx * c.KvBytesPerToken(kv_dtype)});
  absl::StatusOr<std::unique_ptr<Model>> m = Model::Create(
      files.weights.get(), pool.get(), {.llama_order = llama_order});
  if (!m.ok()) {
    testing::OurRun failed;
    failed.status = m.status();
    return failed;
  }
  return testing::RunGreedy(**m, pool.get(), ref.prompt, ref.tokens.size());
}

class QuantGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantGoldenTest, GreedyTokensAndTop5MatchTheGolden) {
  const std::string dir = kvserve::testing::SharedDir();
  const std::string model = dir + "/models/quant/" + GetParam() + ".gguf";
  const std::string golden = dir + "/golden/quant/" + GetParam() + ".json";
  if (!std::filesystem::exists(model) || !std::filesystem::exists(golden)) {
    GTEST_SKIP() << "needs " << model << " and " << golden;
  }
  std::optional<testing::ReferenceRun> ref = testing::ReadGoldenRun(golden);
  ASSERT_TRUE(ref.has_value()) << "cannot read " << golden;
  absl::StatusOr<LoadedModel> files = LoadModel(ModelAt(model));
  ASSERT_TRUE(files.ok()) << files.status();
  testing::OurRun ours = RunOver(*files, *ref, DType::kF32, true);
  ASSERT_TRUE(ours.status.ok()) << ours.status;
  const bool f32 = GetParam().ends_with("-f32");
  int compared = 0;
  ::testing::AssertionResult agrees = testing::AgreesWithReference(
      *ref, ours, f32 ? 1e-3 : kIssueTol, kIssueTol, &compared);
  EXPECT_TRUE(agrees) << GetParam() << " (" << files->weights->TypeSummary()
                      << ") on " << CpuSummary();
  // Step 0's logits are always compared; its token may be a near tie.
  EXPECT_TRUE(compared >= 1 || ref->gap[0] < kIssueTol) << compared;
  const double step0 = StepDiff(*ref, ours, 0);
  EXPECT_LE(step0, kIssueTol) << GetParam() << " on " << CpuSummary();
  std::printf("%s: %s; step 0 within %.3g\n", GetParam().c_str(),
              agrees.message(), step0);
}

INSTANTIATE_TEST_SUITE_P(
    Files, QuantGoldenTest,
    ::testing::Values("synth-small-f32", "synth-small-q8_0", "synth-small-q4_0",
                      "synth-small-q4_1", "synth-small-q5_0",
                      "synth-small-q5_1", "synth-small-iq4_nl",
                      "synth-small-q2_k", "synth-small-q3_k_s",
                      "synth-small-q4_k_s", "synth-small-q5_k_s",
                      "synth-small-q6_k", "stories260K-q8_0",
                      "stories260K-q4_0"),
    [](const auto& info) {
      std::string name = info.param;
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

// A quantized KV cache against the same goldens (llama.cpp's, f32 KV), in
// our own order (not --numerics=llama, which needs an f32 cache): one line
// per case, the tokens that agree and the worst top-5 difference up to the
// first that does not, against the golden and against our f32-KV run.
// These random-weight models turn any change of an activation into
// 0.1-0.3 of logit (see above: they pass the rule only in llama.cpp's
// exact order), so a KV cache of 8 bits (0.2-0.4% of an element) moves
// their logits by 0.1-0.7 and the issue's rule (tokens until a near tie,
// top-5 within 0.1) does not hold on them; it is reported here, and the
// arithmetic is held by FamilyTest.ForwardOverAQuantizedKvCacheMatches-
// TheReference. Asserted: q8_0's first token is the golden's.
class KvDtypeGoldenTest
    : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(KvDtypeGoldenTest, ReportsAgreementWithTheGolden) {
  const auto& [file, kv_dtype] = GetParam();
  const std::string dir = kvserve::testing::SharedDir();
  const std::string model = dir + "/models/quant/" + file + ".gguf";
  const std::string golden = dir + "/golden/quant/" + file + ".json";
  if (!std::filesystem::exists(model) || !std::filesystem::exists(golden)) {
    GTEST_SKIP() << "needs " << model << " and " << golden;
  }
  std::optional<testing::ReferenceRun> ref = testing::ReadGoldenRun(golden);
  ASSERT_TRUE(ref.has_value()) << "cannot read " << golden;
  absl::StatusOr<LoadedModel> files = LoadModel(ModelAt(model));
  ASSERT_TRUE(files.ok()) << files.status();
  const testing::OurRun ours = RunOver(*files, *ref, kv_dtype, false);
  ASSERT_TRUE(ours.status.ok()) << ours.status;
  const testing::OurRun f32 = RunOver(*files, *ref, DType::kF32, false);
  ASSERT_TRUE(f32.status.ok()) << f32.status;
  // Steps whose tokens agree, the first that does not (with the
  // reference's gap there), and the worst top-5 difference up to it.
  struct Agreement {
    int steps = 0;
    double gap = 0, worst = 0;
  };
  auto agreement = [&](const testing::ReferenceRun& r) {
    Agreement a;
    for (; a.steps < static_cast<int>(r.tokens.size()); ++a.steps) {
      const std::vector<float>& l = ours.logits[a.steps];
      const float top = *std::max_element(l.begin(), l.end());
      for (const auto& [id, logit] : r.top5[a.steps]) {
        a.worst = std::max<double>(
            a.worst,
            std::abs((l[id] - top) - (logit - r.top5[a.steps][0].second)));
      }
      if (ours.tokens[a.steps] != r.tokens[a.steps]) {
        a.gap = r.gap[a.steps];
        break;
      }
    }
    return a;
  };
  const Agreement golden_a = agreement(*ref);
  const Agreement f32_a = agreement(testing::AsReference(ref->prompt, f32));
  std::printf(
      "kv %s on %s: vs golden %d of %zu tokens agree (gap at the first "
      "other %.3f), worst top-5 %.4f; vs our f32 KV %d agree (gap %.3f), "
      "worst top-5 %.4f\n",
      std::string(DTypeName(kv_dtype)).c_str(), file.c_str(), golden_a.steps,
      ref->tokens.size(), golden_a.gap, golden_a.worst, f32_a.steps, f32_a.gap,
      f32_a.worst);
  if (kv_dtype == DType::kQ8_0) {
    EXPECT_TRUE(golden_a.steps >= 1 || ref->gap[0] < kIssueTol)
        << file << ": " << ours.tokens[0] << " vs " << ref->tokens[0];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Files, KvDtypeGoldenTest,
    ::testing::Combine(::testing::Values("synth-small-f32", "synth-small-q8_0",
                                         "synth-small-q4_0",
                                         "synth-small-q4_k_s",
                                         "synth-small-q6_k"),
                       ::testing::Values(DType::kQ8_0, DType::kQ4_0)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_kv_" +
                         std::string(DTypeName(std::get<1>(info.param)));
      for (char& ch : name) {
        if (ch == '-') ch = '_';
      }
      return name;
    });

}  // namespace
}  // namespace kvserve
