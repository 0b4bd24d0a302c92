// GBNF compiled to a byte grammar and walked by GrammarAutomaton: what a
// grammar accepts, byte by byte, against references written here (JSON
// against nlohmann's parser, repetitions and classes by their definition),
// and every error a client's grammar can get.
#include "core/constrain/grammar.h"

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "core/constrain/grammar_automaton.h"
#include "core/tokenizer/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvserve::constrain {
namespace {

using ::testing::HasSubstr;

// RFC 8259 JSON, with \u escapes of surrogates only as a high-low pair (as
// strict parsers require).
constexpr char kJsonGbnf[] = R"(
# A JSON text, whitespace around it.
root    ::= ws value ws
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" unicode )
unicode ::= ( [0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex{2}
            | [dD] [89abAB] hex{2} "\\u" [dD] [c-fC-F] hex{2} )
hex     ::= [0-9a-fA-F]
number  ::= "-"? int frac? exp?
int     ::= "0" | [1-9] [0-9]*
frac    ::= "." [0-9]+
exp     ::= [eE] [+-]? [0-9]+
ws      ::= [ \t\n\r]*
)";

std::shared_ptr<const Grammar> Compile(std::string_view gbnf) {
  absl::StatusOr<Grammar> g = ParseGbnf(gbnf);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  return std::make_shared<const Grammar>(*std::move(g));
}

// Whether the grammar accepts `text` whole; every prefix of an accepted
// text must be alive.
bool Accepts(GrammarAutomaton& a, std::string_view text) {
  int32_t s = a.start();
  for (char c : text) {
    s = a.Next(s, static_cast<uint8_t>(c));
    if (s < 0) return false;
  }
  return a.CanEnd(s);
}

TEST(GbnfTest, RepetitionsAcceptExactlyTheirCounts) {
  struct Case {
    const char* gbnf;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {R"(root ::= "a"{2,4})", {"aa", "aaa", "aaaa"}, {"", "a", "aaaaa", "b"}},
      {R"(root ::= "ab"{3})", {"ababab"}, {"abab", "abababab", "aba"}},
      {R"(root ::= "a"{2,} "b")", {"aab", "aaaaaab"}, {"ab", "b", "aa"}},
      {R"(root ::= "x" "a"* "y")", {"xy", "xay", "xaaay"}, {"x", "xa", "ya"}},
      {R"(root ::= ("a" | "bc")+)", {"a", "bc", "abca"}, {"", "b", "ac"}},
      {R"(root ::= "a"? "b")", {"b", "ab"}, {"aab", "a", ""}},
      {"root ::= ( \"a\"\n  | \"b\" )  # alternatives across lines\n",
       {"a", "b"},
       {"ab", ""}},
      {"root ::= \"a\" |\n  \"b\"\n", {"a", "b"}, {"ab"}},
      {R"(root ::= [a-c]{0,2} "!")", {"!", "a!", "cb!"}, {"abc!", "d!"}},
  };
  for (const Case& c : cases) {
    auto g = Compile(c.gbnf);
    ASSERT_NE(g, nullptr) << c.gbnf;
    GrammarAutomaton a(g);
    for (const std::string& s : c.yes) {
      EXPECT_TRUE(Accepts(a, s)) << c.gbnf << " should accept \"" << s << "\"";
    }
    for (const std::string& s : c.no) {
      EXPECT_FALSE(Accepts(a, s)) << c.gbnf << " should refuse \"" << s << "\"";
    }
  }
}

// Classes match code points as UTF-8, byte by byte; never a surrogate, an
// overlong form or a stray continuation byte.
TEST(GbnfTest, ClassesMatchCodePointsAsUtf8) {
  auto g = Compile(R"(root ::= [α-ω]+ "." .)");
  ASSERT_NE(g, nullptr);
  GrammarAutomaton a(g);
  EXPECT_TRUE(Accepts(a, "αβω.x"));
  EXPECT_TRUE(Accepts(a, "β.\xF0\x9F\x98\x80"));  // U+1F600 as the any-char
  EXPECT_TRUE(Accepts(a, "β.\xE2\x82\xAC"));      // U+20AC
  EXPECT_FALSE(Accepts(a, "a.x"));
  EXPECT_FALSE(Accepts(a, "β.\xED\xA0\x80"));  // a surrogate
  EXPECT_FALSE(Accepts(a, "β.\xC0\x80"));      // overlong NUL
  EXPECT_FALSE(Accepts(a, "β.\x80"));
  EXPECT_FALSE(Accepts(a, "β.\xFF"));
  // A multi-byte character split anywhere is still alive midway.
  int32_t s = a.Walk(a.start(), "\xCE");
  EXPECT_GE(s, 0);
  EXPECT_FALSE(a.CanEnd(s));

  auto neg = Compile(R"(root ::= [^a-z\u00e9]+)");
  ASSERT_NE(neg, nullptr);
  GrammarAutomaton n(neg);
  EXPECT_TRUE(Accepts(n, "ABC\xC3\xA8"));  // è
  EXPECT_FALSE(Accepts(n, "A\xC3\xA9"));   // é is excluded
  EXPECT_FALSE(Accepts(n, "Ab"));
}

TEST(GbnfTest, Utf8RangeSequencesCoverExactlyTheRange) {
  // Every code point in a few ranges, and its neighbours, against the
  // sequences.
  auto matches = [](const std::vector<ByteRangeSeq>& seqs,
                    const std::string& bytes) {
    for (const ByteRangeSeq& seq : seqs) {
      if (seq.size() != bytes.size()) continue;
      bool all = true;
      for (size_t i = 0; i < seq.size(); ++i) {
        const auto b = static_cast<uint8_t>(bytes[i]);
        all = all && b >= seq[i].first && b <= seq[i].second;
      }
      if (all) return true;
    }
    return false;
  };
  auto encode = [](uint32_t cp) {
    std::string s;
    AppendUtf8(cp, s);
    return s;
  };

  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x41, 0x5A},     {0x70, 0x900},     {0x7FF, 0x801},
      {0xD000, 0xE100}, {0xFFF0, 0x10010}, {0x10FF00, 0x10FFFF}};
  for (auto [lo, hi] : ranges) {
    const std::vector<ByteRangeSeq> seqs = Utf8RangeSequences(lo, hi);
    for (uint32_t cp = lo > 0x40 ? lo - 0x40 : 0; cp <= hi + 0x40; ++cp) {
      if (cp > 0x10FFFF) break;
      const bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
      EXPECT_EQ(matches(seqs, encode(cp)), cp >= lo && cp <= hi && !surrogate)
          << std::hex << "U+" << cp << " in [" << lo << ", " << hi << "]";
    }
  }
}

