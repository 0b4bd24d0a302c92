#include "core/tokenizer/bpe_tokenizer.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "core/tokenizer/bigram_merge.h"
#include "core/tokenizer/unicode.h"

namespace kvserve {
namespace {

enum class Cls { kLetter, kNumber, kSpace, kOther };

struct Char {
  uint32_t cp;
  uint32_t offset;
  Cls cls;
  bool newline;  // \r or \n
};

std::vector<Char> Classify(std::string_view text) {
  std::vector<Char> out;
  for (const Utf8Char& c : SplitUtf8(text)) {
    Cls cls = Cls::kOther;
    if (c.valid) {
      if (IsLetter(c.cp)) {
        cls = Cls::kLetter;
      } else if (IsNumber(c.cp)) {
        cls = Cls::kNumber;
      } else if (IsWhiteSpace(c.cp)) {
        cls = Cls::kSpace;
      }
    }
    out.push_back(
        {c.cp, c.offset, cls, c.valid && (c.cp == '\r' || c.cp == '\n')});
  }
  return out;
}

uint32_t Lower(uint32_t cp) { return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp; }

}  // namespace

std::vector<std::string_view> BpeTokenizer::SplitLlama3(std::string_view text) {
  const std::vector<Char> c = Classify(text);
  const size_t n = c.size();
  auto offset = [&](size_t i) {
    return i < n ? c[i].offset : static_cast<uint32_t>(text.size());
  };
  auto is = [&](size_t i, Cls cls) { return i < n && c[i].cls == cls; };
  auto run = [&](size_t i, Cls cls) {  // end of the run of `cls` from i
    while (i < n && c[i].cls == cls) ++i;
    return i;
  };
  std::vector<std::string_view> out;
  for (size_t i = 0; i < n;) {
    size_t end = i;
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c[i].cp == '\'' && i + 1 < n) {
      uint32_t a = Lower(c[i + 1].cp);
      uint32_t b = i + 2 < n ? Lower(c[i + 2].cp) : 0;
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        end = i + 2;
      } else if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') ||
                 (a == 'l' && b == 'l')) {
        end = i + 3;
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (end == i) {
      if (c[i].cls == Cls::kLetter) {
        end = run(i, Cls::kLetter);
      } else if (!c[i].newline && c[i].cls != Cls::kNumber &&
                 is(i + 1, Cls::kLetter)) {
        end = run(i + 1, Cls::kLetter);
      }
    }
    // \p{N}{1,3}
    if (end == i && c[i].cls == Cls::kNumber) {
      end = i + 1;
      while (end < n && end < i + 3 && c[end].cls == Cls::kNumber) ++end;
    }
    // ' '?[^\s\p{L}\p{N}]+[\r\n]*
    if (end == i) {
      size_t start = c[i].cp == ' ' && c[i].cls == Cls::kSpace ? i + 1 : i;
      if (is(start, Cls::kOther)) {
        end = run(start, Cls::kOther);
        while (end < n && c[end].newline) ++end;
      }
    }
    if (end == i && c[i].cls == Cls::kSpace) {
      size_t ws_end = run(i, Cls::kSpace);
      // \s*[\r\n]+ : up to the last newline of the whitespace run.
      for (size_t k = ws_end; k > i; --k) {
        if (c[k - 1].newline) {
          end = k;
          break;
        }
      }
      // \s+(?!\S) : the run, minus its last char unless the text ends.
      if (end == i) {
        if (ws_end == n) {
          end = ws_end;
        } else if (ws_end - i >= 2) {
          end = ws_end - 1;
        } else {
          end = ws_end;  // \s+
        }
      }
    }
    if (end == i) end = i + 1;  // unreachable: every class is covered
    out.push_back(text.substr(offset(i), offset(end) - offset(i)));
    i = end;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(
    Vocab vocab) {
  if (absl::Status s = vocab.Validate(); !s.ok()) return s;
  if (vocab.model != "gpt2") {
    return absl::InvalidArgumentError(absl::StrFormat(
        "byte-level BPE tokenizer needs model gpt2, got \"%s\"", vocab.model));
  }
  const std::string& pre = vocab.pre_tokenizer;
  if (pre != "llama-bpe" && pre != "llama3" && pre != "llama-v3") {
    return absl::UnimplementedError(absl::StrFormat(
        "gpt2 tokenizer with pre-tokenizer \"%s\" (key tokenizer.ggml.pre) is "
        "not supported (supported: llama-bpe)",
        pre));
  }
  auto t = std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(vocab)));
  if (absl::Status s = t->Init(); !s.ok()) return s;
  return t;
}

BpeTokenizer::BpeTokenizer(Vocab vocab)
    : vocab_(std::move(vocab)),
      special_(vocab_),
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
  piece_to_id_.reserve(vocab_.tokens.size());
  for (int32_t id = 0; id < vocab_.size(); ++id) {
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
  if (!options.parse_special || special_.empty()) {
    EncodeText(text, out);
    return out;
  }
  for (const SpecialTokenMatcher::Fragment& f : special_.Split(text)) {
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
  std::string mapped;
  for (std::string_view word : SplitLlama3(text)) {
    mapped.clear();
    for (char ch : word) mapped += byte_to_unicode_[static_cast<uint8_t>(ch)];
    EncodeWord(mapped, out);
  }
}

void BpeTokenizer::EncodeWord(std::string_view word,
                              std::vector<int32_t>& out) const {
  if (int32_t id = Lookup(word); id >= 0) {  // ignore_merges
    out.push_back(id);
    return;
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
