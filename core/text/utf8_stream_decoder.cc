#include "core/text/utf8_stream_decoder.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace kvserve {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

enum class SeqKind { kComplete, kInvalid, kIncomplete };

struct Seq {
  SeqKind kind;
  // kComplete: bytes of the sequence; kInvalid: bytes of the maximal
  // subpart to replace (>= 1); kIncomplete: bytes available.
  size_t length;
};

// Classifies the sequence starting at s[i] by the table of well-formed byte
// sequences (Unicode Table 3-7).
Seq ScanSequence(std::string_view s, size_t i) {
  const uint8_t lead = static_cast<uint8_t>(s[i]);
  if (lead < 0x80) return {SeqKind::kComplete, 1};
  size_t length = 0;
  uint8_t lo = 0x80;  // allowed range of the second byte
  uint8_t hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead == 0xE0) {
    length = 3;
    lo = 0xA0;  // no overlongs
  } else if (lead == 0xED) {
    length = 3;
    hi = 0x9F;  // no surrogates
  } else if (lead >= 0xE1 && lead <= 0xEF) {
    length = 3;
  } else if (lead == 0xF0) {
    length = 4;
    lo = 0x90;  // no overlongs
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    length = 4;
  } else if (lead == 0xF4) {
    length = 4;
    hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {SeqKind::kInvalid, 1};  // 80..C1, F5..FF
  }
  for (size_t j = 1; j < length; ++j) {
    if (i + j >= s.size()) return {SeqKind::kIncomplete, j};
    const uint8_t byte = static_cast<uint8_t>(s[i + j]);
    const uint8_t byte_lo = j == 1 ? lo : 0x80;
    const uint8_t byte_hi = j == 1 ? hi : 0xBF;
    if (byte < byte_lo || byte > byte_hi) return {SeqKind::kInvalid, j};
  }
  return {SeqKind::kComplete, length};
}

}  // namespace

std::string Utf8StreamDecoder::Push(std::string_view bytes) {
  std::string input = std::move(pending_);
  pending_.clear();
  input.append(bytes);
  std::string out;
  out.reserve(input.size());
  size_t i = 0;
  while (i < input.size()) {
    const Seq seq = ScanSequence(input, i);
    switch (seq.kind) {
      case SeqKind::kComplete:
        out.append(input, i, seq.length);
        break;
      case SeqKind::kInvalid:
        out.append(kReplacement);
        break;
      case SeqKind::kIncomplete:
        pending_.assign(input, i, std::string::npos);
        return out;
    }
    i += seq.length;
  }
  return out;
}

std::string Utf8StreamDecoder::Flush() {
  if (pending_.empty()) return "";
  pending_.clear();
  return std::string(kReplacement);
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const Seq seq = ScanSequence(s, i);
    if (seq.kind != SeqKind::kComplete) return false;
    i += seq.length;
  }
  return true;
}

}  // namespace kvserve
