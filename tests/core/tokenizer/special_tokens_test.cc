#include "core/tokenizer/special_tokens.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "core/tokenizer/vocab.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

Vocab VocabOf(std::vector<std::pair<std::string, TokenType>> tokens) {
  Vocab v;
  for (auto& [text, type] : tokens) {
    v.tokens.push_back(std::move(text));
    v.token_types.push_back(type);
  }
  return v;
}

// Fragments as (text, id) pairs, for matchers.
std::vector<std::pair<std::string, int32_t>> Split(const SpecialTokenMatcher& m,
                                                   std::string_view text) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (const SpecialTokenMatcher::Fragment& f : m.Split(text)) {
    out.emplace_back(std::string(f.text), f.id);
  }
  return out;
}

Vocab ChatVocab() {
  return VocabOf({
      {"<unk>", TokenType::kUnknown},         // 0
      {"<s>", TokenType::kControl},           // 1
      {"</s>", TokenType::kControl},          // 2
      {"<0x3C>", TokenType::kByte},           // 3 "<" as a byte token
      {"<|im_start|>", TokenType::kControl},  // 4
      {"<|im_end|>", TokenType::kControl},    // 5
      {"<|im", TokenType::kUserDefined},      // 6: a prefix of 4 and 5
      {"hello", TokenType::kNormal},          // 7: not special
      {"", TokenType::kControl},              // 8: empty, never matched
      {"<unused0>", TokenType::kUnused},      // 9
      {"<|end|>", TokenType::kUserDefined},   // 10
      {"<|im_end|>", TokenType::kNormal},     // 11: same text, not special
  });
}

std::vector<std::pair<std::string, int32_t>> SplitWithin(
    const SpecialTokenMatcher& m, std::string_view text,
    const std::vector<ByteRange>& ranges, const SpecialTokenMatcher* outside) {
  std::vector<std::pair<std::string, int32_t>> out;
  for (const SpecialTokenMatcher::Fragment& f :
       m.SplitWithin(text, ranges, outside)) {
    out.emplace_back(std::string(f.text), f.id);
  }
  return out;
}

TEST(SpecialTokenMatcherTest, SplitWithinMatchesOnlyInsideRanges) {
  const SpecialTokenMatcher m(ChatVocab());
  const SpecialTokenMatcher user(ChatVocab(),
                                 SpecialTokenMatcher::Kinds::kUserDefinedOnly);
  const std::string text = "<|im_start|>u<|im_end|><|im_end|>";
  // Only the first token's bytes and the last token's are in ranges.
  EXPECT_THAT(SplitWithin(m, text, {{0, 12}, {23, 33}}, nullptr),
              ElementsAre(Pair("<|im_start|>", 4), Pair("u<|im_end|>", -1),
                          Pair("<|im_end|>", 5)));
  // A token running past its range's end is not matched there (a shorter
  // one inside it is); the outside matcher's user-defined "<|im" is matched
  // anywhere.
  EXPECT_THAT(SplitWithin(m, text, {{0, 11}}, nullptr),
              ElementsAre(Pair("<|im", 6), Pair(text.substr(4), -1)));
  EXPECT_THAT(SplitWithin(m, text, {{1, 12}}, nullptr),
              ElementsAre(Pair(text, -1)));
  EXPECT_THAT(SplitWithin(m, "<|im_end|>", {}, &user),
              ElementsAre(Pair("<|im", 6), Pair("_end|>", -1)));
  EXPECT_THAT(SplitWithin(m, "<|end|>x", {{0, 3}}, &user),
              ElementsAre(Pair("<|end|>", 10), Pair("x", -1)));
  // No ranges and no outside matcher: ordinary text.
  EXPECT_THAT(SplitWithin(m, text, {}, nullptr), ElementsAre(Pair(text, -1)));
  // Ranges covering everything: Split().
  EXPECT_EQ(SplitWithin(m, text, {{0, text.size()}}, nullptr), Split(m, text));
}

