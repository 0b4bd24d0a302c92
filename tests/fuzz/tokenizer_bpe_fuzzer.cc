// Fuzzes BpeTokenizer (byte-level BPE, llama-bpe pre-tokenizer): Encode
// under every EncodeOptions combination, then DecodeToken over the ids; and
// every pre-tokenizer of the table (pre_tokenizer.h), whose pieces must be
// non-empty and concatenate back to the input.
// With all 256 byte symbols in the vocabulary, any bytes round-trip exactly
// without parse_special (bpe_tokenizer.h: no dummy prefix, no space
// stripping after BOS, BOS decodes to nothing). The vocabulary is built in
// process (as tests/core/tokenizer/bpe_tokenizer_test.cc's, with more
// merges), plus Llama 3's special tokens.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/text/utf8_stream_decoder.h"
#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/pre_tokenizer.h"
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
  std::vector<PreTokenizer> pre_tokenizers;  // the whole table
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
  for (const std::string& name : PreTokenizer::SupportedNames()) {
    absl::StatusOr<PreTokenizer> pre = PreTokenizer::ForName(name);
    FUZZ_CHECK(pre.ok(), "%s", pre.status().ToString().c_str());
    s.pre_tokenizers.push_back(*std::move(pre));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvserve;
  const State& s = GetState();
  const std::string_view text = fuzz::AsView(data, size);

  // The pre-tokenizers trust IsValidUtf8 to skip PCRE2's own UTF check;
  // SplitUtf8 (byte-level BPE's decoder) must agree with it.
  bool valid = true;
  for (const Utf8Char& c : SplitUtf8(text)) valid = valid && c.valid;
  FUZZ_CHECK(IsValidUtf8(text) == valid, "IsValidUtf8 is %d for %s", !valid,
             fuzz::Hex(text).c_str());
  for (const PreTokenizer& pre : s.pre_tokenizers) {
    absl::StatusOr<std::vector<std::string_view>> pieces = pre.Split(text);
    FUZZ_CHECK(pieces.ok(), "%s: %s", pre.name().c_str(),
               pieces.status().ToString().c_str());
    std::string joined;
    for (std::string_view piece : *pieces) {
      FUZZ_CHECK(!piece.empty(), "%s: empty pre-tokenizer piece",
                 pre.name().c_str());
      joined += piece;
    }
    FUZZ_CHECK(joined == text, "%s: pieces do not concatenate to %s",
               pre.name().c_str(), fuzz::Hex(text).c_str());
  }

  fuzz::CheckEncodeDecode(
      *s.tokenizer, s.vocab, s.specials, text,
      [](const EncodeOptions&, std::string_view t, std::string* want) {
        *want = std::string(t);
        return true;
      });
  return 0;
}
