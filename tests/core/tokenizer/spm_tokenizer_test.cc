#include "core/tokenizer/spm_tokenizer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/tokenizer/llama2c_vocab.h"
#include "core/tokenizer/tokenizer_factory.h"
#include "core/tokenizer/vocab.h"
#include "core/util/check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/golden_json.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

std::unique_ptr<Tokenizer> MustCreate(const Vocab& vocab) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(vocab);
  KVSERVE_CHECK(t.ok());
  return std::move(*t);
}

// Concatenates DecodeToken over `ids`, each with its predecessor.
std::string DecodeAll(const Tokenizer& t, const std::vector<int32_t>& ids,
                      int32_t prev = -1) {
  std::string out;
  for (int32_t id : ids) {
    out += t.DecodeToken(prev, id);
    prev = id;
  }
  return out;
}

// llama2.c run.c's encode(), transcribed literally (O(n^2) merging over
// whole-vocabulary lookups), as the reference for SpmTokenizer.
std::vector<int32_t> ReferenceEncode(const Vocab& v, const std::string& text,
                                     bool bos) {
  auto lookup = [&](const std::string& s) -> int32_t {
    int32_t found = -1;
    for (int32_t i = 0; i < v.size(); ++i) {
      if (v.tokens[i] == s) found = i;
    }
    return found;
  };
  auto escape = [](std::string s) {
    std::string out;
    for (char c : s)
      out += c == ' ' ? std::string("\xE2\x96\x81") : std::string(1, c);
    return out;
  };
  std::vector<int32_t> tokens;
  if (bos) tokens.push_back(1);
  if (text.empty()) return tokens;
  tokens.push_back(lookup("\xE2\x96\x81"));
  std::string buf;
  for (size_t i = 0; i < text.size(); ++i) {
    unsigned char c = text[i];
    if ((c & 0xC0) != 0x80) buf.clear();
    buf += static_cast<char>(c);
    if (i + 1 < text.size() && (text[i + 1] & 0xC0) == 0x80 && buf.size() < 4) {
      continue;
    }
    int32_t id = lookup(escape(buf));
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (unsigned char b : buf) tokens.push_back(b + 3);
    }
    buf.clear();
  }
  while (true) {
    float best_score = -1e10;
    int32_t best_id = -1;
    int best_idx = -1;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      int32_t id = lookup(v.tokens[tokens[i]] + v.tokens[tokens[i + 1]]);
      if (id != -1 && v.scores[id] > best_score) {
        best_score = v.scores[id];
        best_id = id;
        best_idx = static_cast<int>(i);
      }
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + best_idx + 1);
  }
  return tokens;
}

TEST(ByteLevelVocabTest, Layout) {
  Vocab v = ByteLevelVocab();
  ASSERT_TRUE(v.Validate().ok());
  ASSERT_EQ(v.size(), 259);
  EXPECT_EQ(v.tokens[0], "<unk>");
  EXPECT_EQ(v.tokens[1], "<s>");
  EXPECT_EQ(v.tokens[2], "</s>");
  EXPECT_EQ(v.tokens[3], "<0x00>");
  EXPECT_EQ(v.tokens[3 + 0xAB], "<0xAB>");
  EXPECT_EQ(v.tokens[258], "<0xFF>");
  EXPECT_EQ(v.type(0), TokenType::kUnknown);
  EXPECT_EQ(v.type(1), TokenType::kControl);
  EXPECT_EQ(v.type(100), TokenType::kByte);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.unk_id, 0);
}

