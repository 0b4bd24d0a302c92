#include "core/chat/jinja_lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "core/chat/jinja_value.h"

namespace kvserve::jinja {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's newline handling: \r\n and \r become \n, and one trailing
// newline is dropped (keep_trailing_newline=False).
std::string NormalizeNewlines(std::string_view source) {
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(NormalizeNewlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      const size_t tag = FindTagStart(pos_);
      if (tag == std::string::npos) {
        Emit(Tok::kData, pos_, std::string(src_.substr(pos_)));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[tag + 1];
      size_t raw_end = 0;
      const bool raw = kind == '%' && MatchRawBegin(tag, &raw_end);
      size_t after = tag + 2;
      char sign = 0;
      if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) {
        sign = src_[after];
        if (!raw) ++after;
      }
      std::string_view text(src_.data() + pos_, tag - pos_);
      text = Strip(text, sign, /*is_variable=*/kind == '{');
      if (!text.empty()) Emit(Tok::kData, pos_, std::string(text));
      if (raw) {
        pos_ = raw_end;
        line_starting_ = src_[raw_end - 1] == '\n';
        if (absl::Status s = LexRaw(tag); !s.ok()) return s;
        continue;
      }
      if (kind == '#') {
        if (absl::Status s = LexComment(tag, after); !s.ok()) return s;
        continue;
      }
      const bool variable = kind == '{';
      Emit(variable ? Tok::kVarBegin : Tok::kBlockBegin, tag, "");
      pos_ = after;
      line_starting_ = false;
      if (absl::Status s = LexTag(variable); !s.ok()) return s;
    }
    Emit(Tok::kEof, src_.size(), "");
    return std::move(out_);
  }

 private:
  std::pair<int, int> LineCol(size_t offset) const {
    const auto it =
        std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line),
            static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  absl::Status Error(size_t offset, std::string_view message) const {
    const auto [line, col] = LineCol(offset);
    return absl::InvalidArgumentError(
        Cat("line ", line, ":", col, ": ", message));
  }

