#include "core/tokenizer/pre_tokenizer.h"

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Split(std::string_view name, std::string_view text,
                               bool jit = true) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::ForName(name, {.jit = jit});
  EXPECT_TRUE(pre.ok()) << pre.status();
  if (!pre.ok()) return {};
  absl::StatusOr<std::vector<std::string_view>> pieces = pre->Split(text);
  EXPECT_TRUE(pieces.ok()) << pieces.status();
  if (!pieces.ok()) return {};
  return std::vector<std::string>(pieces->begin(), pieces->end());
}

TEST(PreTokenizerTest, EveryNameCompilesWithAndWithoutJit) {
  const std::vector<std::string> names = PreTokenizer::SupportedNames();
  for (const char* listed :
       {"default", "gpt-2", "llama-bpe", "llama3", "llama-v3", "qwen2",
        "deepseek-llm", "deepseek-coder", "falcon", "mpt", "starcoder",
        "refact", "smollm", "command-r"}) {
    EXPECT_THAT(names, ::testing::Contains(listed));
  }
  for (const std::string& name : names) {
    for (bool jit : {true, false}) {
      absl::StatusOr<PreTokenizer> pre = PreTokenizer::ForName(name, {jit});
      ASSERT_TRUE(pre.ok()) << name << ": " << pre.status();
      EXPECT_EQ(pre->name(), name);
#if defined(__x86_64__)
      EXPECT_EQ(pre->jit(), jit) << name;  // PCRE2 has a JIT for x86-64
#endif
    }
  }
  EXPECT_TRUE(PreTokenizer::ForName("llama3")->ignore_merges());
  EXPECT_TRUE(PreTokenizer::ForName("llama-bpe")->ignore_merges());
  EXPECT_FALSE(PreTokenizer::ForName("gpt-2")->ignore_merges());
  EXPECT_FALSE(PreTokenizer::ForName("qwen2")->ignore_merges());
}

TEST(PreTokenizerTest, UnknownNameIsRefusedListingTheSupportedOnes) {
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::ForName("gpt-3");
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(pre.status().message(), HasSubstr("\"gpt-3\""));
  EXPECT_THAT(pre.status().message(), HasSubstr("tokenizer.ggml.pre"));
  for (const std::string& name : PreTokenizer::SupportedNames()) {
    EXPECT_THAT(pre.status().message(), HasSubstr(name));
  }
  EXPECT_FALSE(PreTokenizer::ForName("").ok());
}

