#include "core/tokenizer/spm_tokenizer.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/tokenizer/bigram_merge.h"

namespace kvserve {
namespace {

constexpr absl::string_view kSpace = "\xE2\x96\x81";  // U+2581 "▁"

// Length of the UTF-8 character starting at s[i]: a lead byte and all its
// continuation bytes when well-formed, otherwise 1 (the byte alone).
size_t Utf8CharLen(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80           ? 1
             : (c >> 5) == 0x6  ? 2
             : (c >> 4) == 0xE  ? 3
             : (c >> 3) == 0x1E ? 4
                                : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SpmTokenizer>> SpmTokenizer::Create(
    Vocab vocab) {
  if (absl::Status s = vocab.Validate(); !s.ok()) return s;
  if (vocab.model != "llama") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SentencePiece tokenizer needs model llama, got \"%s\"", vocab.model));
  }
  return std::unique_ptr<SpmTokenizer>(new SpmTokenizer(std::move(vocab)));
}

SpmTokenizer::SpmTokenizer(Vocab vocab)
    : vocab_(std::move(vocab)),
      special_(vocab_),
      end_of_generation_(EndOfGenerationMask(vocab_)) {
  piece_to_id_.reserve(vocab_.tokens.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    piece_to_id_[vocab_.tokens[id]] = id;
  }
  for (int b = 0; b < 256; ++b) {
    int32_t id = Lookup(absl::StrFormat("<0x%02X>", b));
    byte_to_id_[b] = id >= 0 ? id : vocab_.unk_id;
  }
  decoded_.resize(vocab_.tokens.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    const std::string& piece = vocab_.tokens[id];
    switch (vocab_.type(id)) {
      case TokenType::kControl:
      case TokenType::kUnused:
        break;  // decodes to nothing
      case TokenType::kUnknown:
        decoded_[id] = "\xE2\x96\x85";  // "▅", as llama.cpp prints it
        break;
      case TokenType::kByte: {
        int b = ParseByteToken(piece);
        if (b >= 0) decoded_[id] = std::string(1, static_cast<char>(b));
        break;
      }
      case TokenType::kUserDefined:
        decoded_[id] = piece;
        break;
      default:
        decoded_[id] = absl::StrReplaceAll(piece, {{kSpace, " "}});
        break;
    }
  }
}

int32_t SpmTokenizer::Lookup(std::string_view piece) const {
  auto it = piece_to_id_.find(absl::string_view(piece.data(), piece.size()));
  return it == piece_to_id_.end() ? -1 : it->second;
}

std::vector<int32_t> SpmTokenizer::Encode(std::string_view text,
                                          const EncodeOptions& options) const {
  std::vector<int32_t> out;
  if (options.add_bos && vocab_.add_bos && vocab_.bos_id >= 0) {
    out.push_back(vocab_.bos_id);
  }
  const bool dummy_prefix = options.add_dummy_prefix && vocab_.add_space_prefix;
  if (!options.parse_special || special_.empty()) {
    EncodeText(text, dummy_prefix, out);
    return out;
  }
  // llama.cpp's is_prev_special: the text's first run (after BOS or not) and
  // every run after a special token take the dummy prefix.
  bool after_special = true;
  for (const SpecialTokenMatcher::Fragment& f :
       options.special_ranges != nullptr
           ? special_.SplitWithin(text, *options.special_ranges, nullptr)
           : special_.Split(text)) {
    if (f.id >= 0) {
      out.push_back(f.id);
      after_special = true;
    } else {
      EncodeText(f.text, dummy_prefix && after_special, out);
      after_special = false;
    }
  }
  return out;
}

void SpmTokenizer::EncodeText(std::string_view text, bool dummy_prefix,
                              std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // `from_space[i]` marks where an escaped space starts, so a "▁" without a
  // piece falls back to the byte of the space it stands for (as llama2.c).
  std::string escaped;
  std::vector<bool> from_space;
  escaped.reserve(text.size() + text.size() / 2 + kSpace.size());
  auto add_space = [&] {
    from_space.resize(escaped.size() + kSpace.size());
    from_space[escaped.size()] = true;
    escaped.append(kSpace.data(), kSpace.size());
  };
  if (dummy_prefix) add_space();
  for (char c : text) {
    if (c == ' ') {
      add_space();
    } else {
      escaped += c;
    }
  }
  from_space.resize(escaped.size());
  EncodeEscaped(escaped, from_space, out);
}

void SpmTokenizer::EncodeEscaped(std::string_view text,
                                 const std::vector<bool>& from_space,
                                 std::vector<int32_t>& out) const {
  std::vector<std::string_view> chars;
  for (size_t i = 0; i < text.size();) {
    const size_t n = Utf8CharLen(text, i);
    chars.push_back(text.substr(i, n));
    i += n;
  }
  const std::vector<std::string_view> pieces = MergeBigrams(
      chars,
      [this](std::string_view l, std::string_view r) -> std::optional<double> {
        const int32_t id =
            Lookup(std::string_view(l.data(), l.size() + r.size()));
        if (id < 0) return std::nullopt;
        return vocab_.score(id);
      });
  for (std::string_view piece : pieces) {
    int32_t id = Lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    if (from_space[piece.data() - text.data()] &&
        piece.size() == kSpace.size()) {
      piece = " ";
    }
    for (char c : piece) {
      int32_t b = byte_to_id_[static_cast<unsigned char>(c)];
      if (b >= 0) out.push_back(b);
    }
  }
}

std::string SpmTokenizer::DecodeToken(int32_t prev_id, int32_t id) const {
  if (id < 0 || id >= vocab_.size()) return "";
  const std::string& text = decoded_[id];
  if (prev_id >= 0 && prev_id == vocab_.bos_id && !text.empty() &&
      text[0] == ' ' && vocab_.type(id) == TokenType::kNormal) {
    return text.substr(1);
  }
  return text;
}

bool SpmTokenizer::IsEndOfGeneration(int32_t id) const {
  return id >= 0 && id < vocab_.size() && end_of_generation_[id];
}

std::string SpmTokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_.size()) return "";
  return vocab_.tokens[id];
}

}  // namespace kvserve
