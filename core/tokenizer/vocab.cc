#include "core/tokenizer/vocab.h"

#include "absl/strings/str_format.h"

namespace kvserve {

absl::Status Vocab::Validate() const {
  if (model != "llama" && model != "gpt2") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tokenizer model \"%s\" is not supported (expected llama or gpt2)",
        model));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError("vocabulary has no tokens");
  }
  if (!scores.empty() && scores.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vocabulary has %d tokens but %d scores", tokens.size(),
                        scores.size()));
  }
  if (!token_types.empty() && token_types.size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vocabulary has %d tokens but %d token types",
                        tokens.size(), token_types.size()));
  }
  for (auto [name, id] : {std::pair{"bos", bos_id},
                          {"eos", eos_id},
                          {"eot", eot_id},
                          {"eom", eom_id},
                          {"unknown", unk_id}}) {
    if (id < -1 || id >= size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s token id %d is outside the vocabulary [0, %d)",
                          name, id, size()));
    }
  }
  return absl::OkStatus();
}

Vocab ByteLevelVocab() {
  Vocab v;
  v.model = "llama";
  v.tokens = {"<unk>", "<s>", "</s>"};
  v.token_types = {TokenType::kUnknown, TokenType::kControl,
                   TokenType::kControl};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(absl::StrFormat("<0x%02X>", b));
    v.token_types.push_back(TokenType::kByte);
  }
  v.scores.assign(v.tokens.size(), 0.0f);
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = false;
  return v;
}

int ParseByteToken(const std::string& piece) {
  if (piece.size() != 6 || piece[0] != '<' || piece[1] != '0' ||
      piece[2] != 'x' || piece[5] != '>') {
    return -1;
  }
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(piece[3]), lo = hex(piece[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

}  // namespace kvserve
