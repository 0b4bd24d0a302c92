#include "core/tokenizer/bpe_tokenizer.h"

#include <random>
#include <string>
#include <vector>

#include "core/model/gguf_vocab.h"
#include "core/model/gguf_writer.h"
#include "core/tokenizer/tokenizer_factory.h"
#include "core/tokenizer/unicode.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(UnicodeTest, SplitUtf8KeepsEveryByte) {
  std::vector<Utf8Char> c = SplitUtf8("a\xC3\xA9\xE0\x80\x80");  // overlong
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[1].cp, 0xE9u);
  EXPECT_FALSE(c[2].valid);
}

// GPT-2's byte -> unicode alphabet, as the test's own reference.
std::string Gpt2Char(int b) {
  int n = 0;
  for (int x = 0; x < b; ++x) {
    bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) ||
                     (x >= 174 && x <= 255);
    if (!printable) ++n;
  }
  bool printable =
      (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  std::string out;
  AppendUtf8(printable ? b : 256 + n, out);
  return out;
}

// All 256 byte symbols, some merges, and Llama 3's special tokens.
Vocab SmallGpt2Vocab() {
  Vocab v;
  v.model = "gpt2";
  v.pre_tokenizer = "llama-bpe";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(Gpt2Char(b));
  const std::string G = Gpt2Char(' ');  // "Ġ"
  v.merges = {"h e",    G + " t", G + "t he", "l l",   "he ll",
              "hell o", "b c",    "a b",      G + " w"};
  for (const std::string& m : v.merges) {
    size_t sp = m.find(' ');
    v.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  // 256 "he", 257 "Ġt", 258 "Ġthe", 259 "ll", 260 "hell", 261 "hello",
  // 262 "bc", 263 "ab", 264 "Ġw"
  v.tokens.push_back("xyz");  // 265: reachable only whole (ignore_merges)
  v.tokens.push_back("<|begin_of_text|>");  // 266
  v.tokens.push_back("<|end_of_text|>");    // 267
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  v.token_types[266] = TokenType::kControl;
  v.token_types[267] = TokenType::kControl;
  v.bos_id = 266;
  v.eos_id = 267;
  v.add_space_prefix = false;
  return v;
}

std::unique_ptr<Tokenizer> MustCreate(const Vocab& v) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(v);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(*t) : nullptr;
}

std::string DecodeAll(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += t.DecodeToken(prev, id);
    prev = id;
  }
  return out;
}

TEST(BpeTokenizerTest, MergesByRank) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallGpt2Vocab());
  ASSERT_NE(t, nullptr);
  const EncodeOptions no_bos{.add_bos = false};
  EXPECT_THAT(t->Encode("hello the", no_bos), ElementsAre(261, 258));
  // "abc": "b c" (rank 6) outranks "a b" (rank 7).
  EXPECT_THAT(t->Encode("abc", no_bos), ElementsAre('a', 262));
  // A whole-word token is used even though no merge builds it.
  EXPECT_THAT(t->Encode("xyz", no_bos), ElementsAre(265));
  EXPECT_THAT(t->Encode("xy", no_bos), ElementsAre('x', 'y'));
  // No dummy prefix; BOS from the vocabulary.
  EXPECT_THAT(t->Encode("he", {}), ElementsAre(266, 256));
  EXPECT_THAT(t->Encode("", {}), ElementsAre(266));
  // Space is byte 0x20 -> "Ġ" (id 32 here, since ids 0..255 are the bytes
  // in order of their alphabet position, which is the byte value).
  EXPECT_THAT(t->Encode(" w", no_bos), ElementsAre(264));
  EXPECT_THAT(t->Encode("  ", no_bos), ElementsAre(32, 32));
}

TEST(BpeTokenizerTest, RoundTripsAnyBytes) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallGpt2Vocab());
  ASSERT_NE(t, nullptr);
  for (std::string text :
       {std::string("hello the world, it's 2024!\n\n"),
        std::string("\xF0\x9F\x98\x80 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"),
        std::string("\xFF\xFE\x00\x01 bytes", 11)}) {
    std::vector<int32_t> ids = t->Encode(text, {});
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 266);
    EXPECT_EQ(DecodeAll(*t, ids), text);
  }
  std::mt19937 rng(9);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng() % 30, '\0');
    for (char& c : text) c = static_cast<char>(rng());
    ASSERT_EQ(DecodeAll(*t, t->Encode(text, {})), text);
  }
  EXPECT_EQ(t->DecodeToken(-1, 267), "");
  EXPECT_EQ(t->DecodeToken(-1, 258), " the");  // no space stripping
  EXPECT_EQ(t->DecodeToken(266, 258), " the");
  EXPECT_EQ(t->Piece(258), Gpt2Char(' ') + "the");
}

