#include "core/model/gguf_vocab.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace kvserve {
namespace {

// The optional token id under `key`: `fallback` when absent, -1 for the
// "none" values (-1 or 0xFFFFFFFF), an error when outside the vocabulary.
absl::StatusOr<int32_t> TokenId(const GgufFile& g, const char* key,
                                int32_t fallback, int32_t vocab_size) {
  if (g.Find(key) == nullptr) return fallback < vocab_size ? fallback : -1;
  absl::StatusOr<int64_t> v = g.GetInt(key);
  if (!v.ok()) return v.status();
  if (*v == -1 || *v == 0xFFFFFFFFLL) return -1;
  if (*v < 0 || *v >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF file %s: key '%s' is %d, outside the vocabulary of %d tokens",
        g.name(), key, *v, vocab_size));
  }
  return static_cast<int32_t>(*v);
}

absl::StatusOr<bool> OptionalBool(const GgufFile& g, const char* key,
                                  bool fallback) {
  if (g.Find(key) == nullptr) return fallback;
  return g.GetBool(key);
}

}  // namespace

absl::StatusOr<Vocab> VocabFromGguf(const GgufFile& g) {
  Vocab v;
  if (g.Find("tokenizer.ggml.model") == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF file %s has no tokenizer (key 'tokenizer.ggml.model' is "
        "missing)",
        g.name()));
  }
  absl::StatusOr<std::string> model = g.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model != "llama" && *model != "gpt2") {
    return absl::UnimplementedError(absl::StrFormat(
        "GGUF file %s: key 'tokenizer.ggml.model' is \"%s\"; supported "
        "tokenizers: llama (SentencePiece BPE), gpt2 (byte-level BPE)",
        g.name(), *model));
  }
  v.model = *model;
  const bool llama = v.model == "llama";

  absl::StatusOr<std::vector<std::string>> tokens =
      g.GetStringArray("tokenizer.ggml.tokens");
  if (!tokens.ok()) return tokens.status();
  if (tokens->empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF file %s: key 'tokenizer.ggml.tokens' is empty", g.name()));
  }
  v.tokens = std::move(*tokens);
  const auto n = static_cast<int32_t>(v.tokens.size());
  if (v.tokens.size() > (1u << 24)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF file %s: key 'tokenizer.ggml.tokens' holds %d tokens (too many)",
        g.name(), v.tokens.size()));
  }

  if (g.Find("tokenizer.ggml.scores") != nullptr) {
    absl::StatusOr<std::vector<double>> scores =
        g.GetFloatArray("tokenizer.ggml.scores");
    if (!scores.ok()) return scores.status();
    if (scores->size() != v.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF file %s: key 'tokenizer.ggml.scores' has %d entries for %d "
          "tokens",
          g.name(), scores->size(), n));
    }
    v.scores.assign(scores->begin(), scores->end());
  }

  if (g.Find("tokenizer.ggml.token_type") != nullptr) {
    absl::StatusOr<std::vector<int64_t>> types =
        g.GetIntArray("tokenizer.ggml.token_type");
    if (!types.ok()) return types.status();
    if (types->size() != v.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF file %s: key 'tokenizer.ggml.token_type' has %d entries for "
          "%d tokens",
          g.name(), types->size(), n));
    }
    v.token_types.reserve(types->size());
    for (size_t i = 0; i < types->size(); ++i) {
      int64_t t = (*types)[i];
      if (t < 0 || t > 6) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "GGUF file %s: key 'tokenizer.ggml.token_type': token %d has "
            "type %d (expected 0..6)",
            g.name(), i, t));
      }
      v.token_types.push_back(static_cast<TokenType>(t));
    }
  }

  if (g.Find("tokenizer.ggml.merges") != nullptr) {
    absl::StatusOr<std::vector<std::string>> merges =
        g.GetStringArray("tokenizer.ggml.merges");
    if (!merges.ok()) return merges.status();
    v.merges = std::move(*merges);
  } else if (!llama) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF file %s: gpt2 tokenizer without key 'tokenizer.ggml.merges'",
        g.name()));
  }
  if (g.Find("tokenizer.ggml.pre") != nullptr) {
    absl::StatusOr<std::string> pre = g.GetString("tokenizer.ggml.pre");
    if (!pre.ok()) return pre.status();
    v.pre_tokenizer = *pre;
  } else if (!llama) {
    v.pre_tokenizer = "default";  // llama.cpp's name for an absent key
  }

  struct {
    const char* key;
    int32_t fallback;
    int32_t* out;
  } ids[] = {{"tokenizer.ggml.bos_token_id", llama ? 1 : -1, &v.bos_id},
             {"tokenizer.ggml.eos_token_id", llama ? 2 : -1, &v.eos_id},
             {"tokenizer.ggml.eot_token_id", -1, &v.eot_id},
             {"tokenizer.ggml.eom_token_id", -1, &v.eom_id},
             {"tokenizer.ggml.unknown_token_id", llama ? 0 : -1, &v.unk_id}};
  for (const auto& id : ids) {
    absl::StatusOr<int32_t> value = TokenId(g, id.key, id.fallback, n);
    if (!value.ok()) return value.status();
    *id.out = *value;
  }
  absl::StatusOr<bool> add_bos =
      OptionalBool(g, "tokenizer.ggml.add_bos_token", true);
  if (!add_bos.ok()) return add_bos.status();
  v.add_bos = *add_bos;
  absl::StatusOr<bool> add_space =
      OptionalBool(g, "tokenizer.ggml.add_space_prefix", llama);
  if (!add_space.ok()) return add_space.status();
  v.add_space_prefix = *add_space;

  // Without token types, recover what decoding needs: byte tokens by their
  // "<0xNN>" form (llama only) and the special tokens.
  if (v.token_types.empty()) {
    v.token_types.assign(v.tokens.size(), TokenType::kNormal);
    if (llama) {
      for (int32_t i = 0; i < n; ++i) {
        if (ParseByteToken(v.tokens[i]) >= 0) {
          v.token_types[i] = TokenType::kByte;
        }
      }
    }
    if (v.bos_id >= 0) v.token_types[v.bos_id] = TokenType::kControl;
    if (v.eos_id >= 0) v.token_types[v.eos_id] = TokenType::kControl;
    if (v.unk_id >= 0) v.token_types[v.unk_id] = TokenType::kUnknown;
  }
  if (absl::Status s = v.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF file %s: %s", g.name(), s.message()));
  }
  return v;
}

}  // namespace kvserve