TEST(PreTokenizerTest, BadRegexIsAnErrorNamingIt) {
  PreTokenizerSpec spec{.names = {"mine"}, .regexes = {"\\p{L}+", "(a"}};
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::FromSpec("mine", spec, {});
  ASSERT_FALSE(pre.ok());
  EXPECT_EQ(pre.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(pre.status().message(), HasSubstr("\"(a\""));
  EXPECT_THAT(pre.status().message(), HasSubstr("mine"));
  spec.regexes = {"[^\\S]"};
  EXPECT_FALSE(PreTokenizer::FromSpec("mine", spec, {}).ok());
}

// Splits llama.cpp's unicode_regex_split gives (src/unicode.cpp, with its
// table in src/llama-vocab.cpp) for the same text.
TEST(PreTokenizerTest, SplitsAsLlamaCpp) {
  EXPECT_THAT(Split("default", "Hello, world! 12345 $x+=y"),
              ElementsAre("Hello", ",", " world", "!", " ", "123", "45", " ",
                          "$", "x", "+=", "y"));
  EXPECT_THAT(Split("default", "it's 3.14159"),
              ElementsAre("it", "'", "s", " ", "3", ".", "141", "59"));
  EXPECT_THAT(Split("gpt-2", "Hello world  it's 12345 dollars!!\n\nOK"),
              ElementsAre("Hello", " world", " ", " it", "'s", " 12345",
                          " dollars", "!!", "\n", "\n", "OK"));
  EXPECT_THAT(Split("mpt", "a \tb  c"),
              ElementsAre("a", " ", "\t", "b", " ", " c"));
  EXPECT_THAT(Split("qwen2", "I'm here, it's 12345 dollars!!\n\nOK"),
              ElementsAre("I", "'m", " here", ",", " it", "'s", " ", "1", "2",
                          "3", "4", "5", " dollars", "!!\n\n", "OK"));
  EXPECT_THAT(Split("deepseek-llm",
                    "Hello, world! 12345\n\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8"
                    "apple\xE5\xB7\xA5\xE4\xBD\x9C 3.5"),
              ElementsAre("Hello", ",", " world", "!", " ", "12345", "\n",
                          "\xE6\x88\x91\xE6\x83\xB3\xE5\x9C\xA8", "apple",
                          "\xE5\xB7\xA5\xE4\xBD\x9C", " ", "3", ".", "5"));
  EXPECT_THAT(
      Split("deepseek-coder",
            "def f(x):\n    return x*42 # \xE6\x97\xA5\xE6\x9C\xAC"),
      ElementsAre("def", " f", "(", "x", "):", "\n", "   ", " return", " x",
                  "*", "4", "2", " #", " ", "\xE6\x97\xA5\xE6\x9C\xAC"));
  EXPECT_THAT(Split("deepseek-v3",
                    "Hello, world! 12345 \xE6\x97\xA5\xE3\x83\x86\xE3\x82\xAD"),
              ElementsAre("Hello", ",", " world", "!", " ", "123", "45", " ",
                          "\xE6\x97\xA5\xE3\x83\x86\xE3\x82\xAD"));
  EXPECT_THAT(Split("falcon", "Hello, world! 12345 $x+=y`z"),
              ElementsAre("Hello", ",", " world", "!", " ", "123", "45", " ",
                          "$", "x", "+=", "y", "`", "z"));
  for (const char* name : {"starcoder", "refact", "smollm", "command-r"}) {
    EXPECT_THAT(Split(name, "def f(x): return x*42  # ok"),
                ElementsAre("def", " f", "(", "x", "):", " return", " x", "*",
                            "4", "2", " ", " #", " ok"))
        << name;
  }
  EXPECT_THAT(Split("tekken", "HelloWorld iPhone 12345 ok!\n"),
              ElementsAre("Hello", "World", " i", "Phone", " ", "1", "2", "3",
                          "4", "5", " ok", "!\n"));
}

TEST(PreTokenizerTest, Llama3) {
  for (const char* name : {"llama-bpe", "llama3", "llama-v3"}) {
    EXPECT_THAT(Split(name, "Hello world"), ElementsAre("Hello", " world"));
    EXPECT_THAT(Split(name, "I'm here, it's 12345 dollars!!\n\nOK"),
                ElementsAre("I", "'m", " here", ",", " it", "'s", " ", "123",
                            "45", " dollars", "!!\n\n", "OK"));
  }
  const auto split = [](std::string_view text) {
    return Split("llama-bpe", text);
  };
  EXPECT_THAT(split("HE'LL we'VE they're"),
              ElementsAre("HE", "'LL", " we", "'VE", " they", "'re"));
  EXPECT_THAT(split("a  \n\n  b"), ElementsAre("a", "  \n\n", " ", " b"));
  EXPECT_THAT(split("   "), ElementsAre("   "));
  EXPECT_THAT(split("x\t"), ElementsAre("x", "\t"));
  EXPECT_THAT(split("hello\r\nworld"), ElementsAre("hello", "\r\n", "world"));
  EXPECT_THAT(split(" \nfoo"), ElementsAre(" \n", "foo"));
  EXPECT_THAT(split("$100 ?!"), ElementsAre("$", "100", " ?!"));
  EXPECT_THAT(split("(x)"), ElementsAre("(x", ")"));
  // CJK letters (Lo), Arabic-Indic digits (Nd), emoji (So), accented Latin.
  EXPECT_THAT(
      split("\xE6\x97\xA5\xE6\x9C\xAC \xE3\x83\x86\xE3\x82\xAD"),
      ElementsAre("\xE6\x97\xA5\xE6\x9C\xAC", " \xE3\x83\x86\xE3\x82\xAD"));
  EXPECT_THAT(split("\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"),
              ElementsAre("\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"));
  EXPECT_THAT(split("\xF0\x9F\x98\x80\xF0\x9F\x98\x80 ok"),
              ElementsAre("\xF0\x9F\x98\x80\xF0\x9F\x98\x80", " ok"));
  EXPECT_THAT(split("caf\xC3\xA9 na\xC3\xAFve"),
              ElementsAre("caf\xC3\xA9", " na\xC3\xAFve"));
  EXPECT_TRUE(split("").empty());
}

// Where the regex text and llama.cpp part, the regex (which is what the
// model's own tokenizer runs) wins.
TEST(PreTokenizerTest, RegexSemanticsWhereLlamaCppDiffers) {
  // \s is White_Space: U+0085 (NEL) is, U+180E (Mongolian vowel separator,
  // Cf since Unicode 6.3) and U+200B are not, though PCRE2's own \s takes
  // U+180E.
  EXPECT_THAT(Split("gpt-2", "a\xC2\x85\xC2\x85"),
              ElementsAre("a", "\xC2\x85\xC2\x85"));
  EXPECT_THAT(Split("gpt-2",
                    "a \xE1\xA0\x8E"
                    "b"),
              ElementsAre("a", " \xE1\xA0\x8E", "b"));
  EXPECT_THAT(Split("gpt-2", "a \xE2\x80\x8B"),
              ElementsAre("a", " \xE2\x80\x8B"));
  // (?i:'s|...) folds case by Unicode: "'ſ" (long s) is "'s".
  EXPECT_THAT(Split("llama-bpe", "x'\xC5\xBFy"),
              ElementsAre("x", "'\xC5\xBF", "y"));
  // '~' is \p{S} (Sm); llama.cpp's ASCII list of \p{S} omits it.
  EXPECT_THAT(Split("deepseek-v3", " ~\xC2\xA9_"), ElementsAre(" ~\xC2\xA9_"));
  // Tekken's letter classes include \p{M}: a Khmer word (Lo + Mn/Mc) stays
  // whole, where llama.cpp's rewrite splits it at every vowel sign.
  EXPECT_THAT(Split("tekken", " \xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93"),
              ElementsAre(" \xE1\x9E\x80\xE1\x9E\xB6\xE1\x9E\x93"));
  // U+3000 (ideographic space) is in DeepSeek's punctuation class, which
  // llama.cpp never sees (it turns non-ASCII spaces into \v first).
  EXPECT_THAT(Split("deepseek-llm",
                    "\xE3\x80\x80"
                    "a"),
              ElementsAre("\xE3\x80\x80", "a"));
  // $ is the end of the piece only, not before a final newline.
  EXPECT_THAT(Split("deepseek-llm", "x  "), ElementsAre("x", "  "));
}

TEST(PreTokenizerTest, InvalidUtf8IsKeptBetweenMatches) {
  EXPECT_THAT(Split("llama-bpe",
                    "\xFF\xFE"
                    "ab"),
              ElementsAre("\xFF\xFE", "ab"));
  EXPECT_THAT(Split("gpt-2", "ab\xC3(cd"),
              ElementsAre("ab", "\xC3", "(", "cd"));
  EXPECT_THAT(Split("gpt-2", std::string_view("a\0b", 3)),
              ElementsAre("a", std::string("\0", 1), "b"));
}

TEST(PreTokenizerTest, PiecesConcatenateToAnyInput) {
  std::mt19937 rng(5);
  const std::vector<std::string> parts = {"a",
                                          "Z",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\r\n",
                                          "\t",
                                          "'s",
                                          "'LL",
                                          "7",
                                          "42",
                                          "!",
                                          "...",
                                          "$+",
                                          "\xC3\xA9",
                                          "\xE6\x97\xA5",
                                          "\xF0\x9F\x98\x80",
                                          "\xE3\x80\x80",
                                          "\xCC\x81",
                                          "\xFF",
                                          "\xC3",
                                          "\x80",
                                          "\xED\xA0\x80" /* a surrogate */};
  std::vector<PreTokenizer> jit, interpreted;
  for (const std::string& name : PreTokenizer::SupportedNames()) {
    jit.push_back(*PreTokenizer::ForName(name, {.jit = true}));
    interpreted.push_back(*PreTokenizer::ForName(name, {.jit = false}));
  }
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int k = rng() % 16; k > 0; --k) text += parts[rng() % parts.size()];
    if (trial % 10 == 0) {
      for (char& c : text) c = static_cast<char>(rng());
    }
    for (size_t i = 0; i < jit.size(); ++i) {
      absl::StatusOr<std::vector<std::string_view>> pieces = jit[i].Split(text);
      ASSERT_TRUE(pieces.ok()) << pieces.status();
      std::string joined;
      for (std::string_view p : *pieces) {
        ASSERT_FALSE(p.empty()) << jit[i].name();
        joined += p;
      }
      ASSERT_EQ(joined, text) << jit[i].name();
      absl::StatusOr<std::vector<std::string_view>> same =
          interpreted[i].Split(text);
      ASSERT_TRUE(same.ok()) << same.status();
      EXPECT_EQ(*same, *pieces) << jit[i].name();
    }
  }
}

// Runs of one class far longer than any prompt neither fail (no PCRE2
// resource limit) nor split differently from a short run.
TEST(PreTokenizerTest, LongRuns) {
  for (const std::string& name : PreTokenizer::SupportedNames()) {
    for (bool jit : {true, false}) {
      absl::StatusOr<PreTokenizer> pre = PreTokenizer::ForName(name, {jit});
      ASSERT_TRUE(pre.ok());
      for (const std::string unit : {" ", "a", "1", "!", " \n", "x "}) {
        std::string text;
        for (int i = 0; i < 200000; ++i) text += unit;
        absl::StatusOr<std::vector<std::string_view>> pieces = pre->Split(text);
        ASSERT_TRUE(pieces.ok()) << name << " jit " << jit << " \"" << unit
                                 << "\": " << pieces.status();
        size_t bytes = 0;
        for (std::string_view p : *pieces) bytes += p.size();
        EXPECT_EQ(bytes, text.size());
      }
    }
  }
}

}  // namespace
}  // namespace kvserve
