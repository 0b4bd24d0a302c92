// The tokenizer vocabulary stored in a GGUF file's tokenizer.ggml.* keys.
#ifndef KVSERVE_CORE_MODEL_GGUF_VOCAB_H_
#define KVSERVE_CORE_MODEL_GGUF_VOCAB_H_

#include "absl/status/statusor.h"
#include "core/model/gguf.h"
#include "core/tokenizer/vocab.h"

namespace kvserve {

// Reads tokenizer.ggml.{model, tokens, scores, token_type, merges, pre,
// bos_token_id, eos_token_id, eot_token_id, eom_token_id, unknown_token_id,
// add_bos_token, add_space_prefix}. Absent optional keys take llama.cpp's
// defaults (llama: unk 0, BOS 1, EOS 2, add_bos true, add_space_prefix true;
// gpt2: no dummy prefix; no eot or eom). Errors name the key.
absl::StatusOr<Vocab> VocabFromGguf(const GgufFile& gguf);

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_GGUF_VOCAB_H_
