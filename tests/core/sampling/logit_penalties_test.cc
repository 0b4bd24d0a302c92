#include "core/sampling/logit_penalties.h"

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/sampling/sampler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

// The penalties written out plainly, in double: bias, then repeat_penalty
// over the last repeat_last_n of context + generated, then OpenAI's
// frequency and presence penalties over the generated tokens.
std::vector<double> Reference(const std::vector<float>& logits,
                              const PenaltyOptions& o,
                              const std::vector<int32_t>& context,
                              const std::vector<int32_t>& generated) {
  std::vector<double> out(logits.begin(), logits.end());
  for (const auto& [id, bias] : o.logit_bias) out[id] += bias;
  std::vector<int32_t> history = context;
  history.insert(history.end(), generated.begin(), generated.end());
  size_t from = 0;
  if (o.repeat_last_n == 0) from = history.size();
  if (o.repeat_last_n > 0 &&
      history.size() > static_cast<size_t>(o.repeat_last_n)) {
    from = history.size() - o.repeat_last_n;
  }
  const std::set<int32_t> window(history.begin() + from, history.end());
  for (int32_t id : window) {
    out[id] =
        out[id] > 0 ? out[id] / o.repeat_penalty : out[id] * o.repeat_penalty;
  }
  std::map<int32_t, int> count;
  for (int32_t id : generated) ++count[id];
  for (const auto& [id, c] : count) {
    out[id] -= c * static_cast<double>(o.frequency_penalty) +
               static_cast<double>(o.presence_penalty);
  }
  return out;
}

TEST(LogitPenaltiesTest, MatchesThePlainReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> logit(-5.0f, 5.0f);
  std::uniform_int_distribution<int32_t> token(0, 19);  // repeats likely
  const int vocab = 50;
  const std::vector<PenaltyOptions> cases = {
      {.logit_bias = {{3, 5.0f}, {7, -100.0f}, {49, 0.5f}}},
      {.presence_penalty = 0.7f},
      {.frequency_penalty = -1.25f},
      {.repeat_penalty = 1.3f, .repeat_last_n = 8},
      {.repeat_penalty = 0.8f, .repeat_last_n = -1},
      {.repeat_penalty = 1.5f, .repeat_last_n = 0},
      {.logit_bias = {{1, 2.0f}},
       .presence_penalty = 0.5f,
       .frequency_penalty = 0.25f,
       .repeat_penalty = 1.1f,
       .repeat_last_n = 16},
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    SCOPED_TRACE(c);
    const PenaltyOptions& o = cases[c];
    ASSERT_TRUE(ValidatePenaltyOptions(o, vocab).ok());
    LogitPenalties penalties(o);
    std::vector<int32_t> context(30), generated;
    for (int32_t& t : context) t = token(rng);
    penalties.AddContext(context);
    for (int step = 0; step < 40; ++step) {
      std::vector<float> logits(vocab);
      for (float& l : logits) l = logit(rng);
      const std::vector<double> want = Reference(logits, o, context, generated);
      penalties.Apply(absl::MakeSpan(logits));
      for (int i = 0; i < vocab; ++i) {
        ASSERT_NEAR(logits[i], want[i], 1e-4 * (1 + std::abs(want[i])))
            << "step " << step << " token " << i;
      }
      const int32_t drawn = token(rng);
      penalties.AddGenerated(drawn);
      generated.push_back(drawn);
    }
  }
}

TEST(LogitPenaltiesTest, OffTouchesNothing) {
  const PenaltyOptions off;
  EXPECT_FALSE(off.active());
  EXPECT_FALSE(
      (PenaltyOptions{.repeat_penalty = 2.0f, .repeat_last_n = 0}).active());
  LogitPenalties penalties(off);
  penalties.AddContext(std::vector<int32_t>{1, 2, 3});
  penalties.AddGenerated(1);
  std::vector<float> logits = {1.0f, 2.0f, -3.0f, 4.0f};
  const std::vector<float> before = logits;
  penalties.Apply(absl::MakeSpan(logits));
  EXPECT_EQ(logits, before);
}

TEST(LogitPenaltiesTest, ValidationNamesTheFieldAndValue) {
  struct Case {
    PenaltyOptions options;
    const char* says;
  };
  const float nan = std::nanf("");
  const std::vector<Case> cases = {
      {{.logit_bias = {{10, 1.0f}}}, "token id 10 is not in"},
      {{.logit_bias = {{-1, 1.0f}}}, "token id -1"},
      {{.logit_bias = {{2, 101.0f}}}, "[-100, 100], got 101"},
      {{.logit_bias = {{2, nan}}}, "logit_bias"},
      {{.logit_bias = {{2, 1.0f}, {2, 3.0f}}}, "token id 2 is given twice"},
      {{.presence_penalty = 2.5f},
       "presence_penalty must be in [-2, 2], got 2.5"},
      {{.frequency_penalty = -3.0f}, "frequency_penalty must be in [-2, 2]"},
      {{.repeat_penalty = 0.0f}, "repeat_penalty"},
      {{.repeat_penalty = nan}, "repeat_penalty"},
      {{.repeat_last_n = -2}, "repeat_last_n"},
  };
  PenaltyOptions many;
  for (int i = 0; i <= kMaxLogitBias; ++i) many.logit_bias.emplace_back(i, 1);
  const absl::Status too_many = ValidatePenaltyOptions(many, 100000);
  EXPECT_EQ(too_many.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_many.message(), HasSubstr("at most 1024 tokens, got 1025"));
  many.logit_bias.pop_back();
  EXPECT_TRUE(ValidatePenaltyOptions(many, 100000).ok());
  for (const Case& c : cases) {
    const absl::Status s = ValidatePenaltyOptions(c.options, 10);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.says;
    EXPECT_THAT(s.message(), HasSubstr(c.says));
  }
}

// Through the sampler: a bias of -100 bans the favourite, +100 forces a
// token, and a frequency penalty moves greedy decoding off a token once it
// was drawn.
TEST(LogitPenaltiesTest, TheSamplerDrawsFromThePenalizedLogits) {
  const std::vector<float> logits = {1.0f, 0.9f, 0.1f, -2.0f};
  Sampler banned({.penalties = {.logit_bias = {{0, -100.0f}}}});
  EXPECT_EQ(banned.Sample(logits), 1);
  Sampler forced({.temperature = 1.0f,
                  .seed = 3,
                  .penalties = {.logit_bias = {{3, 100.0f}}}});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(forced.Sample(logits), 3);
  Sampler frequency({.penalties = {.frequency_penalty = 0.2f}});
  EXPECT_EQ(frequency.Sample(logits), 0);  // 1.0 > 0.9
  EXPECT_EQ(frequency.Sample(logits), 1);  // 0.8 < 0.9
  EXPECT_EQ(frequency.Sample(logits), 0);  // 0.8 > 0.7
  // repeat_penalty sees the context given before the first draw.
  Sampler repeat({.penalties = {.repeat_penalty = 2.0f, .repeat_last_n = 4}});
  repeat.AddContext(std::vector<int32_t>{0});
  EXPECT_EQ(repeat.Sample(logits), 1);  // 1.0 / 2 < 0.9
}

}  // namespace
}  // namespace kvserve
