#include "core/sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/sanitizers.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

// Reference distribution: softmax(logits / T) in double, restricted to the
// `top_k` most likely ids (0: all), then to the smallest most-likely prefix
// with cumulative probability >= top_p (0: all), renormalised.
std::map<int32_t, double> ReferenceDistribution(
    const std::vector<float>& logits, double temperature, int top_k,
    double top_p) {
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  if (top_k > 0 && static_cast<size_t>(top_k) < ids.size()) ids.resize(top_k);
  const double max_logit = logits[ids[0]];
  std::vector<double> p;
  double sum = 0.0;
  for (int32_t id : ids) {
    p.push_back(std::exp((logits[id] - max_logit) / temperature));
    sum += p.back();
  }
  for (double& x : p) x /= sum;
  size_t keep = ids.size();
  if (top_p > 0.0 && top_p < 1.0) {
    double cumulative = 0.0;
    for (size_t i = 0; i < ids.size(); ++i) {
      cumulative += p[i];
      if (cumulative >= top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept_sum = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_sum += p[i];
  std::map<int32_t, double> dist;
  for (size_t i = 0; i < keep; ++i) dist[ids[i]] = p[i] / kept_sum;
  return dist;
}

// Draws `n` samples and checks that only ids of `expected` appear, at
// frequencies within 5 standard errors (plus a small slack).
void ExpectSamplesMatch(const SamplingOptions& options,
                        const std::vector<float>& logits,
                        const std::map<int32_t, double>& expected, int n) {
  Sampler sampler(options);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[sampler.Sample(logits)];
  for (const auto& [id, count] : counts) {
    EXPECT_TRUE(expected.count(id)) << "id " << id << " outside the support";
  }
  for (const auto& [id, p] : expected) {
    const double freq = static_cast<double>(counts[id]) / n;
    const double tolerance = 5.0 * std::sqrt(p * (1.0 - p) / n) + 1e-3;
    EXPECT_NEAR(freq, p, tolerance) << "id " << id;
  }
}

const std::vector<float> kLogits = {1.0f,  2.0f, 0.5f, 3.0f,
                                    -1.0f, 2.5f, 0.0f, 1.5f};

TEST(ValidateSamplingOptionsTest, AcceptsDefaultsAndBounds) {
  EXPECT_TRUE(ValidateSamplingOptions({}).ok());
  EXPECT_TRUE(
      ValidateSamplingOptions({.temperature = 2.0f, .top_k = 40, .top_p = 1.0f})
          .ok());
}

TEST(ValidateSamplingOptionsTest, RejectsOutOfRangeNamingFieldAndValue) {
  struct Case {
    SamplingOptions options;
    const char* field;
    const char* value;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Case cases[] = {
      {{.temperature = -0.5f}, "temperature", "-0.5"},
      {{.temperature = inf}, "temperature", "inf"},
      {{.temperature = nan}, "temperature", "nan"},
      {{.top_k = -3}, "top_k", "-3"},
      {{.top_p = -0.25f}, "top_p", "-0.25"},
      {{.top_p = 1.5f}, "top_p", "1.5"},
      {{.top_p = nan}, "top_p", "nan"},
      {{.min_p = -0.1f}, "min_p", "-0.1"},
      {{.min_p = 1.5f}, "min_p", "1.5"},
  };
  for (const Case& c : cases) {
    const absl::Status status = ValidateSamplingOptions(c.options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr(c.field));
    EXPECT_THAT(status.message(), HasSubstr(c.value));
  }
}

TEST(SamplerTest, GreedyPicksArgmax) {
  Sampler sampler({});
  EXPECT_EQ(sampler.Sample(kLogits), 3);
  EXPECT_EQ(sampler.Sample(std::vector<float>{-5.0f, -1.0f, -3.0f}), 1);
}

TEST(SamplerTest, GreedyTiesGoToLowestId) {
  Sampler sampler({});
  EXPECT_EQ(sampler.Sample(std::vector<float>{1.0f, 7.0f, 3.0f, 7.0f}), 1);
}

TEST(SamplerTest, NanLogitsAreNeverChosen) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {nan, 0.0f, nan, 0.1f};
  Sampler greedy({});
  EXPECT_EQ(greedy.Sample(logits), 3);
  Sampler sampler({.temperature = 1.0f, .seed = 1});
  for (int i = 0; i < 1000; ++i) {
    const int32_t id = sampler.Sample(logits);
    EXPECT_TRUE(id == 1 || id == 3) << id;
  }
}

TEST(SamplerTest, TopKOneIsGreedyAtAnyTemperature) {
  for (float temperature : {0.1f, 1.0f, 10.0f, 1000.0f}) {
    Sampler sampler({.temperature = temperature, .top_k = 1, .seed = 7});
    for (int i = 0; i < 200; ++i) ASSERT_EQ(sampler.Sample(kLogits), 3);
  }
}

std::vector<int32_t> SampleSequence(uint64_t seed, int n) {
  Sampler sampler({.temperature = 1.0f, .seed = seed});
  std::vector<float> flat(1000, 0.0f);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.Sample(flat));
  return out;
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentTokens) {
  EXPECT_EQ(SampleSequence(42, 64), SampleSequence(42, 64));
  EXPECT_NE(SampleSequence(42, 64), SampleSequence(43, 64));
}

TEST(SamplerTest, SeedIsReproducibleAcrossMachines) {
  // Golden: std::mt19937_64 is fully specified by the standard and the
  // uniform draw is our own, so these ids must never change. If they do,
  // every seeded client sees different text.
  const std::vector<int32_t> golden = {612, 794, 265, 334, 6, 140, 936, 566};
  EXPECT_EQ(SampleSequence(2024, 8), golden);
}

TEST(SamplerTest, TemperatureMatchesSoftmax) {
  const SamplingOptions options = {.temperature = 0.7f, .seed = 11};
  ExpectSamplesMatch(options, kLogits,
                     ReferenceDistribution(kLogits, 0.7, 0, 0.0), 200000);
}

TEST(SamplerTest, TopKRestrictsSupportAndRenormalises) {
  const SamplingOptions options = {.temperature = 1.3f, .top_k = 3, .seed = 5};
  const auto expected = ReferenceDistribution(kLogits, 1.3, 3, 0.0);
  ASSERT_EQ(expected.size(), 3u);
  ASSERT_TRUE(expected.count(3) && expected.count(5) && expected.count(1));
  ExpectSamplesMatch(options, kLogits, expected, 200000);
}

TEST(SamplerTest, TopPRestrictsSupportAndRenormalises) {
  const SamplingOptions options = {
      .temperature = 1.0f, .top_p = 0.8f, .seed = 9};
  const auto expected = ReferenceDistribution(kLogits, 1.0, 0, 0.8);
  ASSERT_LT(expected.size(), kLogits.size());
  ASSERT_GT(expected.size(), 1u);
  ExpectSamplesMatch(options, kLogits, expected, 200000);
}

// A mask (constrained decoding) restricts the draw to its tokens: the
// distribution is the reference over the allowed logits alone, top_k ranks
// among them, greedy takes the best allowed, and when every allowed logit
// is -inf the first allowed token is taken, never another.
TEST(SamplerTest, AMaskRestrictsTheDrawToItsTokens) {
  // Allowed: 0, 2, 4, 6 (the best token, 3, is not).
  const std::vector<uint64_t> mask = {0b01010101};
  std::vector<float> allowed_logits;
  for (int id : {0, 2, 4, 6}) allowed_logits.push_back(kLogits[id]);
  std::map<int32_t, double> expected;
  for (const auto& [i, p] :
       ReferenceDistribution(allowed_logits, 0.9, /*top_k=*/3, 0.0)) {
    expected[2 * i] = p;
  }
  Sampler sampler({.temperature = 0.9f, .top_k = 3, .seed = 3});
  std::map<int32_t, int> counts;
  constexpr int kN = 100000;
  for (int i = 0; i < kN; ++i) ++counts[sampler.Sample(kLogits, &mask)];
  for (const auto& [id, count] : counts) {
    EXPECT_TRUE(expected.count(id)) << "id " << id << " outside the mask";
  }
  for (const auto& [id, p] : expected) {
    const double freq = static_cast<double>(counts[id]) / kN;
    EXPECT_NEAR(freq, p, 5.0 * std::sqrt(p * (1.0 - p) / kN) + 1e-3);
  }
  Sampler greedy({});
  EXPECT_EQ(greedy.Sample(kLogits, &mask), 0);  // 1.0 is the best allowed
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> none = {3.0f, -inf, 2.0f, -inf};
  const std::vector<uint64_t> only_odd = {0b1010};
  EXPECT_EQ(greedy.Sample(none, &only_odd), 1);
  Sampler warm({.temperature = 1.0f, .seed = 1});
  EXPECT_EQ(warm.Sample(none, &only_odd), 1);
}

// min_p keeps the tokens whose probability before temperature is at least
// min_p times the largest: exp(logit - max) >= min_p.
TEST(SamplerTest, MinPKeepsTokensAsLikelyAsAFractionOfTheFirst) {
  const SamplingOptions options = {
      .temperature = 1.5f, .min_p = 0.2f, .seed = 21};
  std::vector<float> kept = kLogits;
  for (float& logit : kept) {
    if (std::exp(static_cast<double>(logit) - 3.0) < 0.2) {
      logit = -std::numeric_limits<float>::infinity();
    }
  }
  auto expected = ReferenceDistribution(kept, 1.5, 0, 0.0);
  for (auto it = expected.begin(); it != expected.end();) {
    it = it->second == 0.0 ? expected.erase(it) : std::next(it);
  }
  // Logits of at least 3 + ln 0.2 = 1.39: 3, 2.5, 2 and 1.5.
  ASSERT_EQ(expected.size(), 4u);
  ExpectSamplesMatch(options, kLogits, expected, 200000);
}

TEST(SamplerTest, TopPAppliesAfterTopK) {
  const SamplingOptions options = {
      .temperature = 2.0f, .top_k = 5, .top_p = 0.6f, .seed = 3};
  const auto expected = ReferenceDistribution(kLogits, 2.0, 5, 0.6);
  ASSERT_GT(expected.size(), 1u);
  ExpectSamplesMatch(options, kLogits, expected, 200000);
}

TEST(SamplerTest, TopPWithNucleusLargerThanSortThreshold) {
  // 512 distinct logits in [0, 8): the 0.7 nucleus has ~80 tokens, so the
  // mass quickselect runs before the final sort.
  std::vector<float> logits(512);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = static_cast<float>((i * 37) % 512) / 64.0f;
  }
  const SamplingOptions options = {
      .temperature = 1.0f, .top_p = 0.7f, .seed = 31};
  const auto expected = ReferenceDistribution(logits, 1.0, 0, 0.7);
  ASSERT_GT(expected.size(), 64u);
  ExpectSamplesMatch(options, logits, expected, 100000);
}

TEST(SamplerTest, TopPBoundaryThroughTiesKeepsLowestIds) {
  // 200 equal logits: the 0.5 nucleus is exactly ids 0..99.
  const std::vector<float> logits(200, 1.0f);
  Sampler sampler({.temperature = 1.0f, .top_p = 0.5f, .seed = 4});
  std::map<int32_t, int> counts;
  for (int i = 0; i < 20000; ++i) ++counts[sampler.Sample(logits)];
  EXPECT_EQ(counts.size(), 100u);
  EXPECT_LT(counts.rbegin()->first, 100);
}

TEST(SamplerTest, LargeVocabularyTopPNucleusOfThousands) {
  // 128k ids with 1000 distinct logits: the nucleus holds thousands of
  // tokens, including ties cut at its boundary.
  std::vector<float> logits(128 * 1024);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = static_cast<float>((i * 7919) % 1000) / 100.0f;
  }
  const SamplingOptions options = {
      .temperature = 1.0f, .top_p = 0.5f, .seed = 17};
  const auto expected = ReferenceDistribution(logits, 1.0, 0, 0.5);
  ASSERT_GT(expected.size(), 256u);
  Sampler sampler(options);
  // Each draw sorts a 128k vocabulary: 31 s under ASan for 2000.
  const int draws = testing::kSanitizer ? 200 : 2000;
  for (int i = 0; i < draws; ++i) {
    const int32_t id = sampler.Sample(logits);
    ASSERT_TRUE(expected.count(id)) << "id " << id << " outside the nucleus";
  }
}

