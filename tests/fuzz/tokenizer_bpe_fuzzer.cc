// Fuzzes BpeTokenizer (byte-level BPE, llama-bpe pre-tokenizer): Encode
// under every EncodeOptions combination, then DecodeToken over the ids.
// With all 256 byte symbols in the vocabulary, any bytes round-trip exactly
// without parse_special (bpe_tokenizer.h: no dummy prefix, no space
// stripping after BOS, BOS decodes to nothing). The vocabulary is built in
// process (as tests/core/tokenizer/bpe_tokenizer_test.cc's, with more
// merges), plus Llama 3's special tokens; the pre-tokenizer split must
// concatenate back to its input.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/unicode.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/tokenizer_common.h"

namespace kvserve {
namespace {

// GPT-2's byte -> unicode alphabet.
std::string Gpt2Char(int b) {
  int n = 0;
  auto printable = [](int x) {
    return (x >= 33 && x <= 126) || (x >= 161 && x <= 172) ||
           (x >= 174 && x <= 255);
  };
  for (int x = 0; x < b; ++x) n += printable(x) ? 0 : 1;
  std::string out;
  AppendUtf8(printable(b) ? b : 256 + n, out);
  return out;
}

Vocab FuzzGpt2Vocab() {
  Vocab v;
  v.model = "gpt2";
  v.pre_tokenizer = "llama-bpe";
  for (int b = 0; b < 256; ++b) v.tokens.push_back(Gpt2Char(b));
  const std::string G = Gpt2Char(' ');                                // "Ġ"
  const std::string C = Gpt2Char('\n');                               // "Ċ"
  const std::string e_acute = Gpt2Char(0xC3) + " " + Gpt2Char(0xA9);  // é
  v.merges = {"h e",       G + " t", G + "t he", "l l",  "he ll", "hell o",
              "b c",       "a b",    G + " w",   "o r",  "w or",  "wor l",
              "worl d",    G + " a", "i n",      "in g", "e r",   C + " " + C,
              G + " " + G, "1 2",    "12 3",     e_acute};
  for (const std::string& m : v.merges) {
    const size_t sp = m.find(' ');
    v.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
  }
  v.tokens.push_back("xyz");  // reachable only whole (ignore_merges)
  const int first_special = v.size();
  for (const char* s : {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>",
                        "<|start_header_id|>", "<|end_header_id|>"}) {
    v.tokens.push_back(s);
  }
  v.tokens.push_back("<tool>");  // user-defined
  v.token_types.assign(v.tokens.size(), TokenType::kNormal);
  for (int id = first_special; id < first_special + 5; ++id) {
    v.token_types[id] = TokenType::kControl;
  }
  v.token_types.back() = TokenType::kUserDefined;
  v.bos_id = first_special;
  v.eos_id = first_special + 1;
  v.eot_id = first_special + 2;
  v.add_space_prefix = false;
  return v;
}

struct State {
  Vocab vocab;
  std::unique_ptr<BpeTokenizer> tokenizer;
  std::vector<std::string> specials;
};

State& GetState() {
  static State state;
  return state;
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace kvserve;
  State& s = GetState();
  s.vocab = FuzzGpt2Vocab();
  absl::StatusOr<std::unique_ptr<BpeTokenizer>> t =
      BpeTokenizer::Create(s.vocab);
  FUZZ_CHECK(t.ok(), "%s", t.status().ToString().c_str());
  s.tokenizer = *std::move(t);
  s.specials = fuzz::SpecialTexts(s.vocab);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  const State& s = GetState();
  const std::string_view text = fuzz::AsView(data, size);

  std::string joined;
  for (std::string_view piece : BpeTokenizer::SplitLlama3(text)) {
    FUZZ_CHECK(!piece.empty(), "empty pre-tokenizer piece");
    joined += piece;
  }
  FUZZ_CHECK(joined == text, "pre-tokenizer pieces do not concatenate to %s",
             fuzz::Hex(text).c_str());

  fuzz::CheckEncodeDecode(
      *s.tokenizer, s.vocab, s.specials, text,
      [](const EncodeOptions&, std::string_view t, std::string* want) {
        *want = std::string(t);
        return true;
      });
  return 0;
}
