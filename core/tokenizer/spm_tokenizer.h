// SpmTokenizer: SentencePiece-style BPE (GGUF tokenizer.ggml.model "llama",
// llama2.c's tokenizer). Encoding escapes spaces as "▁" (U+2581), adds the
// dummy-prefix "▁", starts from one symbol per UTF-8 character and repeatedly
// merges the adjacent pair whose concatenation is a token with the highest
// score (leftmost on ties), exactly as llama2.c's run.c encode() and
// llama.cpp's llm_tokenizer_spm do; characters without a token fall back to
// their bytes' "<0xNN>" tokens (looked up by piece text; an escaped space
// falls back to <0x20>), or to the unknown
// token when the vocabulary has no such byte token.
//
// With EncodeOptions::parse_special the text is first split at the
// vocabulary's special tokens (special_tokens.h) and each run of text between
// them is encoded alone; as in llama.cpp's llama_tokenize_impl, the dummy
// prefix goes on a run that starts the text or follows a special token.
//
// Thread-safety: immutable after Create(); safe to share across threads.
#ifndef KVSERVE_CORE_TOKENIZER_SPM_TOKENIZER_H_
#define KVSERVE_CORE_TOKENIZER_SPM_TOKENIZER_H_

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

class SpmTokenizer : public Tokenizer {
 public:
  // REQUIRES: vocab.model == "llama".
  static absl::StatusOr<std::unique_ptr<SpmTokenizer>> Create(Vocab vocab);

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
  explicit SpmTokenizer(Vocab vocab);

  // Appends the ids for `text` (raw: spaces not yet escaped), with the
  // dummy-prefix "▁" before it when `dummy_prefix` and `text` is non-empty.
  void EncodeText(std::string_view text, bool dummy_prefix,
                  std::vector<int32_t>& out) const;
  // Appends the ids for `text` (spaces already escaped to "▁"; from_space
  // marks where each escaped space starts) to `out`.
  void EncodeEscaped(std::string_view text, const std::vector<bool>& from_space,
                     std::vector<int32_t>& out) const;
  int32_t Lookup(std::string_view piece) const;

  const Vocab vocab_;
  // Piece text -> id (the last id wins for duplicates, as in llama.cpp).
  absl::flat_hash_map<std::string, int32_t> piece_to_id_;
  // Byte value -> id of its "<0xNN>" token, or unk id (or -1).
  std::array<int32_t, 256> byte_to_id_;
  // What each id decodes to (before the after-BOS space strip).
  std::vector<std::string> decoded_;
  const SpecialTokenMatcher special_;
  const std::vector<bool> end_of_generation_;  // by id
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_SPM_TOKENIZER_H_
