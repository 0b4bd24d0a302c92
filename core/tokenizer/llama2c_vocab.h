// Reads llama2.c's tokenizer file (tokenizer.bin / tok512.bin): an int32
// max_token_length, then per token a float score, an int32 length and that
// many bytes. The result is the same Vocab a GGUF of the model holds: spaces
// become "▁", id 0 is the unknown token, ids 1 and 2 are BOS and EOS (control;
// the "\n<s>\n" decoration of llama2.c's export is trimmed to "<s>"), and
// "<0xNN>" pieces are byte tokens.
#ifndef KVSERVE_CORE_TOKENIZER_LLAMA2C_VOCAB_H_
#define KVSERVE_CORE_TOKENIZER_LLAMA2C_VOCAB_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/tokenizer/vocab.h"

namespace kvserve {

// `bytes` is the whole file; `name` names it in errors. When vocab_size > 0
// the file must hold exactly that many tokens.
absl::StatusOr<Vocab> ParseLlama2cVocab(std::string_view bytes,
                                        std::string_view name,
                                        int vocab_size = 0);
absl::StatusOr<Vocab> ReadLlama2cVocab(const std::string& path,
                                       int vocab_size = 0);

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_LLAMA2C_VOCAB_H_