// SmallGpt2Vocab with chat tokens appended.
Vocab SmallGpt2ChatVocab() {
  Vocab v = SmallGpt2Vocab();
  auto add = [&](std::string piece, TokenType type) {
    v.tokens.push_back(std::move(piece));
    v.token_types.push_back(type);
  };
  add("<|eot_id|>", TokenType::kControl);      // 268
  add("<|im_start|>", TokenType::kControl);    // 269
  add("<|im", TokenType::kUserDefined);        // 270: a prefix of 269
  add("<|im_end|>", TokenType::kUserDefined);  // 271: not an end (not control)
  return v;
}

TEST(BpeTokenizerTest, ParseSpecialMatchesWholeTokens) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallGpt2ChatVocab());
  ASSERT_NE(t, nullptr);
  const EncodeOptions special{.add_bos = false, .parse_special = true};
  // Each run of text is pre-tokenized alone: " the" after the special is
  // still "Ġthe"; there is no dummy prefix.
  EXPECT_THAT(t->Encode("hello<|eot_id|> the", special),
              ElementsAre(261, 268, 258));
  EXPECT_THAT(t->Encode("<|begin_of_text|>he", special), ElementsAre(266, 256));
  EXPECT_THAT(t->Encode("<|eot_id|><|eot_id|>", special),
              ElementsAre(268, 268));
  EXPECT_THAT(t->Encode("<|im_start|><|imhe", special),
              ElementsAre(269, 270, 256));
  EXPECT_THAT(t->Encode("he<|im_end|>", {.parse_special = true}),
              ElementsAre(266, 256, 271));
  // Off by default: the same text is ordinary bytes.
  std::vector<int32_t> plain = t->Encode("he<|eot_id|>", {.add_bos = false});
  EXPECT_THAT(plain, ::testing::Not(::testing::Contains(268)));
  EXPECT_EQ(
      plain,
      MustCreate(SmallGpt2Vocab())->Encode("he<|eot_id|>", {.add_bos = false}));
  // Control tokens decode to nothing, user-defined ones to their text.
  EXPECT_EQ(DecodeAll(*t, t->Encode("he<|eot_id|> the<|im_end|>", special)),
            "he the<|im_end|>");
  EXPECT_EQ(DecodeAll(*t, plain), "he<|eot_id|>");
}

// User-defined tokens (the Hugging Face tokenizer's non-special added
// tokens) are matched without parse_special too; control tokens are not.
TEST(BpeTokenizerTest, UserDefinedTokensAreAlwaysMatched) {
  std::unique_ptr<Tokenizer> t = MustCreate(SmallGpt2ChatVocab());
  ASSERT_NE(t, nullptr);
  const EncodeOptions plain{.add_bos = false};
  EXPECT_THAT(t->Encode("he<|im_end|>", plain), ElementsAre(256, 271));
  // Without parse_special "<|im_start|>" is not the control token 269 but
  // user-defined "<|im" and ordinary text.
  std::vector<int32_t> ids = t->Encode("<|im_start|>", plain);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 270);
  EXPECT_THAT(ids, ::testing::Not(::testing::Contains(269)));
  EXPECT_EQ(DecodeAll(*t, ids), "<|im_start|>");

  // A user-defined token whose text is a byte symbol's ("ÿ" is byte 0xFF's
  // symbol, DeepSeek's vocabulary has both): raw "ÿ" is the user-defined
  // token, raw byte 0xFF the byte symbol.
  Vocab v = SmallGpt2Vocab();
  v.tokens.push_back(Gpt2Char(0xFF));  // 268
  v.token_types.push_back(TokenType::kUserDefined);
  t = MustCreate(v);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(t->Encode("\xC3\xBF", plain), ElementsAre(268));
  EXPECT_THAT(t->Encode("\xFF", plain), ElementsAre(0xFF));
  EXPECT_EQ(DecodeAll(*t, t->Encode("a\xFF\xC3\xBF", plain)), "a\xFF\xC3\xBF");
}

