// UTF-8 helpers for tokenizers: decoding that never loses bytes, and
// encoding. (The pre-tokenizers' Unicode classes are PCRE2's:
// pre_tokenizer.h.)
#ifndef KVSERVE_CORE_TOKENIZER_UNICODE_H_
#define KVSERVE_CORE_TOKENIZER_UNICODE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

// One character of a UTF-8 string: a well-formed sequence, or a single byte
// that is not part of one (then valid = false and cp = the byte value).
struct Utf8Char {
  uint32_t cp = 0;
  uint32_t offset = 0;  // in bytes
  uint32_t len = 0;     // in bytes, 1..4
  bool valid = true;
};
std::vector<Utf8Char> SplitUtf8(std::string_view text);
// The character at byte `i`. REQUIRES: i < text.size().
Utf8Char DecodeUtf8At(std::string_view text, size_t i);

void AppendUtf8(uint32_t cp, std::string& out);

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_UNICODE_H_
