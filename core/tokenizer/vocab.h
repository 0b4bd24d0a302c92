// Vocab: a tokenizer's vocabulary as a model file describes it (GGUF's
// tokenizer.ggml.* keys, or llama2.c's tokenizer file), independent of the
// algorithm that uses it. CreateTokenizer (tokenizer_factory.h) turns it into a
// Tokenizer.
//
// Invariants (checked by Validate()): tokens is non-empty; scores and
// token_types are empty or as long as tokens; special ids are -1 or in range.
#ifndef KVSERVE_CORE_TOKENIZER_VOCAB_H_
#define KVSERVE_CORE_TOKENIZER_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace kvserve {

// GGUF's tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct Vocab {
  // "llama": SentencePiece-style BPE over scores, spaces as U+2581, byte
  //          fallback tokens "<0xNN>".
  // "gpt2":  byte-level BPE over ranked merges (GPT-2, Llama 3, Qwen 2,
  //          ...), GPT-2's byte<->unicode mapping, split by `pre_tokenizer`
  //          first.
  std::string model = "llama";
  std::vector<std::string> tokens;     // piece text, indexed by id
  std::vector<float> scores;           // llama: merge priority; may be empty
  std::vector<TokenType> token_types;  // empty = all kNormal
  std::vector<std::string> merges;     // gpt2: "left right", rank = index
  // gpt2: GGUF tokenizer.ggml.pre (pre_tokenizer.h); empty = "default".
  std::string pre_tokenizer;
  int32_t bos_id = -1;  // -1 = none
  int32_t eos_id = -1;
  int32_t eot_id = -1;  // end of turn (tokenizer.ggml.eot_token_id)
  int32_t eom_id = -1;  // end of message (tokenizer.ggml.eom_token_id)
  int32_t unk_id = -1;
  bool add_bos = true;           // tokenizer.ggml.add_bos_token
  bool add_space_prefix = true;  // llama: tokenizer.ggml.add_space_prefix

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  TokenType type(int32_t id) const {
    return token_types.empty() ? TokenType::kNormal : token_types[id];
  }
  float score(int32_t id) const { return scores.empty() ? 0.0f : scores[id]; }

  absl::Status Validate() const;
};

// The built-in model's vocabulary: "<unk>" = 0, "<s>" = 1 (BOS), "</s>" = 2
// (EOS), then "<0x00>".."<0xFF>" = 3..258 as byte tokens (llama's
// byte-fallback scheme), so every byte string encodes losslessly. No dummy
// prefix (there is no "▁" piece to carry it).
Vocab ByteLevelVocab();

// The byte a "<0xNN>" piece stands for, or -1 when `piece` is not of that form.
int ParseByteToken(const std::string& piece);

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_VOCAB_H_