  Token& Emit(Tok type, size_t offset, std::string text) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    std::tie(t.line, t.col) = LineCol(offset);
    out_.push_back(std::move(t));
    return out_.back();
  }

  // The code point at `p` and its length in bytes (lenient, as Decode).
  char32_t At(size_t p, size_t* len) const {
    const std::u32string cp = Decode(
        std::string_view(src_).substr(p, std::min<size_t>(4, src_.size() - p)));
    std::string first;
    AppendUtf8(cp[0], &first);
    *len = first.size();
    return cp[0];
  }

  // Past Python's \s* from p.
  size_t SkipSpace(size_t p) const {
    while (p < src_.size()) {
      const unsigned char c = static_cast<unsigned char>(src_[p]);
      if (c < 0x80) {
        if (!IsSpace(c)) break;
        ++p;
        continue;
      }
      size_t len = 0;
      if (!IsSpace(At(p, &len))) break;
      p += len;
    }
    return p;
  }

  bool StartsWith(size_t p, std::string_view s) const {
    return src_.compare(p, s.size(), s) == 0;
  }

  size_t FindTagStart(size_t from) const {
    size_t p = from;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() &&
          (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) {
        return p;
      }
      ++p;
    }
    return std::string::npos;
  }

  // {%(-|+|)\s*raw\s*(-%}\s*|%}) at `p`; its end in *end.
  bool MatchRawBegin(size_t p, size_t* end) const {
    p += 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = SkipSpace(p);
    if (!StartsWith(p, "raw")) return false;
    p = SkipSpace(p + 3);
    if (StartsWith(p, "-%}")) {
      *end = SkipSpace(p + 3);
      return true;
    }
    if (StartsWith(p, "%}")) {
      *end = p + 2;
      return true;
    }
    return false;
  }

  // The text before a tag after whitespace control: "-" strips all
  // whitespace; otherwise lstrip_blocks strips the spaces before a block or
  // comment tag that starts its line.
  std::string_view Strip(std::string_view text, char sign,
                         bool is_variable) const {
    if (sign == '-') {
      const std::u32string cps = Decode(text);
      size_t keep = cps.size();
      while (keep > 0 && IsSpace(cps[keep - 1])) --keep;
      size_t bytes = 0;
      for (size_t i = 0; i < keep; ++i) {
        std::string tmp;
        AppendUtf8(cps[i], &tmp);
        bytes += tmp.size();
      }
      return text.substr(0, bytes);
    }
    if (sign == '+' || is_variable) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting_) return text;
    const std::string_view tail = text.substr(l_pos);
    if (tail.empty()) return text;
    for (char32_t c : Decode(tail)) {
      if (!IsSpace(c)) return text;
    }
    return text.substr(0, l_pos);
  }

  absl::Status LexRaw(size_t begin) {
    size_t p = pos_;
    while ((p = src_.find("{%", p)) != std::string::npos) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) {
        sign = src_[q];
        ++q;
      }
      q = SkipSpace(q);
      if (!StartsWith(q, "endraw")) {
        ++p;
        continue;
      }
      q = SkipSpace(q + 6);
      size_t end = 0;
      if (StartsWith(q, "+%}")) {
        end = q + 3;
      } else if (StartsWith(q, "-%}")) {
        end = SkipSpace(q + 3);
      } else if (StartsWith(q, "%}")) {
        end = q + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        ++p;
        continue;
      }
      std::string_view text(src_.data() + pos_, p - pos_);
      text = Strip(text, sign, /*is_variable=*/false);
      if (!text.empty()) Emit(Tok::kData, pos_, std::string(text));
      pos_ = end;
      line_starting_ = src_[end - 1] == '\n';
      return absl::OkStatus();
    }
    return Error(begin, "missing end of raw directive");
  }

  absl::Status LexComment(size_t begin, size_t after) {
    const size_t r = src_.find("#}", after);
    if (r == std::string::npos)
      return Error(begin, "missing end of comment tag");
    size_t end = r + 2;
    if (r > after && src_[r - 1] == '-') {
      end = SkipSpace(end);
    } else if (r > after && src_[r - 1] == '+') {
      // "+#}": no trimming.
    } else if (end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    pos_ = end;
    line_starting_ = src_[end - 1] == '\n';
    return absl::OkStatus();
  }

  // Inside {{ }} or {% %} up to and including the end tag.
  absl::Status LexTag(bool variable) {
    std::vector<char> balance;
    while (pos_ < src_.size()) {
      const size_t p = pos_;
      if (balance.empty()) {
        size_t end = 0;
        if (variable) {
          if (StartsWith(p, "-}}")) {
            end = SkipSpace(p + 3);
          } else if (StartsWith(p, "}}")) {
            end = p + 2;
          }
        } else if (StartsWith(p, "+%}")) {
          end = p + 3;
        } else if (StartsWith(p, "-%}")) {
          end = SkipSpace(p + 3);
        } else if (StartsWith(p, "%}")) {
          end = p + 2;
          if (end < src_.size() && src_[end] == '\n') ++end;
        }
        if (end != 0) {
          Emit(variable ? Tok::kVarEnd : Tok::kBlockEnd, p, "");
          pos_ = end;
          line_starting_ = src_[end - 1] == '\n';
          return absl::OkStatus();
        }
      }
      const size_t ws = SkipSpace(p);
      if (ws != p) {
        pos_ = ws;
        continue;
      }
      const char c = src_[p];
      if (IsDigit(c)) {
        if (absl::Status s = LexNumber(); !s.ok()) return s;
        continue;
      }
      if (IsNameStart(c)) {
        size_t q = p;
        while (q < src_.size() && IsNameChar(src_[q])) ++q;
        Emit(Tok::kName, p, src_.substr(p, q - p));
        pos_ = q;
        continue;
      }
      if (c == '\'' || c == '"') {
        size_t q = p + 1;
        while (q < src_.size() && src_[q] != c) {
          q += src_[q] == '\\' ? 2 : 1;
        }
        if (q < src_.size()) {
          absl::StatusOr<std::string> value =
              Unescape(std::string_view(src_).substr(p + 1, q - p - 1), p);
          if (!value.ok()) return value.status();
          Emit(Tok::kString, p, *std::move(value));
          pos_ = q + 1;
          continue;
        }
        // Unterminated: falls through to "unexpected char".
      }
      const Tok op = Operator(p);
      if (op == Tok::kEof) {
        size_t len = 0;
        std::string ch;
        AppendUtf8(At(p, &len), &ch);
        return Error(p, Cat("unexpected char '", ch, "'"));
      }
      if (op == Tok::kLBrace || op == Tok::kLParen || op == Tok::kLBracket) {
        balance.push_back(op == Tok::kLBrace   ? '}'
                          : op == Tok::kLParen ? ')'
                                               : ']');
      } else if (op == Tok::kRBrace || op == Tok::kRParen ||
                 op == Tok::kRBracket) {
        if (balance.empty()) {
          return Error(p, Cat("unexpected '", std::string(1, c), "'"));
        }
        if (balance.back() != c) {
          return Error(p,
                       Cat("unexpected '", std::string(1, c), "', expected '",
                           std::string(1, balance.back()), "'"));
        }
        balance.pop_back();
      }
      Emit(op, p, "");
      pos_ = p + OperatorLength(op);
    }
    return absl::OkStatus();  // end of template inside a tag: the parser says
  }

  static size_t OperatorLength(Tok op) {
    switch (op) {
      case Tok::kFloorDiv:
      case Tok::kPow:
      case Tok::kEq:
      case Tok::kNe:
      case Tok::kGe:
      case Tok::kLe:
        return 2;
      default:
        return 1;
    }
  }

  Tok Operator(size_t p) const {
    const char c = src_[p];
    const char d = p + 1 < src_.size() ? src_[p + 1] : '\0';
    if (c == '/' && d == '/') return Tok::kFloorDiv;
    if (c == '*' && d == '*') return Tok::kPow;
    if (c == '=' && d == '=') return Tok::kEq;
    if (c == '!' && d == '=') return Tok::kNe;
    if (c == '>' && d == '=') return Tok::kGe;
    if (c == '<' && d == '=') return Tok::kLe;
    switch (c) {
      case '+':
        return Tok::kAdd;
      case '-':
        return Tok::kSub;
      case '/':
        return Tok::kDiv;
      case '*':
        return Tok::kMul;
      case '%':
        return Tok::kMod;
      case '~':
        return Tok::kTilde;
      case '[':
        return Tok::kLBracket;
      case ']':
        return Tok::kRBracket;
      case '(':
        return Tok::kLParen;
      case ')':
        return Tok::kRParen;
      case '{':
        return Tok::kLBrace;
      case '}':
        return Tok::kRBrace;
      case '>':
        return Tok::kGt;
      case '<':
        return Tok::kLt;
      case '=':
        return Tok::kAssign;
      case '.':
        return Tok::kDot;
      case ':':
        return Tok::kColon;
      case '|':
        return Tok::kPipe;
      case ',':
        return Tok::kComma;
      case ';':
        return Tok::kSemicolon;
      default:
        return Tok::kEof;
    }
  }

  // (\d+_)*\d+ from p; npos when there is no digit at p.
  size_t Digits(size_t p, int (*digit)(char)) const {
    if (p >= src_.size() || digit(src_[p]) < 0) return std::string::npos;
    size_t q = p;
    while (q < src_.size()) {
      if (digit(src_[q]) >= 0) {
        ++q;
      } else if (src_[q] == '_' && q + 1 < src_.size() &&
                 digit(src_[q + 1]) >= 0) {
        ++q;
      } else {
        break;
      }
    }
    return q;
  }

  static int Dec(char c) { return IsDigit(c) ? c - '0' : -1; }
  static int Hex(char c) { return HexValue(c); }
  static int Oct(char c) { return c >= '0' && c <= '7' ? c - '0' : -1; }
  static int Bin(char c) { return c == '0' || c == '1' ? c - '0' : -1; }

  // Past an exponent e[+-]?digits at p, or npos.
  size_t Exponent(size_t p) const {
    if (p >= src_.size() || (src_[p] != 'e' && src_[p] != 'E')) {
      return std::string::npos;
    }
    ++p;
    if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
    return Digits(p, Dec);
  }

  absl::Status LexNumber() {
    const size_t p = pos_;
    auto clean = [&](size_t from, size_t to) {
      std::string s;
      for (size_t i = from; i < to; ++i) {
        if (src_[i] != '_') s += src_[i];
      }
      return s;
    };
    // Float (not right after a '.', as jinja's (?<!\.)).
    if (p == 0 || src_[p - 1] != '.') {
      const size_t int_end = Digits(p, Dec);
      size_t end = std::string::npos;
      if (int_end < src_.size() && src_[int_end] == '.') {
        const size_t frac_end = Digits(int_end + 1, Dec);
        if (frac_end != std::string::npos) {
          const size_t exp_end = Exponent(frac_end);
          end = exp_end != std::string::npos ? exp_end : frac_end;
        }
      }
      if (end == std::string::npos) end = Exponent(int_end);
      if (end != std::string::npos) {
        Token& t = Emit(Tok::kFloat, p, "");
        t.float_value = std::strtod(clean(p, end).c_str(), nullptr);
        pos_ = end;
        return absl::OkStatus();
      }
    }
    // Integer.
    int base = 10;
    size_t digits_from = p;
    size_t end = std::string::npos;
    const char x = p + 1 < src_.size() ? src_[p + 1] : '\0';
    if (src_[p] == '0' && (x == 'b' || x == 'B' || x == 'o' || x == 'O' ||
                           x == 'x' || x == 'X')) {
      base = (x == 'b' || x == 'B') ? 2 : (x == 'o' || x == 'O') ? 8 : 16;
      int (*digit)(char) = base == 2 ? Bin : base == 8 ? Oct : Hex;
      // (_?d)+ after the prefix.
      size_t q = p + 2;
      if (q < src_.size() && src_[q] == '_') ++q;
      const size_t e = Digits(q, digit);
      if (e != std::string::npos) {
        end = e;
        digits_from = p + 2;
      } else {
        base = 10;
      }
    }
    if (end == std::string::npos) {
      if (src_[p] == '0') {
        size_t q = p + 1;
        while (q < src_.size()) {
          if (src_[q] == '0') {
            ++q;
          } else if (src_[q] == '_' && q + 1 < src_.size() &&
                     src_[q + 1] == '0') {
            q += 2;
          } else {
            break;
          }
        }
        end = q;
      } else {
        end = Digits(p, Dec);
      }
    }
    const std::string digits = clean(digits_from, end);
    errno = 0;
    char* stop = nullptr;
    const unsigned long long u = std::strtoull(digits.c_str(), &stop, base);
    if (errno == ERANGE || u > static_cast<unsigned long long>(
                                   std::numeric_limits<int64_t>::max())) {
      return Error(p, "integer literal too large");
    }
    Token& t = Emit(Tok::kInt, p, "");
    t.int_value = static_cast<int64_t>(u);
    pos_ = end;
    return absl::OkStatus();
  }

  // Python's unicode_escape decoding of a string literal's body, as
  // jinja2 applies it (non-ASCII characters pass through unchanged, except
  // right after a backslash where Python leaves "\xe9" etc.).
  absl::StatusOr<std::string> Unescape(std::string_view s, size_t at) const {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\') {
        out += s[i];
        continue;
      }
      if (i + 1 >= s.size()) {
        out += '\\';
        break;
      }
      const char c = s[++i];
      switch (c) {
        case '\n':
          continue;
        case '\\':
        case '\'':
        case '"':
          out += c;
          continue;
        case 'a':
          out += '\a';
          continue;
        case 'b':
          out += '\b';
          continue;
        case 'f':
          out += '\f';
          continue;
        case 'n':
          out += '\n';
          continue;
        case 'r':
          out += '\r';
          continue;
        case 't':
          out += '\t';
          continue;
        case 'v':
          out += '\v';
          continue;
        default:
          break;
      }
      if (c >= '0' && c <= '7') {
        uint32_t v = 0;
        size_t k = 0;
        for (; k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7';
             ++k) {
          v = v * 8 + static_cast<uint32_t>(s[i + k] - '0');
        }
        i += k - 1;
        AppendUtf8(v, &out);
        continue;
      }
      if (c == 'x' || c == 'u' || c == 'U') {
        const size_t n = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        uint32_t v = 0;
        for (size_t k = 1; k <= n; ++k) {
          if (i + k >= s.size() || HexValue(s[i + k]) < 0) {
            return Error(at, Cat("truncated \\", std::string(1, c),
                                 std::string(n, 'X'), " escape"));
          }
          v = v * 16 + static_cast<uint32_t>(HexValue(s[i + k]));
        }
        if (v > 0x10ffff) return Error(at, "illegal Unicode character");
        i += n;
        AppendUtf8(v, &out);
        continue;
      }
      if (c == 'N') return Error(at, "\\N{...} escapes are not supported");
      if (static_cast<unsigned char>(c) >= 0x80) {
        size_t len = 0;
        const std::u32string one =
            Decode(s.substr(i, std::min<size_t>(4, s.size() - i)));
        const char32_t cp = one[0];
        std::string tmp;
        AppendUtf8(cp, &tmp);
        len = tmp.size();
        if (cp <= 0xff) {
          absl::StrAppendFormat(&out, "\\x%02x", static_cast<uint32_t>(cp));
        } else if (cp <= 0xffff) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<uint32_t>(cp));
        } else {
          absl::StrAppendFormat(&out, "\\U%08x", static_cast<uint32_t>(cp));
        }
        i += len - 1;
        continue;
      }
      out += '\\';
      out += c;
    }
    return out;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> out_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  return Lexer(source).Run();
}