TEST(ByteLevelVocabTest, EncodesEveryByteAndRoundTrips) {
  std::unique_ptr<Tokenizer> t = MustCreate(ByteLevelVocab());
  EXPECT_EQ(t->vocab_size(), 259);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_THAT(t->Encode("Hi", {}), ElementsAre(1, 'H' + 3, 'i' + 3));
  EXPECT_THAT(t->Encode("", {}), ElementsAre(1));
  EXPECT_THAT(t->Encode(" a", {.add_bos = false}),
              ElementsAre(' ' + 3, 'a' + 3));

  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::string text(rng() % 40, '\0');
    for (char& c : text) c = static_cast<char>(rng());
    std::vector<int32_t> ids = t->Encode(text, {});
    ASSERT_EQ(ids.size(), text.size() + 1);
    EXPECT_EQ(DecodeAll(*t, ids), text);
  }
  for (std::string text :
       {"h\xC3\xA9llo \xF0\x9F\x98\x80", "\xE6\x97\xA5\xE6\x9C\xAC"}) {
    EXPECT_EQ(DecodeAll(*t, t->Encode(text, {})), text);
  }
  EXPECT_EQ(t->DecodeToken(-1, 1), "");
  EXPECT_EQ(t->DecodeToken(-1, 2), "");
  EXPECT_EQ(t->DecodeToken(-1, 259), "");
  EXPECT_EQ(t->DecodeToken(-1, -5), "");
  EXPECT_EQ(t->Piece(3 + 'A'), "<0x41>");
  EXPECT_EQ(t->Piece(1), "<s>");
}

// A hand-made vocabulary whose byte tokens are not at id byte + 3, to show
// byte fallback looks tokens up by piece text.
Vocab SmallVocab() {
  Vocab v;
  auto add = [&](std::string piece, float score, TokenType type) {
    v.tokens.push_back(std::move(piece));
    v.scores.push_back(score);
    v.token_types.push_back(type);
  };
  add("<unk>", 0, TokenType::kUnknown);         // 0
  add("<s>", 0, TokenType::kControl);           // 1
  add("</s>", 0, TokenType::kControl);          // 2
  add("\xE2\x96\x81", -1, TokenType::kNormal);  // 3 "▁"
  add("a", -1, TokenType::kNormal);             // 4
  add("b", -1, TokenType::kNormal);             // 5
  add("ab", -5, TokenType::kNormal);            // 6
  add("bb", -3, TokenType::kNormal);            // 7
  add("\xE2\x96\x81"
      "a",
      -4, TokenType::kNormal);         // 8 "▁a"
  add("<0xC3>", 0, TokenType::kByte);  // 9
  add("<0xA9>", 0, TokenType::kByte);  // 10
  add("aa", -2, TokenType::kNormal);   // 11
  add("<0x21>", 0, TokenType::kByte);  // 12 "!"
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

TEST(SpmTokenizerTest, MergesHighestScoreFirstThenLeftmost) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallVocab());
  const EncodeOptions raw{.add_bos = false, .add_dummy_prefix = false};
  // "abb": "bb" (-3) beats "ab" (-5).
  EXPECT_THAT(t->Encode("abb", raw), ElementsAre(4, 7));
  // "aaa": two "aa" candidates with equal score; the leftmost wins.
  EXPECT_THAT(t->Encode("aaa", raw), ElementsAre(11, 4));
  // Dummy prefix: "▁a" (-4) then "ab" is no longer possible.
  EXPECT_THAT(t->Encode("ab", {.add_bos = true}), ElementsAre(1, 8, 5));
  EXPECT_THAT(t->Encode("ab", {.add_bos = false}), ElementsAre(8, 5));
  // Spaces become "▁".
  EXPECT_THAT(t->Encode("a a", raw), ElementsAre(4, 8));
  EXPECT_THAT(t->Encode("", {}), ElementsAre(1));
}

TEST(SpmTokenizerTest, ByteFallbackByPieceTextOrUnknown) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallVocab());
  const EncodeOptions raw{.add_bos = false, .add_dummy_prefix = false};
  // "é" = C3 A9 has no piece; its bytes have tokens 9 and 10.
  EXPECT_THAT(t->Encode("\xC3\xA9!", raw), ElementsAre(9, 10, 12));
  // "z" has neither a piece nor a byte token: unknown.
  EXPECT_THAT(t->Encode("z", raw), ElementsAre(0));
  EXPECT_EQ(DecodeAll(*t, {9, 10, 12}), "\xC3\xA9!");
}