TEST(SamplerTest, LargeVocabularyTopKOnlyKeepsTopIds) {
  std::vector<float> logits(128 * 1024, 0.0f);
  const std::vector<int32_t> top = {5, 70000, 131000, 99};
  for (int32_t id : top) logits[id] = 4.0f;
  Sampler sampler({.temperature = 100.0f, .top_k = 4, .seed = 23});
  std::map<int32_t, int> counts;
  // 4000 draws took 15 s under ASan; 1000 there, the tolerance still
  // 4 standard deviations (0.04 is 5.8 of them at 4000).
  const int draws = testing::kSanitizer ? 1000 : 4000;
  const double tolerance = testing::kSanitizer ? 0.055 : 0.04;
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits)];
  ASSERT_EQ(counts.size(), 4u);
  for (int32_t id : top) {
    EXPECT_NEAR(counts[id] / static_cast<double>(draws), 0.25, tolerance);
  }
}

TEST(SamplerTest, NegativeInfinityLogitsAreNeverSampled) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {ninf, 0.0f, ninf, 0.0f, ninf};
  Sampler sampler({.temperature = 1.0f, .top_p = 0.99f, .seed = 2});
  for (int i = 0; i < 1000; ++i) {
    const int32_t id = sampler.Sample(logits);
    ASSERT_TRUE(id == 1 || id == 3) << id;
  }
}

