// PreTokenizer: the split of text into pieces that byte-level BPE then
// encodes one by one, as the GGUF key tokenizer.ggml.pre names it. Each name
// stands for a list of regular expressions (llama.cpp's llm_tokenizer_bpe
// table, the regexes of the model's tokenizer.json) applied in order: the
// first splits the text, each next one splits every piece again. Within a
// piece, every match is a piece and so is every stretch between matches, so
// the pieces always concatenate back to the text.
//
// The regexes run on PCRE2 (UTF + UCP, JIT when available) with the
// semantics of the regex text itself: \p{L}, \p{N}, \p{P} are Unicode's
// general categories, whatever the code point (llama.cpp collapses each
// non-ASCII character to one byte standing for its category and runs
// std::regex, and implements the gpt-2 and llama3 regexes by hand); \s is
// Unicode's White_Space (PCRE2's own \s adds U+180E, so \s is rewritten to
// that class before compiling); $ matches only at the end of a piece. Bytes
// that are not well-formed UTF-8 match no part of any regex (PCRE2's
// MATCH_INVALID_UTF), so they land in the stretches between matches; nothing
// is lost and nothing fails.
//
// Thread-safety: immutable after construction; Split may be called from any
// number of threads at once.
#ifndef KVSERVE_CORE_TOKENIZER_PRE_TOKENIZER_H_
#define KVSERVE_CORE_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve {

// One row of the pre-tokenizer table.
struct PreTokenizerSpec {
  // The tokenizer.ggml.pre values it serves; the first is its own name.
  std::vector<std::string_view> names;
  std::vector<std::string_view> regexes;  // applied in order
  // Byte-level BPE emits a piece that is itself a token whole, without
  // merging (llama.cpp's ignore_merges; only the Llama 3 pre-tokenizer).
  bool ignore_merges = false;
};

// The table, in the order README lists it. "default" is also what an absent
// tokenizer.ggml.pre means (gguf_vocab.h).
const std::vector<PreTokenizerSpec>& PreTokenizerTable();

class PreTokenizer {
 public:
  struct Options {
    // JIT-compile the regexes (falls back to the interpreter where PCRE2 has
    // no JIT for this machine). Off only to test the interpreter.
    bool jit = true;
  };

  // The table's pre-tokenizer for tokenizer.ggml.pre `name`. An unknown
  // name is UNIMPLEMENTED, listing the supported names.
  static absl::StatusOr<PreTokenizer> ForName(std::string_view name,
                                              const Options& options);
  static absl::StatusOr<PreTokenizer> ForName(std::string_view name) {
    return ForName(name, Options());
  }
  // A pre-tokenizer of one's own; a regex PCRE2 refuses is INVALID_ARGUMENT
  // naming it, the offset and PCRE2's message.
  static absl::StatusOr<PreTokenizer> FromSpec(std::string name,
                                               const PreTokenizerSpec& spec,
                                               const Options& options);

  // Every name ForName accepts, table order.
  static std::vector<std::string> SupportedNames();

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // The pieces of `text` (views into it, none empty, concatenating to it).
  // Fails only when PCRE2 reports a match error (a resource limit), naming
  // the regex and the offset.
  absl::StatusOr<std::vector<std::string_view>> Split(
      std::string_view text) const;

  const std::string& name() const { return name_; }
  bool ignore_merges() const { return ignore_merges_; }
  // True when every regex runs JIT-compiled.
  bool jit() const;

 private:
  struct Regex;
  PreTokenizer(std::string name, bool ignore_merges,
               std::vector<std::unique_ptr<Regex>> regexes);

  std::string name_;
  bool ignore_merges_ = false;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_PRE_TOKENIZER_H_