TEST(SpmTokenizerTest, DecodeStripsSpaceOnlyAfterBos) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallVocab());
  EXPECT_EQ(t->DecodeToken(1, 8), "a");
  EXPECT_EQ(t->DecodeToken(4, 8), " a");
  EXPECT_EQ(t->DecodeToken(-1, 8), " a");
  EXPECT_EQ(t->DecodeToken(4, 1), "");
  EXPECT_EQ(t->DecodeToken(4, 2), "");
  EXPECT_EQ(t->Piece(8),
            "\xE2\x96\x81"
            "a");
}

// SmallVocab with chat-style special tokens.
Vocab SmallChatVocab() {
  Vocab v = SmallVocab();
  auto add = [&](std::string piece, TokenType type) {
    v.tokens.push_back(std::move(piece));
    v.scores.push_back(0);
    v.token_types.push_back(type);
  };
  add("<|im_start|>", TokenType::kControl);  // 13
  add("<|im_end|>", TokenType::kControl);    // 14
  add("<|im", TokenType::kUserDefined);      // 15: a prefix of 13 and 14
  add("<|end|>", TokenType::kUserDefined);   // 16
  return v;
}

TEST(SpmTokenizerTest, ParseSpecialMatchesWholeTokens) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallChatVocab());
  const EncodeOptions special{.add_bos = false, .parse_special = true};
  // The dummy prefix goes on the first text and on text after a special
  // ("▁a" = 8, "▁" = 3), as in llama.cpp.
  EXPECT_THAT(t->Encode("<|im_start|>ab", special), ElementsAre(13, 8, 5));
  EXPECT_THAT(t->Encode("a<|im_start|>b<|im_end|>", special),
              ElementsAre(8, 13, 3, 5, 14));
  // A special at the start or end, alone, or next to another.
  EXPECT_THAT(t->Encode("<|im_start|>", {.parse_special = true}),
              ElementsAre(1, 13));
  EXPECT_THAT(t->Encode("a<|im_end|>", special), ElementsAre(8, 14));
  EXPECT_THAT(t->Encode("<|im_end|><|im_start|>", special),
              ElementsAre(14, 13));
  // Longest match: "<|im_start|>" over its prefix "<|im", which still
  // matches where nothing longer does; user-defined tokens are special too.
  EXPECT_THAT(t->Encode("<|ima<|end|>", special), ElementsAre(15, 8, 16));
  // Without the dummy prefix, no fragment gets it.
  EXPECT_THAT(t->Encode("<|im_start|>ab<|im_end|>a", {.add_bos = false,
                                                      .add_dummy_prefix = false,
                                                      .parse_special = true}),
              ElementsAre(13, 6, 14, 4));
  // BOS is still added per the options and the vocabulary.
  EXPECT_THAT(t->Encode("a", {.parse_special = true}), ElementsAre(1, 8));
  EXPECT_THAT(t->Encode("", {.parse_special = true}), ElementsAre(1));
}

TEST(SpmTokenizerTest, ParseSpecialIsOffByDefault) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallChatVocab());
  for (const char* text : {"<|im_start|>", "a<|im_end|>b", "<|im<s>"}) {
    std::vector<int32_t> plain = t->Encode(text, {});
    EXPECT_THAT(plain, ::testing::Not(::testing::Contains(13)));
    EXPECT_THAT(plain, ::testing::Not(::testing::Contains(14)));
    EXPECT_THAT(plain, ::testing::Not(::testing::Contains(15)));
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 1) << text;
  }
  // Same as a vocabulary without the special tokens.
  std::unique_ptr<Tokenizer> base = MustCreate(SmallVocab());
  EXPECT_EQ(t->Encode("x<|im_end|>a", {}), base->Encode("x<|im_end|>a", {}));
}

