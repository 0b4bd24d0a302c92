// CreateTokenizer: the Tokenizer for a vocabulary, chosen by Vocab::model.
#ifndef KVSERVE_CORE_TOKENIZER_TOKENIZER_FACTORY_H_
#define KVSERVE_CORE_TOKENIZER_TOKENIZER_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocab.h"

namespace kvserve {

// "llama" -> SentencePiece-style BPE; "gpt2" -> byte-level BPE with the
// pre-tokenizer Vocab::pre_tokenizer names (pre_tokenizer.h). Errors name the
// unsupported model or pre-tokenizer, or the inconsistency in the vocabulary.
absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(const Vocab& vocab);

}  // namespace kvserve

#endif  // KVSERVE_CORE_TOKENIZER_TOKENIZER_FACTORY_H_
