// Constrained decoding through the engine on the built-in model: whatever
// the sampler's seed, the output is a sentence of the grammar (or a prefix
// of one when max_tokens cut it), it ends where the grammar is complete,
// and choices each keep their own grammar state.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/constrain/grammar_automaton.h"
#include "core/constrain/json_grammar.h"
#include "core/engine/engine.h"
#include "core/model/gguf_random_model.h"
#include "core/model/loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/builtin_model.h"
#include "tests/testing/engine_waiters.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

using testing::CollectingSink;

std::shared_ptr<const constrain::Grammar> Compile(std::string_view gbnf) {
  absl::StatusOr<constrain::Grammar> g = constrain::ParseGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::make_shared<const constrain::Grammar>(*std::move(g))
                : nullptr;
}

class EngineConstrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = Engine::Create({}, loaded_->weights.get(),
                                 loaded_->tokenizer.get(), nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  struct Output {
    std::string text;
    absl::StatusOr<GenerateResult> result;
  };
  std::vector<Output> Generate(std::shared_ptr<const constrain::Grammar> g,
                               uint64_t seed, int max_tokens, int n = 1,
                               std::vector<std::string> triggers = {}) {
    GenerateParams p;
    p.grammar_triggers = std::move(triggers);
    p.prompt = std::string("Once upon a time");
    p.max_tokens = max_tokens;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = seed;
    p.grammar = std::move(g);
    std::vector<std::unique_ptr<CollectingSink>> sinks;
    std::vector<std::shared_ptr<GenerateCall>> calls;
    for (int i = 0; i < n; ++i) {
      sinks.push_back(std::make_unique<CollectingSink>());
      calls.push_back(std::make_shared<GenerateCall>(ChoiceParams(p, i),
                                                     sinks.back().get()));
      if (i > 0) calls[0]->AddChoice(calls[i]);
    }
    engine_->Submit(calls[0]);
    std::vector<Output> out;
    for (auto& sink : sinks) {
      absl::StatusOr<GenerateResult> r = sink->Wait();
      out.push_back({sink->text(), std::move(r)});
    }
    return out;
  }

  const LoadedModel* const loaded_ = &testing::BuiltinModel();
  std::unique_ptr<Engine> engine_;
};

// A lazy grammar (a tool call's, switched on at its opener): the output is
// what it would be unconstrained until the trigger is written, then the
// grammar's sentence from the trigger on, and the turn ends with it.
TEST_F(EngineConstrainTest, ALazyGrammarHoldsFromItsTrigger) {
  int triggered = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    const Output free = Generate(nullptr, seed, 40)[0];
    ASSERT_TRUE(free.result.ok()) << free.result.status();
    // A trigger the free output writes: two of its characters.
    size_t at = 4;
    while (at + 2 <= free.text.size() &&
           (free.text[at] & 0x80 || free.text[at + 1] & 0x80 ||
            free.text[at] == '"' || free.text[at + 1] == '"' ||
            free.text[at] == '\\' || free.text[at + 1] == '\\')) {
      ++at;
    }
    if (at + 2 > free.text.size()) continue;
    const std::string trigger = free.text.substr(at, 2);
    auto g =
        Compile(absl::StrCat("root ::= \"", trigger, "\" [0-9]{3} \"!\"\n"));
    ASSERT_NE(g, nullptr);
    const Output lazy = Generate(g, seed, 40, 1, {trigger})[0];
    ASSERT_TRUE(lazy.result.ok()) << lazy.result.status();
    const size_t first = free.text.find(trigger);
    ASSERT_NE(first, std::string::npos);
    // Up to the token that wrote the trigger, the two outputs are one; from
    // the trigger on, the grammar's sentence, and the end.
    const size_t in_lazy = lazy.text.find(trigger);
    ASSERT_NE(in_lazy, std::string::npos) << lazy.text;
    EXPECT_EQ(lazy.text.substr(0, in_lazy), free.text.substr(0, first));
    const std::string call = lazy.text.substr(in_lazy);
    EXPECT_EQ(call.size(), trigger.size() + 4) << call;
    EXPECT_TRUE(absl::EndsWith(call, "!")) << call;
    for (size_t i = trigger.size(); i + 1 < call.size(); ++i) {
      EXPECT_TRUE(absl::ascii_isdigit(call[i])) << call;
    }
    EXPECT_EQ(lazy.result->finish_reason, FinishReason::kStop);
    ++triggered;
  }
  EXPECT_GE(triggered, 3);
}

