// Tokenizer: text <-> token ids with a model's own vocabulary.
//
// Thread-safety: immutable after construction; safe to share across threads.
#ifndef KVSERVE_CORE_TOKENIZER_TOKENIZER_H_
#define KVSERVE_CORE_TOKENIZER_TOKENIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve {

// Bytes [begin, end) of a text.
struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
};

struct EncodeOptions {
  // Prepend BOS (when the vocabulary has one and the model asks for it).
  bool add_bos = true;
  // SentencePiece's dummy-prefix space before non-empty text. A session's
  // later turns are encoded without it (and without BOS).
  bool add_dummy_prefix = true;
  // Match the vocabulary's control and user-defined tokens ("<|im_start|>",
  // "<|eot_id|>") in the text as whole tokens. Off for user text, so that it
  // cannot forge control tokens; on for rendered chat templates. (Byte-level
  // BPE matches user-defined tokens either way: bpe_tokenizer.h.)
  bool parse_special = false;
  // With parse_special: match only the special tokens that lie wholly inside
  // one of these byte ranges of the text (sorted, disjoint); elsewhere the
  // text is encoded as without parse_special. nullptr: anywhere. For a text
  // that mixes a template's own text (the ranges) with a conversation's
  // (RenderChatPrompt). Not owned; must outlive the Encode call.
  const std::vector<ByteRange>* special_ranges = nullptr;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  virtual std::vector<int32_t> Encode(std::string_view text,
                                      const EncodeOptions& options) const = 0;

  // The bytes token `id` stands for when it follows `prev_id` (a leading
  // space is dropped after BOS; byte tokens <0xNN> become the raw byte;
  // control tokens decode to nothing). Not necessarily valid UTF-8: feed it
  // through Utf8StreamDecoder.
  virtual std::string DecodeToken(int32_t prev_id, int32_t id) const = 0;

  // The token's vocabulary entry as text, for display ("<s>", "▁Once").
  virtual std::string Piece(int32_t id) const = 0;

  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;  // -1 when none
  virtual int32_t eos_id() const = 0;  // -1 when none
  // True for every token that ends a turn: eos, eot, eom and the control
  // tokens that stand for an end of turn ("<|im_end|>", "<|eot_id|>",
  // "<|end|>", "<end_of_turn>", "<|endoftext|>", ...).
  virtual bool IsEndOfGeneration(int32_t id) const = 0;
  // A control token (decodes to nothing; its Piece is its name, as
  // "<|python_tag|>"). For tool-call formats whose markers are control
  // tokens.
  virtual bool IsControl(int32_t /*id*/) const { return false; }
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_TOKENIZER_H_