std::string_view DescribeTok(Tok type) {
  switch (type) {
    case Tok::kEof:
      return "end of template";
    case Tok::kData:
      return "template data / text";
    case Tok::kVarBegin:
      return "begin of print statement";
    case Tok::kVarEnd:
      return "end of print statement";
    case Tok::kBlockBegin:
      return "begin of statement block";
    case Tok::kBlockEnd:
      return "end of statement block";
    case Tok::kName:
      return "name";
    case Tok::kString:
      return "string";
    case Tok::kInt:
      return "integer";
    case Tok::kFloat:
      return "float";
    case Tok::kAdd:
      return "+";
    case Tok::kSub:
      return "-";
    case Tok::kDiv:
      return "/";
    case Tok::kFloorDiv:
      return "//";
    case Tok::kMul:
      return "*";
    case Tok::kMod:
      return "%";
    case Tok::kPow:
      return "**";
    case Tok::kTilde:
      return "~";
    case Tok::kLBracket:
      return "[";
    case Tok::kRBracket:
      return "]";
    case Tok::kLParen:
      return "(";
    case Tok::kRParen:
      return ")";
    case Tok::kLBrace:
      return "{";
    case Tok::kRBrace:
      return "}";
    case Tok::kEq:
      return "==";
    case Tok::kNe:
      return "!=";
    case Tok::kGt:
      return ">";
    case Tok::kGe:
      return ">=";
    case Tok::kLt:
      return "<";
    case Tok::kLe:
      return "<=";
    case Tok::kAssign:
      return "=";
    case Tok::kDot:
      return ".";
    case Tok::kColon:
      return ":";
    case Tok::kPipe:
      return "|";
    case Tok::kComma:
      return ",";
    case Tok::kSemicolon:
      return ";";
  }
  return "token";
}

std::string DescribeToken(const Token& token) {
  if (token.type == Tok::kName) return token.text;
  return std::string(DescribeTok(token.type));
}

}  // namespace kvserve::jinja