// A random JSON value serialized with random whitespace.
std::string RandomJson(std::mt19937& rng, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  auto ws = [&]() {
    static const char* const kWs[] = {"", "", " ", "\n", "\t ", "\r\n  "};
    return std::string(kWs[pick(6)]);
  };
  switch (depth <= 0 ? 2 + pick(4) : pick(6)) {
    case 0: {
      std::string out = "{" + ws();
      const int n = pick(4);
      for (int i = 0; i < n; ++i) {
        if (i) out += ws() + "," + ws();
        out += "\"k" + std::to_string(i) + "\"" + ws() + ":" + ws() +
               RandomJson(rng, depth - 1);
      }
      return out + ws() + "}";
    }
    case 1: {
      std::string out = "[" + ws();
      const int n = pick(4);
      for (int i = 0; i < n; ++i) {
        if (i) out += ws() + "," + ws();
        out += RandomJson(rng, depth - 1);
      }
      return out + ws() + "]";
    }
    case 2: {
      static const char* const kPieces[] = {"a",
                                            "Z",
                                            " ",
                                            "\\n",
                                            "\\\"",
                                            "\\\\",
                                            "\\u00e9",
                                            "\\uD83D\\uDE00",
                                            "\xC3\xA9",
                                            "\xE2\x82\xAC",
                                            "\xF0\x9F\x98\x80",
                                            "/",
                                            "\\/"};
      std::string out = "\"";
      const int n = pick(6);
      for (int i = 0; i < n; ++i) out += kPieces[pick(13)];
      return out + "\"";
    }
    case 3: {
      static const char* const kNumbers[] = {
          "0", "-0", "12", "-3.25", "1e5", "2E-3", "0.5e+10", "123456789"};
      return kNumbers[pick(8)];
    }
    case 4: {
      static const char* const kWords[] = {"true", "false", "null"};
      return kWords[pick(3)];
    }
    default:
      return "[" + RandomJson(rng, depth - 1) + "]";
  }
}

