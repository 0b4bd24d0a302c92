#include "core/tokenizer/tokenizer_factory.h"

#include "absl/strings/str_format.h"
#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/spm_tokenizer.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(const Vocab& vocab) {
  if (vocab.model == "llama") {
    absl::StatusOr<std::unique_ptr<SpmTokenizer>> t =
        SpmTokenizer::Create(vocab);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(*t));
  }
  if (vocab.model == "gpt2") {
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> t =
        BpeTokenizer::Create(vocab);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(*t));
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "tokenizer model \"%s\" is not supported (expected llama or gpt2)",
      vocab.model));
}

}  // namespace kvserve
