#include "core/tokenizer/spm_tokenizer.h"

#include <queue>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

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

SpmTokenizer::SpmTokenizer(Vocab vocab) : vocab_(std::move(vocab)) {
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
  if (text.empty()) return out;
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
  if (options.add_dummy_prefix && vocab_.add_space_prefix) add_space();
  for (char c : text) {
    if (c == ' ') {
      add_space();
    } else {
      escaped += c;
    }
  }
  from_space.resize(escaped.size());
  EncodeEscaped(escaped, from_space, out);
  return out;
}

void SpmTokenizer::EncodeEscaped(std::string_view text,
                                 const std::vector<bool>& from_space,
                                 std::vector<int32_t>& out) const {
  // Symbols form a doubly linked list over `text`; a merged symbol keeps the
  // left index and absorbs the right one (whose len becomes 0).
  struct Symbol {
    int prev;
    int next;
    size_t start;
    size_t len;
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < text.size();) {
    size_t n = Utf8CharLen(text, i);
    int idx = static_cast<int>(symbols.size());
    symbols.push_back({idx - 1, idx + 1, i, n});
    i += n;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Bigram {
    int left;
    int right;
    float score;
    size_t len;  // of the merged text, to detect stale entries
  };
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(
      worse);
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const Symbol& l = symbols[left];
    const Symbol& r = symbols[right];
    std::string_view merged = text.substr(l.start, l.len + r.len);
    int32_t id = Lookup(merged);
    if (id < 0) return;
    queue.push({left, right, vocab_.score(id), merged.size()});
  };
  for (size_t i = 1; i < symbols.size(); ++i) {
    try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  }
  while (!queue.empty()) {
    Bigram top = queue.top();
    queue.pop();
    Symbol& l = symbols[top.left];
    Symbol& r = symbols[top.right];
    if (l.len == 0 || r.len == 0 || l.len + r.len != top.len) continue;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[r.next].prev = top.left;
    try_add(l.prev, top.left);
    try_add(top.left, l.next);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) {
    std::string_view piece = text.substr(symbols[i].start, symbols[i].len);
    int32_t id = Lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    if (from_space[symbols[i].start] && piece.size() == kSpace.size()) {
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

std::string SpmTokenizer::Piece(int32_t id) const {
  if (id < 0 || id >= vocab_.size()) return "";
  return vocab_.tokens[id];
}

}  // namespace kvserve
