// GrammarMatcher and MatcherCache: what the sequences decoding with one
// grammar share (its automaton and masks), found by the grammar's content,
// and safe to use from the threads the engine samples a step on.
#include "core/constrain/constraint.h"

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/constrain/json_grammar.h"
#include "gtest/gtest.h"
#include "tests/testing/builtin_model.h"

namespace kvserve::constrain {
namespace {

std::shared_ptr<const ConstraintVocabulary> BuiltinVocabulary() {
  static const auto* vocab = new std::shared_ptr<const ConstraintVocabulary>(
      std::make_shared<const ConstraintVocabulary>(
          *testing::BuiltinModel().tokenizer));
  return *vocab;
}

std::shared_ptr<const Grammar> Compile(const std::string& gbnf) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

std::string Digits(int n) {
  return "root ::= [0-9]{" + std::to_string(n) + "}\n";
}

TEST(MatcherCacheTest, GrammarsEqualInContentShareAMatcher) {
  MatcherCache cache(BuiltinVocabulary());
  // Compiled twice (as two requests with one schema are): one matcher.
  std::shared_ptr<GrammarMatcher> a = cache.Get(Compile(Digits(3)));
  EXPECT_EQ(cache.Get(Compile(Digits(3))), a);
  // Rule names do not matter, the rules do.
  std::shared_ptr<GrammarMatcher> named =
      cache.Get(Compile("root ::= digit digit\ndigit ::= [0-9]\n"));
  EXPECT_EQ(cache.Get(Compile("root ::= d d\nd ::= [0-9]\n")), named);
  EXPECT_NE(named, a);
  EXPECT_NE(cache.Get(Compile(Digits(4))), a);
  EXPECT_EQ(cache.Get(JsonObjectGrammar()), cache.Get(JsonObjectGrammar()));
}

TEST(MatcherCacheTest, IdleMatchersAreDroppedPastTheLimitThoseInUseKept) {
  MatcherCache cache(BuiltinVocabulary());
  std::shared_ptr<GrammarMatcher> held = cache.Get(Compile(Digits(1)));
  std::weak_ptr<GrammarMatcher> idle = cache.Get(Compile(Digits(2)));
  for (int i = 0; i < MatcherCache::kMaxIdle - 1; ++i) {
    cache.Get(Compile(Digits(10 + i)));
  }
  // kMaxIdle idle ones: all kept.
  EXPECT_FALSE(idle.expired());
  EXPECT_EQ(cache.Get(Compile(Digits(2))), idle.lock());
  for (int i = 0; i < MatcherCache::kMaxIdle + 1; ++i) {
    cache.Get(Compile(Digits(100 + i)));
  }
  EXPECT_TRUE(idle.expired());
  EXPECT_EQ(cache.Get(Compile(Digits(1))), held);
}

// A shared matcher whose automaton holds half its limit of states is
// retired: new sequences get a fresh one (a server's traffic must not
// exhaust the limit for everyone), the sequences on it go on.
TEST(MatcherCacheTest, AMatcherHalfFullOfStatesIsRetired) {
  const AutomatonLimits limits{.max_states = 64, .max_stacks = 1 << 20};
  MatcherCache cache(BuiltinVocabulary(), limits);
  std::shared_ptr<GrammarMatcher> m = cache.Get(Compile(Digits(200)));
  Constraint on_it(m);
  ASSERT_TRUE(on_it.Allowed().ok());
  // Each digit more is a new state (the count so far).
  const std::string digits(40, '7');
  for (int i = 0; m->automaton().num_states() < 32; ++i) {
    ASSERT_LT(i, 100);
    m->automaton().Walk(m->automaton().start(), digits.substr(0, i));
  }
  std::shared_ptr<GrammarMatcher> fresh = cache.Get(Compile(Digits(200)));
  EXPECT_NE(fresh, m);
  EXPECT_EQ(fresh->automaton().num_states(), 1);
  EXPECT_EQ(cache.Get(Compile(Digits(200))), fresh);
  EXPECT_TRUE(on_it.Allowed().ok());
}

// Takes the lowest allowed token each step (a fixed walk), `steps` times.
std::vector<int32_t> LowestWalk(Constraint& c, int steps) {
  std::vector<int32_t> out;
  for (int i = 0; i < steps && !c.Complete(); ++i) {
    absl::StatusOr<const std::vector<uint64_t>*> allowed = c.Allowed();
    EXPECT_TRUE(allowed.ok()) << allowed.status();
    if (!allowed.ok()) break;
    int32_t token = -1;
    for (size_t w = 0; w < (*allowed)->size() && token < 0; ++w) {
      if ((**allowed)[w] != 0) {
        token = w * 64 + __builtin_ctzll((**allowed)[w]);
      }
    }
    EXPECT_TRUE(c.Accept(token).ok());
    out.push_back(token);
  }
  return out;
}

TEST(GrammarMatcherTest, ASequenceUsesTheMasksAnotherComputed) {
  MatcherCache cache(BuiltinVocabulary());
  std::shared_ptr<GrammarMatcher> m = cache.Get(Compile(R"(
root ::= "[" ( item ( "," item )* )? "]"
item ::= "\"" [a-z ]{0,8} "\""
)"));
  Constraint first(m);
  const std::vector<int32_t> walked = LowestWalk(first, 40);
  ASSERT_GT(walked.size(), 5u);
  const int64_t computed = m->masks_computed();
  EXPECT_GT(computed, 0);
  Constraint second(cache.Get(Compile(R"(
root ::= "[" ( item ( "," item )* )? "]"
item ::= "\"" [a-z ]{0,8} "\""
)")));
  EXPECT_EQ(LowestWalk(second, 40), walked);
  EXPECT_EQ(m->masks_computed(), computed);
}

// Threads walking one shared matcher at random (each with its own
// Constraint) get the masks a private automaton computes alone.
TEST(GrammarMatcherTest, ThreadsSharingAMatcherGetAPrivateAutomatonsMasks) {
  const std::shared_ptr<const ConstraintVocabulary> vocab = BuiltinVocabulary();
  MatcherCache cache(vocab);
  std::shared_ptr<GrammarMatcher> shared = cache.Get(JsonObjectGrammar());
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads), steps(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      GrammarAutomaton own(JsonObjectGrammar());
      std::mt19937 rng(t + 1);
      for (int walk = 0; walk < 12; ++walk) {
        Constraint c(shared);
        int32_t s = own.start();
        for (int i = 0; i < 40 && !c.Complete(); ++i) {
          absl::StatusOr<const std::vector<uint64_t>*> got = c.Allowed();
          std::vector<uint64_t> want;
          if (!got.ok() || !vocab->trie().Allowed(own, s, want)) {
            ++mismatches[t];
            break;
          }
          if (own.CanEnd(s)) {
            for (int32_t id : vocab->end_tokens()) {
              want[id >> 6] |= uint64_t{1} << (id & 63);
            }
          }
          if (**got != want) ++mismatches[t];
          std::vector<int32_t> allowed;
          for (int32_t id = 0; id < vocab->vocab_size(); ++id) {
            if (((want[id >> 6] >> (id & 63)) & 1) &&
                !vocab->bytes(id).empty()) {
              allowed.push_back(id);
            }
          }
          if (allowed.empty()) break;
          const int32_t token = allowed[rng() % allowed.size()];
          if (!c.Accept(token).ok()) ++mismatches[t];
          s = own.Walk(s, vocab->bytes(token));
          ++steps[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(mismatches[t], 0) << "thread " << t;
    EXPECT_GT(steps[t], 40) << "thread " << t;
  }
}

}  // namespace
}  // namespace kvserve::constrain

namespace kvserve::constrain {
namespace {

std::vector<int32_t> Tokens(const std::string& text) {
  EncodeOptions o;
  o.add_bos = false;
  o.add_dummy_prefix = false;
  return testing::BuiltinModel().tokenizer->Encode(text, o);
}

bool Allows(const std::vector<uint64_t>& bits, int32_t id) {
  return (bits[id >> 6] >> (id & 63)) & 1;
}

// A lazy grammar: the text is free until the trigger, then follows the
// grammar from the trigger on (a tool call's grammar at its opener).
TEST(ConstraintTest, ALazyGrammarHoldsFromItsTrigger) {
  MatcherCache cache(BuiltinVocabulary());
  Constraint c(cache.Get(Compile("root ::= \"<c>\" [0-9]+ \"</c>\"\n")),
               {"<c>"});
  EXPECT_FALSE(c.active());
  EXPECT_TRUE(c.CanEnd());
  // Free text, a '<' without the rest among it, and an id out of range.
  for (int32_t t : Tokens("Once upon a time < x"))
    ASSERT_TRUE(c.Accept(t).ok());
  ASSERT_TRUE(c.Accept(-3).ok());
  EXPECT_FALSE(c.active());
  EXPECT_FALSE(c.Allowed().ok());  // no mask before the trigger
  // The trigger, cut across tokens: the grammar holds from it.
  for (int32_t t : Tokens("A <c>")) ASSERT_TRUE(c.Accept(t).ok());
  ASSERT_TRUE(c.active());
  EXPECT_FALSE(c.CanEnd());
  absl::StatusOr<const std::vector<uint64_t>*> allowed = c.Allowed();
  ASSERT_TRUE(allowed.ok()) << allowed.status();
  const std::vector<int32_t> digit = Tokens("7");
  const std::vector<int32_t> word = Tokens("x");
  ASSERT_EQ(digit.size(), 1u);
  ASSERT_EQ(word.size(), 1u);
  EXPECT_TRUE(Allows(**allowed, digit[0]));
  EXPECT_FALSE(Allows(**allowed, word[0]));
  EXPECT_FALSE(c.Accept(word[0]).ok());
  for (int32_t t : Tokens("42</c>")) ASSERT_TRUE(c.Accept(t).ok());
  EXPECT_TRUE(c.Complete());
}

}  // namespace
}  // namespace kvserve::constrain
