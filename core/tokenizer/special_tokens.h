// Special tokens, shared by both tokenizers: finding the vocabulary's control
// and user-defined tokens in text (EncodeOptions::parse_special), and the set
// of tokens that end a generation (Tokenizer::IsEndOfGeneration).
//
// SpecialTokenMatcher splits text into runs of ordinary text and special
// tokens, left to right, taking at each position the longest special text
// that starts there ("<|im_start|>" over a shorter "<|im", "<s><s>" as two
// tokens). The texts sit in a byte trie whose root is indexed by first byte,
// so a split costs O(text bytes) for ordinary text and O(text bytes x longest
// special text) at worst; never quadratic in the text. llama.cpp's
// tokenizer_st_partition instead cuts the whole text at one special text at a
// time, longest first; the two agree unless occurrences of two different
// special texts overlap in the text ("ab" and "bcd" in "abcd": we take "ab",
// llama.cpp "bcd").
//
// Thread-safety: immutable after construction; safe to share across threads.
#ifndef KVSERVE_CORE_TOKENIZER_SPECIAL_TOKENS_H_
#define KVSERVE_CORE_TOKENIZER_SPECIAL_TOKENS_H_

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab.h"

namespace kvserve {

class SpecialTokenMatcher {
 public:
  // A run of the split text: a special token (id >= 0, `text` its
  // occurrence) or ordinary text (id == -1, never empty).
  struct Fragment {
    std::string_view text;
    int32_t id;
  };

  // Indexes the non-empty texts of `vocab`'s kControl and kUserDefined
  // tokens (byte, unknown and unused tokens are not special here), or its
  // kUserDefined ones only. When two such tokens share a text, the higher id
  // wins (as piece lookup does).
  enum class Kinds { kControlAndUserDefined, kUserDefinedOnly };
  explicit SpecialTokenMatcher(const Vocab& vocab,
                               Kinds kinds = Kinds::kControlAndUserDefined);

  // `text` as fragments (views into `text`) whose concatenation is `text`.
  std::vector<Fragment> Split(std::string_view text) const;
  // Split(), but this matcher's texts are taken only where they lie wholly
  // inside one of `ranges` (sorted, disjoint byte ranges of `text`); at other
  // positions, and where none fits inside, `outside`'s texts are taken
  // anywhere (none when it is null). EncodeOptions::special_ranges.
  std::vector<Fragment> SplitWithin(std::string_view text,
                                    const std::vector<ByteRange>& ranges,
                                    const SpecialTokenMatcher* outside) const;

  bool empty() const { return nodes_.empty(); }

 private:
  // The longest special text at text[pos]: {id, length}, or {-1, 0}.
  std::pair<int32_t, size_t> LongestAt(std::string_view text, size_t pos) const;

  struct Node {
    int32_t id = -1;  // the token whose text ends here, or -1
    // (next byte, node index), sorted by byte.
    std::vector<std::pair<uint8_t, int32_t>> children;
  };
  // First byte -> index into nodes_ of the node after it, or -1.
  std::array<int32_t, 256> first_byte_;
  std::vector<Node> nodes_;
};

// Per token id: whether it ends a generation. True for the vocabulary's eos,
// eot and eom ids, and for control tokens whose text is one of the usual
// end-of-turn texts (llama.cpp's list at vocabulary load: "<|eot_id|>",
// "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
// "<EOT>", ...). Unlike llama.cpp, a token of another type with such a text
// is left alone: it is ordinary text the model may write.
std::vector<bool> EndOfGenerationMask(const Vocab& vocab);

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_SPECIAL_TOKENS_H_
