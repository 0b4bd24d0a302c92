// Utf8StreamDecoder: turns a stream of byte chunks (token pieces) into valid
// UTF-8 text.
//
// An incomplete multi-byte sequence at the end of a chunk is held back until
// the bytes that complete it arrive; at most 3 bytes are ever held. Invalid
// input (bad lead bytes, bad continuations, overlongs, surrogates, code points
// above U+10FFFF) becomes U+FFFD, one per maximal subpart of an ill-formed
// sequence as Unicode recommends (Unicode 15, section 3.9, "U+FFFD
// Substitution of Maximal Subparts"). The concatenation of everything Push
// and Flush return is therefore the same however the bytes were chunked.
//
// Thread-safety: not thread-safe; one decoder per stream.
#ifndef KVSERVE_CORE_TEXT_UTF8_STREAM_DECODER_H_
#define KVSERVE_CORE_TEXT_UTF8_STREAM_DECODER_H_

#include <string>
#include <string_view>

namespace kvserve {

class Utf8StreamDecoder {
 public:
  // The text completed by `bytes`: always valid UTF-8, possibly empty.
  std::string Push(std::string_view bytes);
  // Ends the stream: U+FFFD if an incomplete sequence was held back, else
  // empty. The decoder is then ready for a new stream.
  std::string Flush();

 private:
  std::string pending_;  // a proper prefix of a well-formed sequence
};

// True when `s` is well-formed UTF-8 (no truncated sequence at the end).
bool IsValidUtf8(std::string_view s);

}  // namespace kvserve

#endif  // KVSERVE_CORE_TEXT_UTF8_STREAM_DECODER_H_
