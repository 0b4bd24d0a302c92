// The encode/decode checks the two tokenizer fuzzers share.
#ifndef KVSERVE_TESTS_FUZZ_TOKENIZER_COMMON_H_
#define KVSERVE_TESTS_FUZZ_TOKENIZER_COMMON_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab.h"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve::fuzz {

// The texts of the vocabulary's special tokens (what parse_special matches:
// kControl and kUserDefined, special_tokens.h).
inline std::vector<std::string> SpecialTexts(const Vocab& vocab) {
  std::vector<std::string> out;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const TokenType t = vocab.type(id);
    if ((t == TokenType::kControl || t == TokenType::kUserDefined) &&
        !vocab.tokens[id].empty()) {
      out.push_back(vocab.tokens[id]);
    }
  }
  return out;
}

inline bool ContainsAny(std::string_view text,
                        const std::vector<std::string>& needles) {
  for (const std::string& n : needles) {
    if (text.find(n) != std::string_view::npos) return true;
  }
  return false;
}

// DecodeToken over `ids` from the start of a stream, checking every id.
inline std::string DecodeAll(const Tokenizer& t,
                             const std::vector<int32_t>& ids) {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    FUZZ_CHECK(id >= 0 && id < t.vocab_size(), "id %d outside vocab of %d", id,
               t.vocab_size());
    out += t.DecodeToken(prev, id);
    (void)t.Piece(id);
    (void)t.IsEndOfGeneration(id);
    prev = id;
  }
  return out;
}

inline std::string Hex(std::string_view s) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

// Encodes `text` with every combination of the options and checks what the
// tokenizer promises:
// - ids lie in the vocabulary; BOS comes first when asked for (and the
//   vocabulary has one and wants it); without parse_special no other
//   control token appears;
// - parse_special changes nothing for text without a special token's text;
// - `round_trips(options, text)` returns the bytes decoding must give back
//   (or false when nothing is promised for that combination).
// `normalize` maps both sides before they are compared (identity: exact).
template <typename RoundTrip>
void CheckEncodeDecode(const Tokenizer& t, const Vocab& vocab,
                       const std::vector<std::string>& specials,
                       std::string_view text, RoundTrip round_trip,
                       std::string (*normalize)(std::string_view) = nullptr) {
  const bool has_special_text = ContainsAny(text, specials);
  for (int bits = 0; bits < 8; ++bits) {
    EncodeOptions options;
    options.add_bos = (bits & 1) != 0;
    options.add_dummy_prefix = (bits & 2) != 0;
    options.parse_special = (bits & 4) != 0;
    const std::vector<int32_t> ids = t.Encode(text, options);
    const std::string decoded = DecodeAll(t, ids);
    const bool want_bos = options.add_bos && vocab.bos_id >= 0 && vocab.add_bos;
    if (want_bos) {
      FUZZ_CHECK(!ids.empty() && ids[0] == vocab.bos_id,
                 "no BOS first (options %d)", bits);
    }
    if (!options.parse_special) {
      // Ordinary text cannot forge a control token (tokenizer.h).
      for (size_t i = want_bos ? 1 : 0; i < ids.size(); ++i) {
        FUZZ_CHECK(vocab.type(ids[i]) != TokenType::kControl,
                   "control token %d at %zu from ordinary text %s (options "
                   "%d)",
                   ids[i], i, Hex(text).c_str(), bits);
      }
      std::string want;
      if (round_trip(options, text, &want)) {
        FUZZ_CHECK(normalize == nullptr ? decoded == want
                                        : normalize(decoded) == normalize(want),
                   "round trip (options %d): text %s decoded %s", bits,
                   Hex(text).c_str(), Hex(decoded).c_str());
      }
    } else if (!has_special_text) {
      EncodeOptions plain = options;
      plain.parse_special = false;
      FUZZ_CHECK(t.Encode(text, plain) == ids,
                 "parse_special changed text without specials (options %d)",
                 bits);
    }
  }
}

}  // namespace kvserve::fuzz

#endif  // KVSERVE_TESTS_FUZZ_TOKENIZER_COMMON_H_
