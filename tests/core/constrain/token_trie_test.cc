// TokenTrie::Allowed against the plain reference: each token's bytes walked
// through the automaton on their own.
#include "core/constrain/token_trie.h"

#include <random>
#include <string>
#include <vector>

#include "core/constrain/grammar.h"
#include "gtest/gtest.h"
#include "tests/testing/builtin_model.h"

namespace kvserve::constrain {
namespace {

std::shared_ptr<const Grammar> Compile(std::string_view gbnf) {
  absl::StatusOr<Grammar> g = ParseGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? std::make_shared<const Grammar>(*std::move(g)) : nullptr;
}

// The tokens whose bytes lead from `state` to a live state, one by one.
std::vector<bool> Reference(GrammarAutomaton& a, int32_t state,
                            const std::vector<std::string>& vocab) {
  std::vector<bool> out(vocab.size());
  for (size_t id = 0; id < vocab.size(); ++id) {
    out[id] = !vocab[id].empty() && a.Walk(state, vocab[id]) >= 0;
  }
  return out;
}

void ExpectMaskIsReference(const TokenTrie& trie, GrammarAutomaton& a,
                           int32_t state, const std::vector<std::string>& vocab,
                           const std::string& where) {
  std::vector<uint64_t> mask;
  ASSERT_TRUE(trie.Allowed(a, state, mask));
  const std::vector<bool> want = Reference(a, state, vocab);
  for (size_t id = 0; id < vocab.size(); ++id) {
    const bool got = (mask[id >> 6] >> (id & 63)) & 1;
    EXPECT_EQ(got, want[id])
        << where << ": token " << id << " \"" << vocab[id] << "\"";
  }
}

constexpr char kJson[] = R"(
root   ::= "{" ws "\"name\"" ws ":" ws string ws "," ws "\"n\"" ws ":" ws num ws "}"
string ::= "\"" [^"\\]* "\""
num    ::= "-"? [0-9]+
ws     ::= [ ]?
)";

TEST(TokenTrieTest, AllowedIsEveryTokenTheAutomatonAccepts) {
  // Shared prefixes, duplicates, multi-byte characters split across
  // tokens, control tokens (empty) and tokens spanning several terminals.
  const std::vector<std::string> vocab = {"",
                                          "{",
                                          "{\"",
                                          "\"",
                                          "\"name",
                                          "\"name\"",
                                          "name",
                                          ":",
                                          ": ",
                                          " ",
                                          ",",
                                          "}",
                                          "\"}",
                                          "1",
                                          "12",
                                          "-",
                                          "-1",
                                          "a",
                                          "ab",
                                          "\xC3",
                                          "\xA9",
                                          "\xC3\xA9",
                                          "\xE2\x82",
                                          "\xAC\"",
                                          "\"n\":",
                                          "\"n",
                                          "0}",
                                          "x",
                                          "{",
                                          "\\",
                                          "\"name\": \"",
                                          ""};
  auto g = Compile(kJson);
  ASSERT_NE(g, nullptr);
  GrammarAutomaton a(g);
  const TokenTrie trie(vocab);
  EXPECT_EQ(trie.vocab_size(), static_cast<int32_t>(vocab.size()));
  const std::string doc = "{\"name\": \"ab\xC3\xA9\xE2\x82\xAC\", \"n\": -12}";
  int32_t s = a.start();
  for (size_t i = 0; i <= doc.size(); ++i) {
    ExpectMaskIsReference(trie, a, s, vocab,
                          "after \"" + doc.substr(0, i) + "\"");
    if (i < doc.size()) s = a.Next(s, static_cast<uint8_t>(doc[i]));
    ASSERT_GE(s, 0) << doc.substr(0, i + 1);
  }
  EXPECT_TRUE(a.CanEnd(s));
}

// The built-in model's real vocabulary (SentencePiece pieces with byte
// fallback), a JSON grammar, random walks.
TEST(TokenTrieTest, TheBuiltinVocabularyAgreesOnRandomWalks) {
  const Tokenizer& tok = *testing::BuiltinModel().tokenizer;
  std::vector<std::string> vocab;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    vocab.push_back(tok.IsEndOfGeneration(id) ? "" : tok.DecodeToken(-1, id));
  }
  auto g = Compile(R"(
root  ::= "[" ( item ( ", " item )* )? "]"
item  ::= "\"" [a-zA-Z \xC0-\U0010FFFF]{0,12} "\"" | [0-9]{1,3}
)");
  ASSERT_NE(g, nullptr);
  GrammarAutomaton a(g);
  const TokenTrie trie(vocab);
  std::mt19937 rng(7);
  for (int walk = 0; walk < 20; ++walk) {
    int32_t s = a.start();
    for (int step = 0; step < 30 && !a.IsFinal(s); ++step) {
      std::vector<uint64_t> mask;
      ASSERT_TRUE(trie.Allowed(a, s, mask));
      const std::vector<bool> want = Reference(a, s, vocab);
      std::vector<int32_t> allowed;
      for (size_t id = 0; id < vocab.size(); ++id) {
        const bool got = (mask[id >> 6] >> (id & 63)) & 1;
        ASSERT_EQ(got, want[id])
            << "walk " << walk << " step " << step << " token " << id;
        if (got) allowed.push_back(id);
      }
      if (allowed.empty()) break;
      s = a.Walk(s, vocab[allowed[rng() % allowed.size()]]);
      ASSERT_GE(s, 0);
    }
  }
}

}  // namespace
}  // namespace kvserve::constrain