TEST_F(EngineConstrainTest, TheOutputIsOneOfTheGrammarsSentences) {
  auto g = Compile(R"(root ::= "yes" | "no" | "maybe, " [0-9]{1,3} "%")");
  ASSERT_NE(g, nullptr);
  constrain::GrammarAutomaton check(g);
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    Output o = Generate(g, seed, 64)[0];
    ASSERT_TRUE(o.result.ok()) << o.result.status();
    const int32_t s = check.Walk(check.start(), o.text);
    EXPECT_TRUE(s >= 0 && check.CanEnd(s))
        << "seed " << seed << ": \"" << o.text << "\"";
    // Complete sentences end the turn as a stop would; "maybe, 12" may
    // also end at the model's end of generation only after the "%".
    EXPECT_TRUE(o.result->finish_reason == FinishReason::kStop)
        << "seed " << seed << ": " << FinishReasonName(o.result->finish_reason);
  }
}

// OpenAI's json_object: a JSON object whatever is drawn; cut by max_tokens
// it is a prefix of one.
TEST_F(EngineConstrainTest, JsonObjectsParseOrAreCutByTheLength) {
  constrain::GrammarAutomaton check(constrain::JsonObjectGrammar());
  int complete = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Output o = Generate(constrain::JsonObjectGrammar(), seed, 200)[0];
    ASSERT_TRUE(o.result.ok()) << o.result.status();
    const int32_t s = check.Walk(check.start(), o.text);
    ASSERT_GE(s, 0) << "seed " << seed << ": " << o.text;
    if (o.result->finish_reason == FinishReason::kLength) {
      EXPECT_EQ(o.result->usage.generated_tokens, 200);
      continue;
    }
    ++complete;
    EXPECT_EQ(o.result->finish_reason, FinishReason::kStop) << o.text;
    const nlohmann::json j =
        nlohmann::json::parse(o.text, nullptr, /*allow_exceptions=*/false);
    EXPECT_TRUE(j.is_object()) << "seed " << seed << ": " << o.text;
  }
  EXPECT_GT(complete, 0) << "no seed closed its object within 200 tokens";
}

// Several choices each keep their own grammar state from the shared
// prefill on.
TEST_F(EngineConstrainTest, EachChoiceFollowsTheGrammar) {
  auto g = Compile(R"(root ::= "[" [a-z ]{1,20} "]")");
  ASSERT_NE(g, nullptr);
  constrain::GrammarAutomaton check(g);
  std::vector<Output> outs = Generate(g, 5, 40, 4);
  for (size_t i = 0; i < outs.size(); ++i) {
    ASSERT_TRUE(outs[i].result.ok()) << outs[i].result.status();
    const int32_t s = check.Walk(check.start(), outs[i].text);
    EXPECT_TRUE(s >= 0 && check.CanEnd(s))
        << "choice " << i << ": \"" << outs[i].text << "\"";
  }
}

// The end of generation is allowed only where the grammar may end: with
// "a"+ the output is never empty, whatever the model prefers.
TEST_F(EngineConstrainTest, TheEndComesOnlyWhereTheGrammarMayEnd) {
  auto g = Compile(R"(root ::= [a-c]+)");
  ASSERT_NE(g, nullptr);
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    Output o = Generate(g, seed, 12)[0];
    ASSERT_TRUE(o.result.ok()) << o.result.status();
    EXPECT_FALSE(o.text.empty());
    EXPECT_EQ(o.text.find_first_not_of("abc"), std::string::npos) << o.text;
  }
}