// Plain double log-softmax.
std::vector<double> ReferenceLogSoftmax(const std::vector<float>& logits) {
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x));
  std::vector<double> out;
  for (float x : logits) out.push_back(x - std::log(sum));
  return out;
}

TEST(ComputeLogprobsTest, MatchesDoubleReference) {
  const std::vector<double> reference = ReferenceLogSoftmax(kLogits);
  for (int32_t chosen = 0; chosen < static_cast<int32_t>(kLogits.size());
       ++chosen) {
    const Logprobs lp = ComputeLogprobs(kLogits, chosen, 3);
    EXPECT_NEAR(lp.chosen, reference[chosen], 1e-6);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_EQ(lp.top[0].token_id, 3);
    EXPECT_EQ(lp.top[1].token_id, 5);
    EXPECT_EQ(lp.top[2].token_id, 1);
    for (const TokenLogprob& t : lp.top) {
      EXPECT_NEAR(t.logprob, reference[t.token_id], 1e-6);
    }
  }
}

TEST(ComputeLogprobsTest, StableForLargeLogits) {
  // exp(1000) overflows; the shifted computation must not.
  const std::vector<float> logits = {1000.0f, 999.0f, 998.0f};
  const Logprobs lp = ComputeLogprobs(logits, 1, 2);
  const double log_z = 1000.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-2.0));
  EXPECT_NEAR(lp.chosen, 999.0 - log_z, 1e-5);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_NEAR(lp.top[0].logprob, 1000.0 - log_z, 1e-5);
  EXPECT_TRUE(std::isfinite(lp.chosen));
}

