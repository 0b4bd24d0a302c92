// Several choices of one prompt (GenerateCall::AddChoice, OpenAI's `n`):
// one prefill for all, each choice's tokens those of a request of its own,
// errors and cancels reaching every choice, a session keeping the first.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/builtin_model.h"
#include "tests/testing/engine_waiters.h"

namespace kvserve {
namespace {

using testing::CollectingSink;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::Waiter;

// Counts the positions every forward pass computed, and the prompts.
class StepObserver : public testing::NullObserver {
 public:
  void OnStep(int64_t tokens, int64_t, double) override {
    step_tokens += tokens;
  }
  void OnPrompt(int64_t prompt, int64_t cached) override {
    prompt_tokens += prompt;
    cached_tokens += cached;
  }
  void OnGenerated(int64_t n) override { generated += n; }

  // Written on the engine thread, read once the calls finished.
  std::atomic<int64_t> step_tokens{0}, prompt_tokens{0}, cached_tokens{0},
      generated{0};
};

// A prompt of a few dozen tokens, different for each `salt` (so that the
// prefix cache holds nothing of it).
std::string Prompt(int salt) {
  std::string text = "Once upon a time there was a little girl named Lily " +
                     std::to_string(salt) + ".";
  for (int i = 0; i < 6; ++i) text += " She liked to play in the park.";
  return text;
}

GenerateParams Params(Input prompt, int max_tokens, float temperature,
                      uint64_t seed) {
  GenerateParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  p.sampling.temperature = temperature;
  p.sampling.seed = seed;
  return p;
}

class EngineChoicesTest : public ::testing::Test {
 protected:
  void Start(EngineOptions options = {}) {
    engine_.reset();
    auto engine = Engine::Create(options, loaded_->weights.get(),
                                 loaded_->tokenizer.get(), &observer_);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  // One choice's tokens and result.
  struct Choice {
    std::vector<int32_t> tokens;
    absl::StatusOr<GenerateResult> result;
  };

  // Submits `first` with n - 1 choices made by ChoiceParams; their output
  // in order.
  std::vector<Choice> Submit(const GenerateParams& first, int n,
                             bool cancel = false) {
    std::vector<std::unique_ptr<CollectingSink>> sinks;
    std::vector<std::shared_ptr<GenerateCall>> calls;
    for (int i = 0; i < n; ++i) {
      sinks.push_back(std::make_unique<CollectingSink>());
      calls.push_back(std::make_shared<GenerateCall>(ChoiceParams(first, i),
                                                     sinks.back().get()));
      if (i > 0) calls[0]->AddChoice(calls[i]);
    }
    engine_->Submit(calls[0]);
    if (cancel) {
      for (auto& call : calls) call->Cancel();
    }
    std::vector<Choice> out;
    for (auto& sink : sinks) {
      absl::StatusOr<GenerateResult> result = sink->Wait();
      out.push_back({sink->tokens(), std::move(result)});
    }
    return out;
  }

  // The tokens of one request with `params` alone.
  std::vector<int32_t> Alone(const GenerateParams& params) {
    return std::move(Submit(params, 1)[0].tokens);
  }

  const LoadedModel* const loaded_ = &testing::BuiltinModel();
  StepObserver observer_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineChoicesTest, TheChoicesShareOnePrefill) {
  Start();
  constexpr int kN = 4, kMaxTokens = 8;
  const std::string prompt = Prompt(1);
  const int64_t prompt_tokens =
      loaded_->tokenizer->Encode(prompt, {.add_bos = true}).size();
  ASSERT_GT(prompt_tokens, 40);
  auto sinks = Submit(Params(prompt, kMaxTokens, 1.0f, 7), kN);
  for (int i = 0; i < kN; ++i) {
    absl::StatusOr<GenerateResult> r = sinks[i].result;
    ASSERT_TRUE(r.ok()) << "choice " << i << ": " << r.status();
    EXPECT_EQ(r->usage.prompt_tokens, prompt_tokens) << "choice " << i;
    EXPECT_EQ(r->usage.generated_tokens, kMaxTokens) << "choice " << i;
    EXPECT_EQ(sinks[i].tokens.size(), size_t{kMaxTokens});
  }
  // The prompt once, then each choice's tokens but its last (sampled, not
  // fed back). n separate requests would compute the prompt n times.
  EXPECT_EQ(observer_.step_tokens.load(),
            prompt_tokens + kN * (kMaxTokens - 1));
  EXPECT_EQ(observer_.prompt_tokens.load(), prompt_tokens);
  EXPECT_EQ(observer_.generated.load(), kN * kMaxTokens);
}

// Each choice decodes as a request of its own with its ChoiceParams would:
// the shared KV blocks are copied before a choice writes them, never
// written under another choice. With a seed the whole set is reproducible.
TEST_F(EngineChoicesTest, EachChoiceIsTheRequestItsParamsMake) {
  Start();
  constexpr int kN = 5;
  const GenerateParams first = Params(Prompt(2), 12, 1.5f, 42);
  auto sinks = Submit(first, kN);
  std::vector<std::vector<int32_t>> choices;
  for (auto& sink : sinks) {
    ASSERT_TRUE(sink.result.ok()) << sink.result.status();
    choices.push_back(sink.tokens);
  }
  for (int i = 0; i < kN; ++i) {
    EXPECT_THAT(Alone(ChoiceParams(first, i)), ElementsAreArray(choices[i]))
        << "choice " << i;
  }
  // Different seeds make different choices (at temperature 1.5, twelve
  // tokens of five choices are not all the same).
  int distinct = 0;
  for (int i = 1; i < kN; ++i) distinct += choices[i] != choices[0];
  EXPECT_GT(distinct, 0);
  auto again = Submit(first, kN);
  for (int i = 0; i < kN; ++i) {
    EXPECT_THAT(again[i].tokens, ElementsAreArray(choices[i]))
        << "choice " << i;
  }
}

TEST_F(EngineChoicesTest, GreedyChoicesAreAllTheSame) {
  Start();
  const GenerateParams first = Params(Prompt(3), 10, 0.0f, 0);
  const std::vector<int32_t> alone = Alone(first);
  for (auto& sink : Submit(first, 3)) {
    ASSERT_TRUE(sink.result.ok());
    EXPECT_THAT(sink.tokens, ElementsAreArray(alone));
  }
}

TEST_F(EngineChoicesTest, ChoicesOfOneTokenFinishAtTheFork) {
  Start();
  auto sinks = Submit(Params(Prompt(4), 1, 1.0f, 3), 6);
  for (auto& sink : sinks) {
    absl::StatusOr<GenerateResult> r = sink.result;
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->finish_reason, FinishReason::kLength);
    EXPECT_EQ(sink.tokens.size(), 1u);
  }
}

TEST_F(EngineChoicesTest, WhatEndsTheFirstBeforeTheForkEndsEveryChoice) {
  Start();
  GenerateParams unknown = Params(Prompt(5), 4, 1.0f, 1);
  unknown.session_id = "0123456789abcdef0123456789abcdef";
  for (auto& sink : Submit(unknown, 3)) {
    EXPECT_TRUE(absl::IsNotFound(sink.result.status())) << sink.result.status();
  }
  GenerateParams bad = Params(Prompt(5), 4, 1.0f, 1);
  bad.sampling.top_p = 2;
  for (auto& sink : Submit(bad, 3)) {
    EXPECT_THAT(sink.result.status().message(), HasSubstr("top_p"));
  }
  auto too_many = Submit(Params(Prompt(5), 4, 1.0f, 1), kMaxChoices + 1);
  for (auto& sink : too_many) {
    EXPECT_THAT(sink.result.status().message(), HasSubstr("n must be in"));
  }
  GenerateParams append = Params(Prompt(5), 4, 1.0f, 1);
  append.generate = false;
  for (auto& sink : Submit(append, 2)) {
    EXPECT_TRUE(absl::IsInvalidArgument(sink.result.status()));
  }
  // Cancelled at once: every choice ends (before or after the fork), none
  // hangs, and the engine goes on serving.
  for (auto& sink : Submit(Params(Prompt(6), 200, 1.0f, 1), 4, true)) {
    ASSERT_TRUE(sink.result.ok()) << sink.result.status();
    EXPECT_EQ(sink.result->finish_reason, FinishReason::kCancelled);
  }
  EXPECT_EQ(Alone(Params(Prompt(6), 3, 0.0f, 0)).size(), 3u);
}

// A session's turn with choices keeps the first choice; the others are
// forks that leave no session behind.
TEST_F(EngineChoicesTest, ASessionKeepsTheFirstChoice) {
  Start();
  Waiter<SessionInfo> created;
  CreateSessionParams params;
  params.initial = Prompt(7);
  engine_->CreateSession(std::move(params), created.callback());
  absl::StatusOr<SessionInfo> s = created.Wait();
  ASSERT_TRUE(s.ok()) << s.status();
  GenerateParams turn = Params(std::string(" Then"), 6, 1.5f, 9);
  turn.session_id = s->id;
  auto sinks = Submit(turn, 3);
  for (auto& sink : sinks) ASSERT_TRUE(sink.result.ok());
  Waiter<SessionInfo> got;
  engine_->GetSession(s->id, "", /*include_tokens=*/true, got.callback());
  absl::StatusOr<SessionInfo> after = got.Wait();
  ASSERT_TRUE(after.ok()) << after.status();
  const std::vector<int32_t>& first = sinks[0].tokens;
  ASSERT_GE(after->tokens.size(), first.size());
  EXPECT_THAT(std::vector<int32_t>(after->tokens.end() - first.size(),
                                   after->tokens.end()),
              ElementsAreArray(first));
  EXPECT_EQ(sinks[1].result->session_id, "");
  Waiter<SessionList> list;
  engine_->ListSessions("", true, "", 0, list.callback());
  EXPECT_EQ(list.Wait()->sessions.size(), 1u);
}

}  // namespace
}  // namespace kvserve