// A batch at a real vocabulary's size (DeepSeek LLM's 102,400 tokens, a
// small random model): its rows are sampled in parallel, constrained and
// free alike, and each sequence draws exactly what it draws alone.
TEST(EngineParallelSamplingTest, ABatchDrawsWhatEachSequenceDrawsAlone) {
  RandomModelOptions ro;
  ro.n_layers = 1;
  ro.dim = 32;
  ro.n_heads = 2;
  ro.n_kv_heads = 1;
  ro.hidden_dim = 64;
  ro.vocab_from = testing::SharedDir() + "/vocab/ggml-vocab-deepseek-llm.gguf";
  absl::StatusOr<std::unique_ptr<GgufWriter>> w = MakeRandomModel(ro);
  ASSERT_TRUE(w.ok()) << w.status();
  const std::string bytes = (*w)->Serialize();  // the model's memory
  absl::StatusOr<LoadedModel> model = LoadModelFromFile(
      MappedFile::FromBytes(bytes, "deepseek-vocab.gguf"), {});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->weights->config.vocab_size, 102400);
  // The widest decode step (every sequence of it drawing a token): the
  // sequences must have been sampled together.
  class WidestDecode : public testing::NullObserver {
   public:
    void OnStep(int64_t tokens, int64_t sequences, double) override {
      if (tokens == sequences && sequences > widest) widest = sequences;
    }
    std::atomic<int64_t> widest{0};
  } observer;
  // All cores (one under TSan: OMP_NUM_THREADS=1, as libgomp is not
  // instrumented).
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      {}, model->weights.get(), model->tokenizer.get(), &observer);
  ASSERT_TRUE(engine.ok()) << engine.status();

  auto digits = Compile(R"(root ::= "[" [0-9]{1,4} ( ", " [0-9]{1,4} )* "]")");
  ASSERT_NE(digits, nullptr);
  constexpr int kSequences = 6;
  auto params = [&](int i) {
    GenerateParams p;
    p.prompt = std::string("Once upon a time");
    p.max_tokens = 16;
    p.sampling.temperature = 1.0f;
    p.sampling.seed = 100 + i;
    if (i % 3 == 1) p.grammar = constrain::JsonObjectGrammar();
    if (i % 3 == 2) p.grammar = digits;
    return p;
  };
  auto run = [&](const std::vector<int>& which) {
    std::vector<std::unique_ptr<CollectingSink>> sinks;
    for (int i : which) {
      sinks.push_back(std::make_unique<CollectingSink>());
      (*engine)->Submit(
          std::make_shared<GenerateCall>(params(i), sinks.back().get()));
    }
    std::vector<std::string> texts;
    for (auto& sink : sinks) {
      absl::StatusOr<GenerateResult> r = sink->Wait();
      EXPECT_TRUE(r.ok()) << r.status();
      texts.push_back(sink->text());
    }
    return texts;
  };
  std::vector<std::string> alone;
  for (int i = 0; i < kSequences; ++i) {
    alone.push_back(run({i})[0]);
    EXPECT_FALSE(alone[i].empty()) << "sequence " << i;
  }
  observer.widest = 0;
  const std::vector<std::string> together = run({0, 1, 2, 3, 4, 5});
  EXPECT_GE(observer.widest, 4) << "the sequences never decoded together";
  for (int i = 0; i < kSequences; ++i) {
    EXPECT_EQ(together[i], alone[i]) << "sequence " << i;
    if (i % 3 == 2) {
      constrain::GrammarAutomaton check(digits);
      EXPECT_GE(check.Walk(check.start(), alone[i]), 0) << alone[i];
    }
  }
}

}  // namespace
}  // namespace kvserve