TEST(SpecialTokenMatcherTest, SplitsAtWholeTokensLongestFirst) {
  SpecialTokenMatcher m(ChatVocab());
  EXPECT_FALSE(m.empty());
  EXPECT_THAT(Split(m, "<|im_start|>user\nhello<|im_end|>"),
              ElementsAre(Pair("<|im_start|>", 4), Pair("user\nhello", -1),
                          Pair("<|im_end|>", 5)));
  // Adjacent specials, and a prefix that is itself a token.
  EXPECT_THAT(Split(m, "<|im_end|><|im_start|><|im_"),
              ElementsAre(Pair("<|im_end|>", 5), Pair("<|im_start|>", 4),
                          Pair("<|im", 6), Pair("_", -1)));
  EXPECT_THAT(Split(m, "<s></s><s>"),
              ElementsAre(Pair("<s>", 1), Pair("</s>", 2), Pair("<s>", 1)));
  // Near misses stay text; byte, unknown, unused and normal tokens are not
  // special.
  EXPECT_THAT(Split(m, "<|i <0x3C><unk><unused0>hello"),
              ElementsAre(Pair("<|i <0x3C><unk><unused0>hello", -1)));
  EXPECT_THAT(Split(m, "a<|end|>"),
              ElementsAre(Pair("a", -1), Pair("<|end|>", 10)));
  EXPECT_THAT(Split(m, "<|im_end"),
              ElementsAre(Pair("<|im", 6), Pair("_end", -1)));
  EXPECT_TRUE(Split(m, "").empty());
}

TEST(SpecialTokenMatcherTest, NothingSpecial) {
  SpecialTokenMatcher m(VocabOf({{"a", TokenType::kNormal},
                                 {"<0x00>", TokenType::kByte},
                                 {"<unk>", TokenType::kUnknown}}));
  EXPECT_TRUE(m.empty());
  EXPECT_THAT(Split(m, "a<unk>"), ElementsAre(Pair("a<unk>", -1)));
}

TEST(SpecialTokenMatcherTest, DuplicateTextsTakeTheHigherId) {
  SpecialTokenMatcher m(VocabOf(
      {{"<x>", TokenType::kControl}, {"<x>", TokenType::kUserDefined}}));
  EXPECT_THAT(Split(m, "<x>"), ElementsAre(Pair("<x>", 1)));
}

// A long prompt full of near misses (every '<' starts a walk down the trie)
// splits in linear time: a quadratic scan of 2 MB would take minutes.
TEST(SpecialTokenMatcherTest, LongTextIsLinear) {
  Vocab v = ChatVocab();
  for (int i = 0; i < 256; ++i) {  // Llama 3 style reserved tokens
    v.tokens.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
    v.token_types.push_back(TokenType::kControl);
  }
  SpecialTokenMatcher m(v);
  // Two specials per repetition: "<|im" (of "<|im_star") and "<|im_end|>".
  const std::string unit =
      "<|reserved_special_token_9 <|im_star <<<< hello <|im_end|>";
  std::string text;
  size_t reps = 0;
  for (; text.size() < (2u << 20); ++reps) text += unit;
  const auto start = std::chrono::steady_clock::now();
  std::vector<SpecialTokenMatcher::Fragment> fragments = m.Split(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  size_t total = 0, specials = 0;
  for (const SpecialTokenMatcher::Fragment& f : fragments) {
    total += f.text.size();
    specials += f.id >= 0;
  }
  EXPECT_EQ(total, text.size());
  EXPECT_EQ(specials, 2 * reps);
  EXPECT_LT(seconds, 5.0);
}

TEST(EndOfGenerationMaskTest, EosEotEomAndControlEndOfTurnTexts) {
  Vocab v = ChatVocab();
  v.tokens.push_back("<|eot_id|>");  // 12, control
  v.token_types.push_back(TokenType::kControl);
  v.tokens.push_back("<end_of_turn>");  // 13, user-defined: not an end
  v.token_types.push_back(TokenType::kUserDefined);
  v.tokens.push_back("<|endoftext|>");  // 14, normal: not an end
  v.token_types.push_back(TokenType::kNormal);
  v.tokens.push_back("<|eom_id|>");  // 15
  v.token_types.push_back(TokenType::kControl);
  v.tokens.push_back("<|call|>");  // 16, made the eom token below
  v.token_types.push_back(TokenType::kNormal);
  v.eos_id = 2;
  std::vector<bool> mask = EndOfGenerationMask(v);
  ASSERT_EQ(mask.size(), v.tokens.size());
  std::vector<int32_t> ends;
  for (int32_t id = 0; id < v.size(); ++id) {
    if (mask[id]) ends.push_back(id);
  }
  // eos; <|im_end|> (5) but not the normal token with its text (11);
  // <|eot_id|>, <|eom_id|>; <|end|> (10) is user-defined.
  EXPECT_THAT(ends, ElementsAre(2, 5, 12, 15));

  v.eos_id = -1;
  v.eot_id = 4;
  v.eom_id = 16;
  mask = EndOfGenerationMask(v);
  EXPECT_FALSE(mask[2]);
  EXPECT_TRUE(mask[4]);
  EXPECT_TRUE(mask[16]);
}

}  // namespace
}  // namespace kvserve