TEST(BpeTokenizerTest, EndOfGeneration) {
  Vocab v = SmallGpt2ChatVocab();
  std::unique_ptr<Tokenizer> t = MustCreate(v);
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(t->IsEndOfGeneration(267));   // eos
  EXPECT_TRUE(t->IsEndOfGeneration(268));   // control "<|eot_id|>"
  EXPECT_FALSE(t->IsEndOfGeneration(271));  // user-defined "<|im_end|>"
  EXPECT_FALSE(t->IsEndOfGeneration(266));
  EXPECT_FALSE(t->IsEndOfGeneration(269));
  v.eom_id = 269;
  t = MustCreate(v);
  EXPECT_TRUE(t->IsEndOfGeneration(269));
}

TEST(BpeTokenizerTest, PreTokenizerFromTheVocabulary) {
  for (const char* pre : {"no-such-pre", "Llama-BPE", "gpt2"}) {
    Vocab v = SmallGpt2Vocab();
    v.pre_tokenizer = pre;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(v);
    ASSERT_FALSE(t.ok()) << pre;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_THAT(t.status().message(),
                HasSubstr(std::string("\"") + pre + "\""));
    EXPECT_THAT(t.status().message(), HasSubstr("llama-bpe"));
    EXPECT_THAT(t.status().message(), HasSubstr("deepseek-llm"));
  }
  // Only Llama 3's pre-tokenizer takes a piece that is a token whole
  // (ignore_merges); the others merge: "xyz" has no merges, so 3 tokens.
  const EncodeOptions no_bos{.add_bos = false};
  for (const char* pre : {"", "default", "gpt-2", "qwen2", "starcoder"}) {
    Vocab v = SmallGpt2Vocab();
    v.pre_tokenizer = pre;
    std::unique_ptr<Tokenizer> t = MustCreate(v);
    ASSERT_NE(t, nullptr) << pre;
    EXPECT_THAT(t->Encode("xyz", no_bos), ElementsAre('x', 'y', 'z')) << pre;
    EXPECT_THAT(t->Encode("hello the", no_bos), ElementsAre(261, 258)) << pre;
  }
  Vocab v = SmallGpt2Vocab();
  v.merges.push_back("nospace");
  EXPECT_FALSE(CreateTokenizer(v).ok());
}

TEST(BpeTokenizerTest, FromGgufMetadata) {
  Vocab want = SmallGpt2Vocab();
  std::vector<int32_t> types;
  for (TokenType t : want.token_types) types.push_back(static_cast<int32_t>(t));
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "gpt2");
  w.AddString("tokenizer.ggml.pre", "llama-bpe");
  w.AddStringArray("tokenizer.ggml.tokens", want.tokens);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  w.AddStringArray("tokenizer.ggml.merges", want.merges);
  w.AddUint32("tokenizer.ggml.bos_token_id", 266);
  w.AddUint32("tokenizer.ggml.eos_token_id", 267);
  std::string bytes = w.Serialize();
  absl::StatusOr<GgufFile> g =
      GgufFile::Parse(MappedFile::FromBytes(bytes, "bpe.gguf"));
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<Vocab> v = VocabFromGguf(*g);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre_tokenizer, "llama-bpe");
  EXPECT_FALSE(v->add_space_prefix);
  EXPECT_EQ(v->merges, want.merges);
  std::unique_ptr<Tokenizer> t = MustCreate(*v);
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(t->Encode("hello the", {}), ElementsAre(266, 261, 258));

  GgufWriter other;
  other.AddString("tokenizer.ggml.model", "gpt2");
  other.AddString("tokenizer.ggml.pre", "no-such-pre");
  other.AddStringArray("tokenizer.ggml.tokens", want.tokens);
  other.AddStringArray("tokenizer.ggml.merges", want.merges);
  bytes = other.Serialize();
  g = GgufFile::Parse(MappedFile::FromBytes(bytes, "bpe.gguf"));
  ASSERT_TRUE(g.ok());
  v = VocabFromGguf(*g);
  ASSERT_TRUE(v.ok());
  absl::StatusOr<std::unique_ptr<Tokenizer>> refused = CreateTokenizer(*v);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("no-such-pre"));

  // Without the key: llama.cpp's "default".
  GgufWriter absent;
  absent.AddString("tokenizer.ggml.model", "gpt2");
  absent.AddStringArray("tokenizer.ggml.tokens", want.tokens);
  absent.AddStringArray("tokenizer.ggml.merges", want.merges);
  bytes = absent.Serialize();
  g = GgufFile::Parse(MappedFile::FromBytes(bytes, "bpe.gguf"));
  ASSERT_TRUE(g.ok());
  v = VocabFromGguf(*g);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->pre_tokenizer, "default");
  EXPECT_TRUE(CreateTokenizer(*v).ok());
}

}  // namespace
}  // namespace kvserve
