// llama.cpp's byte-level BPE reference suites (tests/testing/vocab_suite.h):
// each vocabulary GGUF loaded as the server loads a model's tokenizer
// (VocabFromGguf, CreateTokenizer), every case encoded as a fresh prompt
// without BOS must give exactly the reference ids, and decode back to its
// text.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/model/gguf.h"
#include "core/model/gguf_vocab.h"
#include "core/tokenizer/tokenizer_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/vocab_suite.h"

namespace kvserve {
namespace {

using ::testing::ElementsAreArray;

std::string DecodeAll(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += t.DecodeToken(prev, id);
    prev = id;
  }
  return out;
}

class BpeVocabSuiteTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string path = kvserve::testing::VocabSuiteGguf(GetParam());
    std::optional<std::vector<kvserve::testing::VocabCase>> cases =
        kvserve::testing::ReadVocabSuite(path);
    if (!cases.has_value()) GTEST_SKIP() << "no suite at " << path;
    cases_ = std::move(*cases);
    absl::StatusOr<GgufFile> g = GgufFile::Open(path);
    ASSERT_TRUE(g.ok()) << g.status();
    absl::StatusOr<Vocab> v = VocabFromGguf(*g);
    ASSERT_TRUE(v.ok()) << v.status();
    vocab_ = std::move(*v);
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = CreateTokenizer(vocab_);
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = std::move(*t);
  }

  std::vector<kvserve::testing::VocabCase> cases_;
  Vocab vocab_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_P(BpeVocabSuiteTest, EveryCaseMatchesTheReference) {
  EXPECT_EQ(vocab_.model, "gpt2");
  EXPECT_EQ(vocab_.pre_tokenizer, GetParam());
  ASSERT_GE(cases_.size(), 40u);
  // A fresh prompt: the vocabulary's dummy-prefix rule, no BOS.
  const EncodeOptions prompt{.add_bos = false, .add_dummy_prefix = true};
  size_t passed = 0;
  for (const kvserve::testing::VocabCase& c : cases_) {
    const std::vector<int32_t> ids = tokenizer_->Encode(c.text, prompt);
    EXPECT_THAT(ids, ElementsAreArray(c.ids)) << "text: \"" << c.text << "\"";
    if (ids == c.ids) ++passed;
  }
  std::printf("[ suite    ] %s: %zu/%zu cases match\n", GetParam().c_str(),
              passed, cases_.size());
  RecordProperty("passed", static_cast<int>(passed));
  RecordProperty("cases", static_cast<int>(cases_.size()));
}

TEST_P(BpeVocabSuiteTest, DecodeOfEncodeIsTheText) {
  for (const kvserve::testing::VocabCase& c : cases_) {
    for (bool bos : {false, true}) {
      const std::vector<int32_t> ids = tokenizer_->Encode(
          c.text, EncodeOptions{.add_bos = bos, .add_dummy_prefix = bos});
      EXPECT_EQ(DecodeAll(*tokenizer_, ids), c.text) << "bos " << bos;
    }
    // The reference ids decode to the text too.
    EXPECT_EQ(DecodeAll(*tokenizer_, c.ids), c.text);
  }
  // Bytes that are not UTF-8 still encode (one byte symbol each, at worst)
  // and come back unchanged.
  for (std::string text :
       {std::string("ab\xC3(cd\xE2\x82"),
        std::string("\xF0\x9F\x98 \x80\x80 x"), std::string("\xED\xA0\x80"),
        std::string("\0z", 2)}) {
    const std::vector<int32_t> ids =
        tokenizer_->Encode(text, EncodeOptions{.add_bos = false});
    EXPECT_EQ(DecodeAll(*tokenizer_, ids), text);
  }
  // Bytes that never occur in UTF-8 (0xC0, 0xC1, 0xF5..0xFF) have no symbol
  // in DeepSeek's and StarCoder's vocabularies: they are dropped (or become
  // the unknown token), as for the Hugging Face tokenizer.
  const std::string decoded = DecodeAll(
      *tokenizer_, tokenizer_->Encode("a\xFF\xFE"
                                      "b",
                                      EncodeOptions{.add_bos = false}));
  EXPECT_EQ(decoded, GetParam() == "gpt-2" ? "a\xFF\xFE"
                                             "b"
                                           : "ab");
}

INSTANTIATE_TEST_SUITE_P(
    Vocabs, BpeVocabSuiteTest,
    ::testing::ValuesIn(kvserve::testing::VocabSuiteNames()),
    [](const ::testing::TestParamInfo<std::string>& info) {
      std::string name = info.param;
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

}  // namespace
}  // namespace kvserve