// The JSON grammar accepts what nlohmann's strict parser accepts, on random
// documents and on every one-byte mutation of a few of them.
TEST(GbnfTest, JsonGrammarAgreesWithAJsonParser) {
  auto g = Compile(kJsonGbnf);
  ASSERT_NE(g, nullptr);
  GrammarAutomaton a(g);
  std::mt19937 rng(1234);
  static const char kAlphabet[] =
      "{}[]\":,0123456789-+.eEtrufalsn \\u\n\x80\xC3";
  int mutants = 0, mutants_valid = 0;
  for (int i = 0; i < 300; ++i) {
    std::string doc = " ";
    doc += RandomJson(rng, 3);
    doc += ' ';
    ASSERT_TRUE(nlohmann::json::accept(doc)) << doc;
    EXPECT_TRUE(Accepts(a, doc)) << doc;
    for (int m = 0; m < 10; ++m) {
      std::string bad = doc;
      const size_t at = rng() % bad.size();
      const char c = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
      switch (rng() % 3) {
        case 0:
          bad[at] = c;
          break;
        case 1:
          bad.insert(bad.begin() + at, c);
          break;
        default:
          bad.erase(at, 1);
      }
      // nlohmann also refuses numbers beyond a double's range, which no
      // grammar of JSON's syntax expresses: such mutants are skipped.
      bool big_exponent = false;
      for (size_t e = 0; e + 3 < bad.size(); ++e) {
        if ((bad[e] == 'e' || bad[e] == 'E') && isdigit(bad[e + 1]) &&
            isdigit(bad[e + 2]) && isdigit(bad[e + 3])) {
          big_exponent = true;
        }
      }
      if (big_exponent) continue;
      const bool valid = nlohmann::json::accept(bad);
      ++mutants;
      mutants_valid += valid;
      EXPECT_EQ(Accepts(a, bad), valid) << "\"" << bad << "\"";
    }
  }
  // Both kinds were tried.
  EXPECT_GT(mutants_valid, 50);
  EXPECT_LT(mutants_valid, mutants - 500);
}

