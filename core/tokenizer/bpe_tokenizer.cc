#include "core/tokenizer/bpe_tokenizer.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "core/tokenizer/bigram_merge.h"
#include "core/tokenizer/unicode.h"

namespace kvserve {
absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(
    Vocab vocab) {
  if (absl::Status s = vocab.Validate(); !s.ok()) return s;
  if (vocab.model != "gpt2") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "byte-level BPE tokenizer needs model gpt2, got \"%s\"", vocab.model));
  }
  absl::StatusOr<PreTokenizer> pre = PreTokenizer::ForName(
      vocab.pre_tokenizer.empty() ? "default" : vocab.pre_tokenizer);
  if (!pre.ok()) return pre.status();
  auto t = std::unique_ptr<BpeTokenizer>(
      new BpeTokenizer(std::move(vocab), *std::move(pre)));
  if (absl::Status s = t->Init(); !s.ok()) return s;
  return t;
}

BpeTokenizer::BpeTokenizer(Vocab vocab, PreTokenizer pre_tokenizer)
    : vocab_(std::move(vocab)),
      pre_tokenizer_(std::move(pre_tokenizer)),
      special_(vocab_),
      user_defined_(vocab_, SpecialTokenMatcher::Kinds::kUserDefinedOnly),
      end_of_generation_(EndOfGenerationMask(vocab_)) {}

absl::Status BpeTokenizer::Init() {
  // GPT-2: printable Latin-1 bytes stand for themselves, the other 68 bytes
  // for U+0100.. in byte order.
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
                     (b >= 174 && b <= 255);
    uint32_t cp = printable ? static_cast<uint32_t>(b) : next++;
    AppendUtf8(cp, byte_to_unicode_[b]);
    unicode_to_byte_[cp] = static_cast<uint8_t>(b);
  }
  // Merges build the model's own tokens only: control and user-defined ones
  // come from the special-token split (DeepSeek's user-defined "ÿ" is raw
  // "\xC3\xBF", its byte-level namesake byte 0xFF).
  piece_to_id_.reserve(vocab_.tokens.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const TokenType type = vocab_.type(id);
    if (type == TokenType::kControl || type == TokenType::kUserDefined) {
      continue;
    }
    piece_to_id_[vocab_.tokens[id]] = id;
  }
  merge_rank_.reserve(vocab_.merges.size());
  for (size_t r = 0; r < vocab_.merges.size(); ++r) {
    const std::string& m = vocab_.merges[r];
    size_t space = m.find(' ', 1);
    if (space == std::string::npos || space + 1 >= m.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "tokenizer.ggml.merges entry %d (\"%s\") is not \"left right\"", r,
          m));
    }
    merge_rank_.emplace(m, static_cast<int32_t>(r));  // first rank wins
  }
  decoded_.resize(vocab_.tokens.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    TokenType type = vocab_.type(id);
    if (type == TokenType::kControl || type == TokenType::kUnused) continue;
    const std::string& piece = vocab_.tokens[id];
    if (type == TokenType::kUserDefined) {
      decoded_[id] = piece;
      continue;
    }
    for (const Utf8Char& c : SplitUtf8(piece)) {
      auto it = c.valid ? unicode_to_byte_.find(c.cp) : unicode_to_byte_.end();
      if (it != unicode_to_byte_.end()) {
        decoded_[id] += static_cast<char>(it->second);
      } else {
        decoded_[id].append(piece, c.offset, c.len);  // outside the alphabet
      }
    }
  }
  return absl::OkStatus();
}

int32_t BpeTokenizer::Lookup(std::string_view piece) const {
  auto it = piece_to_id_.find(absl::string_view(piece.data(), piece.size()));
  return it == piece_to_id_.end() ? -1 : it->second;
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text,
                                          const EncodeOptions& options) const {
  std::vector<int32_t> out;
  if (options.add_bos && vocab_.add_bos && vocab_.bos_id >= 0) {
    out.push_back(vocab_.bos_id);
  }
  const bool within = options.parse_special && options.special_ranges;
  const SpecialTokenMatcher& matcher =
      options.parse_special ? special_ : user_defined_;
  if (matcher.empty()) {
    EncodeText(text, out);
    return out;
  }
  // User-defined tokens are matched everywhere either way.
  for (const SpecialTokenMatcher::Fragment& f :
       within
           ? special_.SplitWithin(text, *options.special_ranges, &user_defined_)
           : matcher.Split(text)) {
    if (f.id >= 0) {
      out.push_back(f.id);
    } else {
      EncodeText(f.text, out);
    }
  }
  return out;
}

void BpeTokenizer::EncodeText(std::string_view text,
                              std::vector<int32_t>& out) const {
  // A match error (a PCRE2 resource limit) leaves the text unsplit: fewer
  // merges, but every byte still encodes.
  absl::StatusOr<std::vector<std::string_view>> words =
      pre_tokenizer_.Split(text);
  if (!words.ok()) words = std::vector<std::string_view>{text};
  std::string mapped;
  for (std::string_view word : *words) {
    mapped.clear();
    for (char ch : word) mapped += byte_to_unicode_[static_cast<uint8_t>(ch)];
    EncodeWord(mapped, out);
  }
}

void BpeTokenizer::EncodeWord(std::string_view word,
                              std::vector<int32_t>& out) const {
  if (pre_tokenizer_.ignore_merges()) {
    if (int32_t id = Lookup(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<std::string_view> chars;
  for (const Utf8Char& c : SplitUtf8(word)) {
    chars.push_back(word.substr(c.offset, c.len));
  }
  std::string key;
  const std::vector<std::string_view> pieces = MergeBigrams(
      chars,
      [&](std::string_view l, std::string_view r) -> std::optional<double> {
        key.assign(l);
        key += ' ';
        key.append(r);
        auto it = merge_rank_.find(key);
        if (it == merge_rank_.end()) return std::nullopt;
        return -static_cast<double>(it->second);  // lower ranks merge first
      });
  for (std::string_view piece : pieces) {
    if (int32_t id = Lookup(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    // Not in the vocabulary: one token per character (each stands for one
    // byte), or the unknown token.
    for (const Utf8Char& c : SplitUtf8(piece)) {
      int32_t id = Lookup(piece.substr(c.offset, c.len));
      if (id < 0) id = vocab_.unk_id;
      if (id >= 0) out.push_back(id);
    }
  }
}

std::string BpeTokenizer::DecodeToken(int32_t /*prev_id*/, int32_t id) const {
  if (id < 0 || id >= vocab_.size()) return "";
  return decoded_[id];
}

bool BpeTokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && id < vocab_.size() && end_of_generation_[id];
}

std::string BpeTokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_.size()) return "";
  return vocab_.tokens[id];
}

}  // namespace kvserve