TEST(SpmTokenizerTest, ParseSpecialDecodesControlTokensToNothing) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallChatVocab());
  EXPECT_EQ(t->DecodeToken(-1, 13), "");
  EXPECT_EQ(t->DecodeToken(-1, 14), "");
  EXPECT_EQ(t->DecodeToken(-1, 15), "<|im");  // user-defined: its text
  EXPECT_EQ(t->Piece(13), "<|im_start|>");
  const EncodeOptions raw{
      .add_bos = false, .add_dummy_prefix = false, .parse_special = true};
  EXPECT_EQ(DecodeAll(*t, t->Encode("ab<|im_end|>a<|ima<|im_start|>", raw)),
            "aba<|ima");
  // With the dummy prefix, text after a special decodes with its space.
  EXPECT_EQ(DecodeAll(*t, t->Encode("<|im_start|>ab", {.parse_special = true})),
            " ab");
}

TEST(SpmTokenizerTest, EndOfGeneration) {
  Vocab v = SmallChatVocab();
  std::unique_ptr<Tokenizer> t = MustCreate(v);
  EXPECT_TRUE(t->IsEndOfGeneration(2));    // eos
  EXPECT_TRUE(t->IsEndOfGeneration(14));   // control "<|im_end|>"
  EXPECT_FALSE(t->IsEndOfGeneration(16));  // user-defined "<|end|>"
  EXPECT_FALSE(t->IsEndOfGeneration(13));
  EXPECT_FALSE(t->IsEndOfGeneration(1));
  EXPECT_FALSE(t->IsEndOfGeneration(-1));
  EXPECT_FALSE(t->IsEndOfGeneration(v.size()));
  v.eot_id = 13;
  v.eom_id = 4;
  t = MustCreate(v);
  EXPECT_TRUE(t->IsEndOfGeneration(13));
  EXPECT_TRUE(t->IsEndOfGeneration(4));
  v.eot_id = 99;
  EXPECT_FALSE(CreateTokenizer(v).ok());
}

TEST(SpmTokenizerTest, RejectsBadVocab) {
  Vocab v = SmallVocab();
  v.scores.pop_back();
  EXPECT_FALSE(CreateTokenizer(v).ok());
  v = SmallVocab();
  v.bos_id = 99;
  EXPECT_FALSE(CreateTokenizer(v).ok());
  v = SmallVocab();
  v.model = "bert";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(v);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("bert"), std::string::npos);
}

class Tok512Test : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path = kvserve::testing::SharedDir() + "/models/tok512.bin";
    absl::StatusOr<Vocab> vocab = ReadLlama2cVocab(path);
    if (!vocab.ok()) {
      GTEST_SKIP() << "needs " << path << ": " << vocab.status();
    }
    std::optional<std::string> golden = kvserve::testing::ReadWholeFile(
        kvserve::testing::SharedDir() + "/golden/stories260K_greedy.json");
    if (!golden)
      GTEST_SKIP() << "needs ../shared/golden/stories260K_greedy.json";
    golden_ = *golden;
    vocab_ = *vocab;
    tokenizer_ = MustCreate(vocab_);
  }
  std::string golden_;
  Vocab vocab_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(Tok512Test, VocabularyShape) {
  EXPECT_EQ(vocab_.size(), 512);
  EXPECT_EQ(vocab_.tokens[1], "<s>");
  EXPECT_EQ(vocab_.tokens[2], "</s>");
  EXPECT_EQ(vocab_.type(0), TokenType::kUnknown);
  EXPECT_EQ(vocab_.type(1), TokenType::kControl);
  EXPECT_EQ(vocab_.type(3), TokenType::kByte);
  EXPECT_EQ(vocab_.type(258), TokenType::kByte);
  EXPECT_EQ(vocab_.type(259), TokenType::kNormal);
  EXPECT_EQ(vocab_.tokens[261],
            "\xE2\x96\x81"
            "a");
}

