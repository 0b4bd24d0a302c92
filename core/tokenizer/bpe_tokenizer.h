// BpeTokenizer: byte-level BPE (GGUF tokenizer.ggml.model "gpt2": GPT-2,
// Llama 3, Qwen 2, DeepSeek, StarCoder, ...). Encoding splits the text with
// the pre-tokenizer that tokenizer.ggml.pre names (pre_tokenizer.h), maps
// each piece's bytes to GPT-2's printable byte<->unicode alphabet, emits the
// piece whole when it is a token and the pre-tokenizer asks for that
// (llama.cpp's ignore_merges, Llama 3), else repeatedly merges the adjacent
// pair of lowest merge rank (leftmost on ties). Decoding maps the alphabet
// back to bytes; control tokens decode to nothing. There is no dummy prefix
// and no space stripping after BOS. The text is first split at the
// vocabulary's user-defined tokens (special_tokens.h), and with
// EncodeOptions::parse_special at its control tokens too; each run of text
// between them is pre-tokenized and encoded alone. (User-defined tokens are
// the Hugging Face tokenizer's non-special added tokens, which it always
// matches, as llama.cpp's tokenizer_st_partition does: DeepSeek's "ü" is
// one.)
// Any bytes encode, well-formed UTF-8 or not, and decode back unchanged when
// the vocabulary has all 256 byte symbols.
//
// Thread-safety: immutable after Create(); safe to share across threads.
#ifndef KVSERVE_CORE_TOKENIZER_BPE_TOKENIZER_H_
#define KVSERVE_CORE_TOKENIZER_BPE_TOKENIZER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/special_tokens.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab.h"

namespace kvserve {

class BpeTokenizer : public Tokenizer {
 public:
  // REQUIRES: vocab.model == "gpt2". Fails for a pre-tokenizer the table
  // does not know (naming it and the supported ones; an empty
  // vocab.pre_tokenizer is "default", as an absent GGUF key) and for
  // malformed merges.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(Vocab vocab);

  std::vector<int32_t> Encode(std::string_view text,
                              const EncodeOptions& options) const override;
  std::string DecodeToken(int32_t prev_id, int32_t id) const override;
  std::string Piece(int32_t id) const override;
  int32_t vocab_size() const override { return vocab_.size(); }
  int32_t bos_id() const override { return vocab_.bos_id; }
  int32_t eos_id() const override { return vocab_.eos_id; }
  bool IsEndOfGeneration(int32_t id) const override;
  bool IsControl(int32_t id) const override {
    return id >= 0 && id < vocab_.size() &&
           vocab_.type(id) == TokenType::kControl;
  }

 private:
  BpeTokenizer(Vocab vocab, PreTokenizer pre_tokenizer);
  absl::Status Init();
  // Appends the ids for ordinary `text` (split, mapped, merged).
  void EncodeText(std::string_view text, std::vector<int32_t>& out) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;
  int32_t Lookup(std::string_view piece) const;

  const Vocab vocab_;
  const PreTokenizer pre_tokenizer_;
  // Piece -> id of the tokens merges may build (neither control nor
  // user-defined).
  absl::flat_hash_map<std::string, int32_t> piece_to_id_;
  // "left right" -> rank, keyed by the two pieces joined with a space.
  absl::flat_hash_map<std::string, int32_t> merge_rank_;
  // GPT-2's byte -> unicode alphabet, as UTF-8.
  std::array<std::string, 256> byte_to_unicode_;
  // The inverse, by code point (-1 outside the alphabet).
  absl::flat_hash_map<uint32_t, uint8_t> unicode_to_byte_;
  std::vector<std::string> decoded_;
  const SpecialTokenMatcher special_;          // control and user-defined
  const SpecialTokenMatcher user_defined_;     // user-defined only
  const std::vector<bool> end_of_generation_;  // by id
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_BPE_TOKENIZER_H_
