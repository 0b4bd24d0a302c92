// Grammar: a context-free grammar over bytes, the form constrained decoding
// runs on, and ParseGbnf, which compiles llama.cpp's GBNF into it.
//
// GBNF's terminals are Unicode code points; here every terminal is a set of
// bytes, so that a token that ends inside a multi-byte character, or spans
// several terminals, is matched byte by byte. A character class becomes the
// UTF-8 byte sequences of its code-point ranges (surrogates excluded), a
// literal the bytes of its UTF-8 encoding, and repetition (*, +, ?, {m,n})
// helper rules, as llama.cpp lowers them.
//
// A compiled grammar is never left-recursive: a rule that can reach itself
// before consuming a byte (`a ::= a "x"`, or a repetition of something that
// may be empty) is refused, since a top-down matcher would loop on it.
//
// Thread-safety: immutable after ParseGbnf; share freely.
#ifndef KVSERVE_CORE_CONSTRAIN_GRAMMAR_H_
#define KVSERVE_CORE_CONSTRAIN_GRAMMAR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kvserve::constrain {

// A set of byte values.
class ByteSet {
 public:
  bool Has(uint8_t b) const { return (bits_[b >> 6] >> (b & 63)) & 1; }
  void Add(uint8_t b) { bits_[b >> 6] |= uint64_t{1} << (b & 63); }
  void AddRange(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) Add(static_cast<uint8_t>(b));
  }
  bool empty() const {
    return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0;
  }
  bool operator==(const ByteSet& o) const { return bits_ == o.bits_; }
  const std::array<uint64_t, 4>& bits() const { return bits_; }

 private:
  std::array<uint64_t, 4> bits_{};
};

// Rules as one flat array of elements: each alternative is a run of
// kBytes and kRule elements ended by kEnd. A position in the grammar is an
// index into `elements`.
struct Grammar {
  struct Element {
    enum class Kind : uint8_t { kEnd, kBytes, kRule };
    Kind kind = Kind::kEnd;
    uint32_t index = 0;  // kBytes: into byte_sets; kRule: the rule
  };
  std::vector<Element> elements;
  std::vector<ByteSet> byte_sets;
  // rule -> the positions where its alternatives start.
  std::vector<std::vector<uint32_t>> alternatives;
  // rule -> its name: the GBNF name, or a helper's made from its parent's
  // ("item-star-3"); for errors.
  std::vector<std::string> rule_names;
  uint32_t root = 0;
};

// Bounds on what a client's grammar may cost to compile and hold.
struct GrammarLimits {
  int64_t max_text_bytes = 1 << 20;
  // Elements after lowering (repetitions expanded): bounds compile time and
  // memory.
  int64_t max_elements = 1 << 20;
  // The largest m or n of a {m,n} repetition.
  int max_repetition = 1000;
  // Compilation past this is refused (a client's grammar must not hold a
  // server thread).
  absl::Duration max_time = absl::Seconds(2);
};

// Compiles GBNF text; `root` names the start rule. INVALID_ARGUMENT naming
// the line and column and what was expected, an undefined rule (and where
// it is used), a missing root, a left-recursive rule, or a limit passed.
absl::StatusOr<Grammar> ParseGbnf(std::string_view text,
                                  std::string_view root = "root",
                                  const GrammarLimits& limits = {});

// ParseGbnf's grammar, shared (as GenerateParams holds it).
absl::StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(
    std::string_view text, const GrammarLimits& limits = {});

// The UTF-8 byte sequences of code points [lo, hi] (surrogates excluded):
// each a list of (first, last) byte ranges, one per byte of the encoding.
// For building grammars from character classes (ParseGbnf, JSON Schema).
using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;
std::vector<ByteRangeSeq> Utf8RangeSequences(uint32_t lo, uint32_t hi);

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_GRAMMAR_H_
