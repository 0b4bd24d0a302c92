#include "core/model/gguf_vocab.h"

#include <string>
#include <vector>

#include "core/model/gguf_writer.h"
#include "core/tokenizer/llama2c_vocab.h"
#include "core/tokenizer/tokenizer_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/golden_json.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class StoriesGgufVocabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = kvserve::testing::SharedDir();
    absl::StatusOr<GgufFile> g =
        GgufFile::Open(dir + "/models/stories260K.gguf");
    absl::StatusOr<Vocab> tok = ReadLlama2cVocab(dir + "/models/tok512.bin");
    std::optional<std::string> golden = kvserve::testing::ReadWholeFile(
        dir + "/golden/stories260K_greedy.json");
    if (!g.ok() || !tok.ok() || !golden) {
      GTEST_SKIP() << "needs stories260K.gguf, tok512.bin and the golden "
                      "file under "
                   << dir;
    }
    absl::StatusOr<Vocab> v = VocabFromGguf(*g);
    ASSERT_TRUE(v.ok()) << v.status();
    gguf_vocab_ = *v;
    tok512_vocab_ = *tok;
    golden_ = *golden;
  }
  Vocab gguf_vocab_;
  Vocab tok512_vocab_;
  std::string golden_;
};

TEST_F(StoriesGgufVocabTest, SameVocabularyAsTok512) {
  EXPECT_EQ(gguf_vocab_.model, "llama");
  EXPECT_EQ(gguf_vocab_.tokens, tok512_vocab_.tokens);
  EXPECT_EQ(gguf_vocab_.scores, tok512_vocab_.scores);
  EXPECT_EQ(gguf_vocab_.token_types, tok512_vocab_.token_types);
  EXPECT_EQ(gguf_vocab_.bos_id, 1);
  EXPECT_EQ(gguf_vocab_.eos_id, 2);
  EXPECT_EQ(gguf_vocab_.unk_id, 0);
  EXPECT_TRUE(gguf_vocab_.add_bos);           // absent: llama.cpp's default
  EXPECT_TRUE(gguf_vocab_.add_space_prefix);  // absent: llama.cpp's default
}

TEST_F(StoriesGgufVocabTest, EncodesPromptAndDecodesGolden) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(gguf_vocab_);
  ASSERT_TRUE(t.ok());
  std::string prompt = *kvserve::testing::JsonString(golden_, "prompt");
  std::vector<int32_t> prompt_ids =
      kvserve::testing::JsonIntArray(golden_, "prompt_token_ids");
  EXPECT_THAT((*t)->Encode(prompt, {}), ElementsAreArray(prompt_ids));
  std::vector<int32_t> ids =
      kvserve::testing::JsonIntArray(golden_, "generated_token_ids");
  std::string text;
  int32_t prev = prompt_ids.back();
  for (int32_t id : ids) {
    text += (*t)->DecodeToken(prev, id);
    prev = id;
  }
  EXPECT_EQ(text, *kvserve::testing::JsonString(golden_, "generated_text"));
}

absl::StatusOr<Vocab> VocabOf(const GgufWriter& w) {
  std::string bytes = w.Serialize();  // VocabFromGguf copies what it needs
  absl::StatusOr<GgufFile> g =
      GgufFile::Parse(MappedFile::FromBytes(bytes, "vocab.gguf"));
  if (!g.ok()) return g.status();
  return VocabFromGguf(*g);
}

TEST(GgufVocabTest, DefaultsAndInferredTypes) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens",
                   {"<unk>", "<s>", "</s>", "<0x41>", "\xE2\x96\x81hi"});
  absl::StatusOr<Vocab> v = VocabOf(w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->bos_id, 1);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->type(3), TokenType::kByte);
  EXPECT_EQ(v->type(1), TokenType::kControl);
  EXPECT_EQ(v->type(0), TokenType::kUnknown);
  EXPECT_EQ(v->type(4), TokenType::kNormal);

  w.AddBool("tokenizer.ggml.add_bos_token", false);
  w.AddUint32("tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);
  v = VocabOf(w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_FALSE(v->add_bos);
  EXPECT_EQ(v->eos_id, -1);
}

TEST(GgufVocabTest, EotAndEomIds) {
  GgufWriter w;
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddStringArray("tokenizer.ggml.tokens",
                   {"<unk>", "<s>", "</s>", "<|eot_id|>", "<|eom_id|>"});
  absl::StatusOr<Vocab> v = VocabOf(w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->eot_id, -1);  // absent: none
  EXPECT_EQ(v->eom_id, -1);

  w.AddUint32("tokenizer.ggml.eot_token_id", 3);
  w.AddInt32("tokenizer.ggml.eom_token_id", 4);
  v = VocabOf(w);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->eot_id, 3);
  EXPECT_EQ(v->eom_id, 4);
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(*v);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_TRUE((*t)->IsEndOfGeneration(2));
  EXPECT_TRUE((*t)->IsEndOfGeneration(3));
  EXPECT_TRUE((*t)->IsEndOfGeneration(4));
  EXPECT_FALSE((*t)->IsEndOfGeneration(1));

  for (const char* key :
       {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    GgufWriter bad;
    bad.AddString("tokenizer.ggml.model", "llama");
    bad.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    bad.AddUint32(key, 3);
    v = VocabOf(bad);
    ASSERT_FALSE(v.ok()) << key;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(v.status().message(), HasSubstr(key));
    GgufWriter none;  // the "none" values
    none.AddString("tokenizer.ggml.model", "llama");
    none.AddStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    none.AddUint32(key, 0xFFFFFFFFu);
    v = VocabOf(none);
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ(v->eot_id, -1);
    EXPECT_EQ(v->eom_id, -1);
  }
}

TEST(GgufVocabTest, ErrorsNameTheKey) {
  GgufWriter none;
  absl::StatusOr<Vocab> v = VocabOf(none);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("tokenizer.ggml.model"));

  GgufWriter bert;
  bert.AddString("tokenizer.ggml.model", "bert");
  bert.AddStringArray("tokenizer.ggml.tokens", {"a"});
  v = VocabOf(bert);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("bert"));

  GgufWriter scores;
  scores.AddString("tokenizer.ggml.model", "llama");
  scores.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  scores.AddFloat32Array("tokenizer.ggml.scores", {1, 2});
  v = VocabOf(scores);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("tokenizer.ggml.scores"));

  GgufWriter bos;
  bos.AddString("tokenizer.ggml.model", "llama");
  bos.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  bos.AddUint32("tokenizer.ggml.bos_token_id", 7);
  v = VocabOf(bos);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("bos_token_id"));

  GgufWriter types;
  types.AddString("tokenizer.ggml.model", "llama");
  types.AddStringArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  types.AddInt32Array("tokenizer.ggml.token_type", {1, 9, 1});
  v = VocabOf(types);
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(v.status().message(), HasSubstr("token_type"));
}

}  // namespace
}  // namespace kvserve