TEST(ComputeLogprobsTest, TopSortedDescendingTiesByIdAndClampedToVocab) {
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f};
  const Logprobs lp = ComputeLogprobs(logits, 0, kMaxTopLogprobs);
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[0].token_id, 1);
  EXPECT_EQ(lp.top[1].token_id, 3);
  EXPECT_EQ(lp.top[2].token_id, 2);
  EXPECT_EQ(lp.top[3].token_id, 0);
  EXPECT_EQ(lp.top[0].logprob, lp.top[1].logprob);
  EXPECT_TRUE(ComputeLogprobs(logits, 0, 0).top.empty());
}

TEST(ComputeLogprobsTest, TopNOfLargeVocabulary) {
  std::vector<float> logits(32000);
  for (size_t i = 0; i < logits.size(); ++i) {
    logits[i] = static_cast<float>((i * 104729) % 32000) / 1000.0f;
  }
  const Logprobs lp = ComputeLogprobs(logits, 0, kMaxTopLogprobs);
  ASSERT_EQ(lp.top.size(), static_cast<size_t>(kMaxTopLogprobs));
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  for (int i = 0; i < kMaxTopLogprobs; ++i) {
    EXPECT_EQ(lp.top[i].token_id, ids[i]) << i;
  }
}

// Logits a corrupt model could produce: every sampling mode and the
// logprobs return a token of the vocabulary and never abort.
const float kNan = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();
const std::vector<std::vector<float>> kNonFiniteLogits = {
    {kNan, kNan, kNan, kNan},  {-kInf, -kInf, -kInf},
    {kNan, -kInf, kNan},       {1.0f, kInf, 0.0f, kInf},
    {kNan, kInf, -kInf, 2.0f}, {kNan, 1.0f, kNan, 0.5f, -kInf},
    {kInf, kInf, kInf, kInf},  {kNan}};