TEST_F(Tok512Test, EncodesGoldenPrompt) {
  std::vector<int32_t> want =
      kvserve::testing::JsonIntArray(golden_, "prompt_token_ids");
  std::optional<std::string> prompt =
      kvserve::testing::JsonString(golden_, "prompt");
  ASSERT_TRUE(prompt.has_value());
  ASSERT_FALSE(want.empty());
  EXPECT_THAT(tokenizer_->Encode(*prompt, {}), ElementsAreArray(want));
}

TEST_F(Tok512Test, DecodesGoldenGeneration) {
  std::vector<int32_t> prompt_ids =
      kvserve::testing::JsonIntArray(golden_, "prompt_token_ids");
  std::vector<int32_t> ids =
      kvserve::testing::JsonIntArray(golden_, "generated_token_ids");
  std::optional<std::string> want =
      kvserve::testing::JsonString(golden_, "generated_text");
  ASSERT_TRUE(want.has_value());
  ASSERT_EQ(ids.size(), 64u);
  EXPECT_EQ(DecodeAll(*tokenizer_, ids, prompt_ids.back()), *want);
  // The whole sequence, BOS first, decodes to prompt + continuation.
  std::vector<int32_t> all = prompt_ids;
  all.insert(all.end(), ids.begin(), ids.end());
  EXPECT_EQ(DecodeAll(*tokenizer_, all),
            *kvserve::testing::JsonString(golden_, "prompt") + *want);
}

TEST_F(Tok512Test, Utf8RoundTripsThroughByteFallback) {
  for (std::string text :
       {std::string("Hello \xF0\x9F\x98\x80 world"),     // emoji
        std::string("\xE4\xBD\xA0\xE5\xA5\xBD, Lily!"),  // CJK
        std::string("caf\xC3\xA9  two  spaces\n\ttab"),
        std::string("\xFF\xFE invalid \x80 bytes")}) {
    std::vector<int32_t> ids = tokenizer_->Encode(text, {});
    EXPECT_EQ(DecodeAll(*tokenizer_, ids), text);
  }
  // The emoji has no piece: four byte tokens.
  std::vector<int32_t> ids =
      tokenizer_->Encode("\xF0\x9F\x98\x80", {.add_bos = false});
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tokenizer_->Piece(ids[0]), "\xE2\x96\x81");
  ids.erase(ids.begin());
  EXPECT_THAT(ids, ElementsAre(3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80));
}

TEST_F(Tok512Test, MatchesRunCEncodeOnRandomText) {
  std::mt19937 rng(42);
  // Words drawn from the vocabulary's own pieces plus odd characters.
  std::vector<std::string> parts = {
      "Once",     "upon",         "a",     "time",  "Lily", "ball",
      " ",        "  ",           ",",     ".",     "\n",   "!",
      "\xC3\xA9", "\xE2\x82\xAC", "xyzzy", "there", "was",  "playing"};
  for (int i = 259; i < vocab_.size(); i += 7) {
    std::string p = vocab_.tokens[i];
    if (p.rfind("\xE2\x96\x81", 0) == 0) p = " " + p.substr(3);
    parts.push_back(p);
  }
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    int n = rng() % 12;
    for (int k = 0; k < n; ++k) text += parts[rng() % parts.size()];
    bool bos = rng() % 2;
    ASSERT_EQ(tokenizer_->Encode(text, {.add_bos = bos}),
              ReferenceEncode(vocab_, text, bos))
        << "text: \"" << text << "\"";
  }
}

