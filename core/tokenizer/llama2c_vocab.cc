#include "core/tokenizer/llama2c_vocab.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace kvserve {

absl::StatusOr<Vocab> ParseLlama2cVocab(std::string_view bytes,
                                        std::string_view name, int vocab_size) {
  size_t off = 0;
  auto read_i32 = [&](int32_t& v) {
    if (bytes.size() - off < 4) return false;
    std::memcpy(&v, bytes.data() + off, 4);
    off += 4;
    return true;
  };
  auto truncated = [&](std::string_view what, int64_t token) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama2.c tokenizer %s: truncated at byte offset %d reading %s of "
        "token %d",
        name, off, what, token));
  };
  int32_t max_token_length = 0;
  if (!read_i32(max_token_length)) return truncated("max_token_length", -1);
  if (max_token_length <= 0 || max_token_length > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama2.c tokenizer %s: max_token_length %d at byte offset 0 is not "
        "plausible",
        name, max_token_length));
  }
  Vocab vocab;
  vocab.model = "llama";
  while (off < bytes.size() && (vocab_size <= 0 || vocab.size() < vocab_size)) {
    int64_t token = vocab.size();
    float score;
    if (bytes.size() - off < 4) return truncated("score", token);
    std::memcpy(&score, bytes.data() + off, 4);
    off += 4;
    int32_t len = 0;
    if (!read_i32(len)) return truncated("length", token);
    if (len < 0 || len > max_token_length) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "llama2.c tokenizer %s: token %d at byte offset %d has length %d "
          "(max_token_length %d)",
          name, token, off - 4, len, max_token_length));
    }
    if (bytes.size() - off < static_cast<size_t>(len)) {
      return truncated("text", token);
    }
    std::string piece(bytes.substr(off, len));
    off += len;
    vocab.tokens.push_back(std::move(piece));
    vocab.scores.push_back(score);
  }
  if (vocab_size > 0 && vocab.size() != vocab_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama2.c tokenizer %s holds %d tokens but the model has vocab_size %d",
        name, vocab.size(), vocab_size));
  }
  if (vocab.size() < 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "llama2.c tokenizer %s holds %d tokens; needs at least <unk>, <s>, "
        "</s>",
        name, vocab.size()));
  }
  vocab.token_types.assign(vocab.tokens.size(), TokenType::kNormal);
  for (int32_t id = 0; id < vocab.size(); ++id) {
    std::string& piece = vocab.tokens[id];
    if (id == 0) {
      vocab.token_types[id] = TokenType::kUnknown;
    } else if (id == 1 || id == 2) {
      vocab.token_types[id] = TokenType::kControl;
      piece = std::string(absl::StripAsciiWhitespace(piece));
    } else if (ParseByteToken(piece) >= 0) {
      vocab.token_types[id] = TokenType::kByte;
    } else {
      piece = absl::StrReplaceAll(piece, {{" ", "\xE2\x96\x81"}});
    }
  }
  vocab.unk_id = 0;
  vocab.bos_id = 1;
  vocab.eos_id = 2;
  vocab.add_bos = true;
  vocab.add_space_prefix = true;
  return vocab;
}

absl::StatusOr<Vocab> ReadLlama2cVocab(const std::string& path,
                                       int vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrFormat("cannot open tokenizer file %s", path));
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(
        absl::StrFormat("cannot read tokenizer file %s", path));
  }
  return ParseLlama2cVocab(contents.str(), path, vocab_size);
}

}  // namespace kvserve