TEST(GbnfTest, ErrorsNameWhereAndWhat) {
  struct Case {
    const char* gbnf;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"root ::= item\n", "line 1 column 10: rule `item` is used but never"},
      {"root = \"a\"\n", "line 1 column 6: expected ::= after rule `root`"},
      {"root ::= \"abc\n", "line 1 column 14: unterminated string literal"},
      {"root ::= [abc\n", "unterminated character class"},
      {"root ::= [z-a]\n", "the range U+7A-U+61 is reversed"},
      {"root ::= \"\\q\"\n", "unknown escape \\\"q\""},
      {"root ::= \"\\uD800\"\n", "U+D800 is not a Unicode scalar value"},
      {"root ::= \"a\" )\n", "expected the end of the line after rule"},
      {"root ::= ( \"a\"\n", "expected ) to close a group"},
      {"root ::= \"a\"{3,2}\n", "the repetition {3,2} is reversed"},
      {"root ::= \"a\"{5000}\n", "a repetition count above 1000"},
      {"root ::= \"a\"{2\n", "expected } to end a repetition"},
      {"item ::= \"a\"\n", "the grammar has no rule `root`"},
      {"root ::= \"a\"\nroot ::= \"b\"\n",
       "line 2 column 1: rule `root` is defined twice (first on line 1)"},
      {"root ::= root \"a\" | \"b\"\n", "rule `root` is left-recursive"},
      {"root ::= x \"a\"\nx ::= \"\" | root\n", "is left-recursive"},
      {"root ::= x \"a\"\nx ::= \"b\" | \"\" root\n", "is left-recursive"},
      {"root ::= asdf\nasdf ::= \"a\" | foo \"b\"\nfoo ::= \"c\" | asdf "
       "\"d\"\n",
       "is left-recursive"},
      {"root ::= r\nr ::= \"a\" | e r \"d\"\ne ::= \"x\" | \n",
       "is left-recursive"},
      {"root ::= \"x\" root\n", "rule `root` matches no finite text"},
      {"root ::= <|im_end|>\n", "token references"},
      {"root ::= \"a\" @\n", "line 1 column 14: unexpected \"@\""},
      {"root ::= \"\xff\"\n", "invalid UTF-8"},
      {"::= \"a\"\n", "line 1 column 1: expected a rule name"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Grammar> g = ParseGbnf(c.gbnf);
    EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << c.gbnf;
    EXPECT_THAT(g.status().message(), HasSubstr(c.message)) << c.gbnf;
  }
  GrammarLimits small;
  small.max_elements = 100;
  EXPECT_THAT(ParseGbnf("root ::= \"a\"{50} \"b\"{60}", "root", small)
                  .status()
                  .message(),
              HasSubstr("expands to more than 100 elements"));
  GrammarLimits instant;
  instant.max_time = absl::ZeroDuration();
  EXPECT_THAT(ParseGbnf(kJsonGbnf, "root", instant).status().message(),
              HasSubstr("compiling the grammar took more than 0"));
  small.max_text_bytes = 8;
  EXPECT_THAT(
      ParseGbnf("root ::= \"abcdef\"", "root", small).status().message(),
      HasSubstr("more than the 8 allowed"));
}

// The grammars llama.cpp's grammar tests exercise (our own strings): the
// same behaviour, byte by byte. Token references (<[id]>) are refused here
// (ErrorsNameWhereAndWhat).
TEST(GbnfTest, LlamaCppGrammarsBehaveAlike) {
  struct Case {
    const char* gbnf;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {R"g(root ::= expr
expr ::= term ("+" term)*
term ::= number
number ::= [0-9]+)g",
       {"7", "3+4+5", "10+200"},
       {"+", "3+", "1+2+", "9b9", ""}},
      {R"g(root ::= expression
expression ::= term ws (("+"|"-") ws term)*
term ::= factor ws (("*"|"/") ws factor)*
factor ::= number | variable | "(" expression ")" | function-call
number ::= [0-9]+
variable ::= [a-zA-Z_][a-zA-Z0-9_]*
function-call ::= variable ws "(" (expression ("," ws expression)*)? ")"
ws ::= [ \t\n\r]?)g",
       {"a+b*(c-2)", "f(x, g(y))", "x * (y + 1)", "g()", "n1/n2-3"},
       {"(a", "f(,)", "a * / b", "x +", "f(x y)", "1 + 2)"}},
      // A multi-byte character is one `.`.
      {R"g(root ::= ... "abc" ...)g",
       {"xyzabcxyz",
        "\xC3\xA9\xC3\xA8\xC3\xAA"
        "abc\xC3\xB1\xC3\xB6\xC3\xBC"},
       {"xyabcxyz", "xyzabcxy", "xyzabcxyzz"}},
      {R"g(root ::= "a"*)g", {"", "a", std::string(60, 'a')}, {"b", "ab"}},
      {R"g(root ::= "a"+)g", {"a", std::string(60, 'a')}, {"", "b", "aab"}},
      {R"g(root ::= "a"?)g", {"", "a"}, {"aa", "b"}},
      {R"g(root ::= cons+ vowel* cons? (vowel cons)*
vowel ::= [aeiouy]
cons ::= [bcdfghjklmnpqrstvwxyz])g",
       {"by", "stop", "hmm", "kayak"},
       {"bb!", "ab", "stopp!"}},
      {R"g(root ::= [ab]{4})g", {"abab", "bbbb"}, {"aba", "ababa"}},
      {R"g(root ::= [ab]{4,})g", {"aaaa", "abababab"}, {"", "aab"}},
      {R"g(root ::= [ab]{0,4})g", {"", "b", "abba"}, {"ababa"}},
      {R"g(root ::= ("0x" [A-F0-9]{2} " "?){3,5})g",
       {"0x00 0x1F 0xAB", "0x00 0x01 0x02 0x03 0x04"},
       {"", "0x00", "0x00 0x01", "0x00 0x01 0x02 0x03 0x04 0x05",
        "0xab 0x00 0x00"}},
      // Repetitions of what may be empty.
      {R"g(root ::= ( [x]* )*)g", {"", "x", "xxx"}, {"y", "xy"}},
      {R"g(root ::= ("a"?)*)g", {"", "a", "aaa"}, {"b"}},
  };
  for (const Case& c : cases) {
    auto g = Compile(c.gbnf);
    ASSERT_NE(g, nullptr) << c.gbnf;
    GrammarAutomaton a(g);
    for (const std::string& t : c.yes) {
      EXPECT_TRUE(Accepts(a, t))
          << c.gbnf << "\n  should accept \"" << t << "\"";
    }
    for (const std::string& t : c.no) {
      EXPECT_FALSE(Accepts(a, t))
          << c.gbnf << "\n  should refuse \"" << t << "\"";
    }
  }
  // Nested repetitions of what may be empty: each (position, stack) is
  // expanded once per step, and the limits stop the rest, never a hang.
  auto nested = Compile(
      R"(root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99})");
  ASSERT_NE(nested, nullptr);
  const auto start = std::chrono::steady_clock::now();
  GrammarAutomaton n(nested);
  if (n.start() >= 0) n.Walk(n.start(), "abc");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Unproductive alternatives are dropped: every live state can still end.