// tok512 plus chat tokens: a parse_special encode is the concatenation of
// the plain encodes of the text between the specials, each with the dummy
// prefix only at the start or after a special.
TEST_F(Tok512Test, ParseSpecialEqualsEncodingTheFragments) {
  Vocab v = vocab_;
  for (const char* piece : {"<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(piece);
    v.scores.push_back(0);
    v.token_types.push_back(TokenType::kControl);
  }
  std::unique_ptr<Tokenizer> t = MustCreate(v);
  const int32_t start = 512, end = 513;
  auto plain = [&](const std::string& text, bool prefix) {
    return t->Encode(text, {.add_bos = false, .add_dummy_prefix = prefix});
  };
  std::vector<int32_t> want = {1, start};
  for (const std::vector<int32_t>& part :
       {plain("user\nOnce upon a time", true),
        {end},
        plain("\n", true),
        {start},
        plain("assistant\n", true)}) {
    want.insert(want.end(), part.begin(), part.end());
  }
  EXPECT_EQ(t->Encode("<|im_start|>user\nOnce upon a time<|im_end|>\n"
                      "<|im_start|>assistant\n",
                      {.parse_special = true}),
            want);
  // "<s>" is BOS's text and a control token: parse_special matches it too.
  EXPECT_THAT(t->Encode("<s>Lily", {.add_bos = false, .parse_special = true}),
              ElementsAreArray([&] {
                std::vector<int32_t> ids = {1};
                for (int32_t id : plain("Lily", true)) ids.push_back(id);
                return ids;
              }()));
  // Without parse_special the same text is ordinary text, as before.
  EXPECT_EQ(t->Encode("<|im_start|>hi", {}),
            tokenizer_->Encode("<|im_start|>hi", {}));
}

// A chat prompt of about 100k tokens encodes in time linear in its length.
TEST_F(Tok512Test, LongChatPromptWithParseSpecial) {
  Vocab v = vocab_;
  for (const char* piece : {"<|im_start|>", "<|im_end|>"}) {
    v.tokens.push_back(piece);
    v.scores.push_back(0);
    v.token_types.push_back(TokenType::kControl);
  }
  std::unique_ptr<Tokenizer> t = MustCreate(v);
  const std::string turn =
      "<|im_start|>user\nOnce upon a time there was a ball.<|im_end|>\n";
  const EncodeOptions special{.add_bos = false, .parse_special = true};
  const size_t per_turn = t->Encode(turn, special).size();
  std::string text;
  const size_t turns = 100000 / per_turn + 1;
  for (size_t i = 0; i < turns; ++i) text += turn;
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = t->Encode(text, special);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(ids.size(), per_turn * turns);
  EXPECT_GE(ids.size(), 100000u);
  EXPECT_LT(seconds, 10.0);
}

TEST(Llama2cVocabTest, RejectsTruncatedAndImplausibleFiles) {
  std::string file(4, '\0');
  int32_t max_len = 8;
  std::memcpy(file.data(), &max_len, 4);
  auto add = [&](float score, std::string piece) {
    int32_t len = static_cast<int32_t>(piece.size());
    file.append(reinterpret_cast<const char*>(&score), 4);
    file.append(reinterpret_cast<const char*>(&len), 4);
    file += piece;
  };
  add(0, "<unk>");
  add(0, "\n<s>\n");
  add(0, "\n</s>\n");
  add(-1, " x");
  absl::StatusOr<Vocab> ok = ParseLlama2cVocab(file, "t.bin");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->tokens[3], "\xE2\x96\x81x");
  EXPECT_FALSE(ParseLlama2cVocab(file, "t.bin", 5).ok());
  for (size_t cut : {size_t{0}, size_t{2}, size_t{6}, file.size() - 1}) {
    absl::StatusOr<Vocab> v = ParseLlama2cVocab(file.substr(0, cut), "t.bin");
    ASSERT_FALSE(v.ok()) << "cut at " << cut;
    EXPECT_NE(v.status().message().find("t.bin"), std::string::npos);
  }
  add(0, "much too long");
  absl::StatusOr<Vocab> bad = ParseLlama2cVocab(file, "t.bin");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token 4"), std::string::npos);
}

}  // namespace
}  // namespace kvserve