TEST(SamplerTest, NonFiniteLogitsGiveATokenOfTheVocabulary) {
  const SamplingOptions modes[] = {
      {},
      {.temperature = 1.0f, .seed = 1},
      {.temperature = 0.7f, .top_k = 2},
      {.temperature = 1.0f, .top_p = 0.5f},
      {.temperature = 2.0f, .top_k = 3, .top_p = 0.9f}};
  for (const std::vector<float>& logits : kNonFiniteLogits) {
    const bool has_pos_inf =
        std::find(logits.begin(), logits.end(), kInf) != logits.end();
    const bool all_nan = std::all_of(logits.begin(), logits.end(),
                                     [](float x) { return std::isnan(x); });
    for (const SamplingOptions& o : modes) {
      Sampler sampler(o);
      for (int i = 0; i < 50; ++i) {
        const int32_t id = sampler.Sample(logits);
        ASSERT_GE(id, 0);
        ASSERT_LT(id, static_cast<int32_t>(logits.size()));
        if (has_pos_inf) {
          EXPECT_EQ(logits[id], kInf);
        }
        if (!all_nan) {
          EXPECT_FALSE(std::isnan(logits[id]));
        }
      }
    }
  }
}

TEST(ComputeLogprobsTest, NonFiniteLogitsNeverAbort) {
  for (const std::vector<float>& logits : kNonFiniteLogits) {
    for (int32_t chosen = 0; chosen < static_cast<int32_t>(logits.size());
         ++chosen) {
      const Logprobs lp = ComputeLogprobs(logits, chosen, kMaxTopLogprobs);
      EXPECT_FALSE(std::isnan(lp.chosen));
      EXPECT_LE(lp.chosen, 0.0f);
      ASSERT_EQ(lp.top.size(), logits.size());
      for (size_t i = 0; i < lp.top.size(); ++i) {
        EXPECT_FALSE(std::isnan(lp.top[i].logprob));
        if (i > 0) {
          EXPECT_LE(lp.top[i].logprob, lp.top[i - 1].logprob);
        }
      }
    }
  }
}

TEST(ComputeLogprobsTest, NonFiniteLogitsFollowTheLimitOfSoftmax) {
  // +inf logits share the mass; everything else gets none.
  Logprobs lp = ComputeLogprobs({1.0f, kInf, kNan, kInf}, 0, 4);
  EXPECT_EQ(lp.chosen, -kInf);
  ASSERT_EQ(lp.top.size(), 4u);
  EXPECT_EQ(lp.top[0].token_id, 1);
  EXPECT_EQ(lp.top[1].token_id, 3);
  EXPECT_FLOAT_EQ(lp.top[0].logprob, -std::log(2.0f));
  EXPECT_FLOAT_EQ(lp.top[1].logprob, -std::log(2.0f));
  EXPECT_EQ(lp.top[2].token_id, 0);
  EXPECT_EQ(lp.top[3].token_id, 2);  // NaN ranks last, as -inf
  EXPECT_EQ(lp.top[3].logprob, -kInf);
  // NaN counts as -inf: the finite logits are normalised among themselves.
  const std::vector<double> ref = ReferenceLogSoftmax({1.0f, 0.5f});
  lp = ComputeLogprobs({kNan, 1.0f, kNan, 0.5f}, 3, 1);
  EXPECT_NEAR(lp.chosen, ref[1], 1e-6);
  EXPECT_EQ(lp.top[0].token_id, 1);
  EXPECT_NEAR(lp.top[0].logprob, ref[0], 1e-6);
  EXPECT_EQ(ComputeLogprobs({kNan, 1.0f}, 0, 0).chosen, -kInf);
  // No token is more likely than another: uniform.
  lp = ComputeLogprobs({kNan, -kInf, kNan, kNan}, 2, 2);
  EXPECT_FLOAT_EQ(lp.chosen, -std::log(4.0f));
  EXPECT_FLOAT_EQ(lp.top[0].logprob, -std::log(4.0f));
  EXPECT_EQ(lp.top[0].token_id, 1);  // NaN still ranks below -inf
  EXPECT_EQ(lp.top[1].token_id, 0);
}

}  // namespace
}  // namespace kvserve