TEST(GbnfTest, UnproductiveAlternativesAreDropped) {
  auto g = Compile("root ::= \"a\" | \"b\" loop\nloop ::= \"c\" loop\n");
  ASSERT_NE(g, nullptr);
  GrammarAutomaton a(g);
  EXPECT_TRUE(Accepts(a, "a"));
  EXPECT_EQ(a.Next(a.start(), 'b'), GrammarAutomaton::kDead);
}

TEST(GrammarAutomatonTest, StatesAreSharedAndTheLimitsHold) {
  auto g = Compile(kJsonGbnf);
  ASSERT_NE(g, nullptr);
  GrammarAutomaton a(g);
  // The same text walked twice reaches the same state, with no new ones.
  const int32_t s1 = a.Walk(a.start(), R"({"a": [1, 2, {"b": "x"}]})");
  const int64_t states = a.num_states();
  const int32_t s2 = a.Walk(a.start(), R"({"a": [1, 2, {"b": "x"}]})");
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(a.num_states(), states);
  EXPECT_TRUE(a.CanEnd(s1));
  // Inside a string at different depths the states differ (the stacks
  // below differ), at the same depth they are the same.
  EXPECT_EQ(a.Walk(a.start(), R"(["ab)"), a.Walk(a.start(), R"(["xyzzy)"));
  EXPECT_NE(a.Walk(a.start(), R"(["ab)"), a.Walk(a.start(), R"([["ab)"));

  auto fin = Compile(R"(root ::= "ab")");
  GrammarAutomaton f(fin);
  const int32_t done = f.Walk(f.start(), "ab");
  EXPECT_TRUE(f.CanEnd(done));
  EXPECT_TRUE(f.IsFinal(done));
  EXPECT_EQ(f.Next(done, 'c'), GrammarAutomaton::kDead);

  // Deep nesting needs new states at every depth: the limit stops it.
  GrammarAutomaton small(
      g, AutomatonLimits{.max_states = 40, .max_stacks = 1 << 20});
  EXPECT_EQ(small.Walk(small.start(), std::string(100, '[')),
            GrammarAutomaton::kOverflow);
}

}  // namespace
}  // namespace kvserve::constrain
