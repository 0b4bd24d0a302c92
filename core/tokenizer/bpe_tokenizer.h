// BpeTokenizer: byte-level BPE (GGUF tokenizer.ggml.model "gpt2", as Llama 3
// uses it). Encoding splits the text with the pre-tokenizer (only
// "llama-bpe", Llama 3's regex, implemented by hand), maps each piece's bytes
// to GPT-2's printable byte<->unicode alphabet, emits the piece whole when it
// is a token (llama.cpp's ignore_merges for llama-bpe), else repeatedly merges
// the adjacent pair of lowest merge rank (leftmost on ties). Decoding maps the
// alphabet back to bytes; control tokens decode to nothing. There is no dummy
// prefix and no space stripping after BOS. With EncodeOptions::parse_special
// the text is first split at the vocabulary's special tokens
// (special_tokens.h) and each run of text between them is pre-tokenized and
// encoded alone.
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
#include "core/tokenizer/special_tokens.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab.h"

namespace kvserve {

class BpeTokenizer : public Tokenizer {
 public:
  // REQUIRES: vocab.model == "gpt2". Fails, naming it, for a pre-tokenizer
  // other than llama-bpe (aliases llama3, llama-v3), and for malformed merges.
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(Vocab vocab);

  // The llama-bpe split of `text` into pieces (views into `text`; their
  // concatenation is `text`), as the regex
  //   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  // would split it. Bytes that are not valid UTF-8 count as symbols.
  static std::vector<std::string_view> SplitLlama3(std::string_view text);

  std::vector<int32_t> Encode(std::string_view text,
                              const EncodeOptions& options) const override;
  std::string DecodeToken(int32_t prev_id, int32_t id) const override;
  std::string Piece(int32_t id) const override;
  int32_t vocab_size() const override { return vocab_.size(); }
  int32_t bos_id() const override { return vocab_.bos_id; }
  int32_t eos_id() const override { return vocab_.eos_id; }
  bool IsEndOfGeneration(int32_t id) const override;

 private:
  explicit BpeTokenizer(Vocab vocab);
  absl::Status Init();
  // Appends the ids for ordinary `text` (split, mapped, merged).
  void EncodeText(std::string_view text, std::vector<int32_t>& out) const;
  void EncodeWord(std::string_view word, std::vector<int32_t>& out) const;
  int32_t Lookup(std::string_view piece) const;

  const Vocab vocab_;
  absl::flat_hash_map<std::string, int32_t> piece_to_id_;
  // "left right" -> rank, keyed by the two pieces joined with a space.
  absl::flat_hash_map<std::string, int32_t> merge_rank_;
  // GPT-2's byte -> unicode alphabet, as UTF-8.
  std::array<std::string, 256> byte_to_unicode_;
  // The inverse, by code point (-1 outside the alphabet).
  absl::flat_hash_map<uint32_t, uint8_t> unicode_to_byte_;
  std::vector<std::string> decoded_;
  const SpecialTokenMatcher special_;
  const std::vector<bool> end_of_generation_;  // by id
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_BPE_TOKENIZER_H_
