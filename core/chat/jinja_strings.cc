#include "core/chat/jinja_strings.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/chat/jinja_value.h"

namespace kvserve::jinja {
namespace {

std::string AsciiUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return out;
}

std::string AsciiLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return out;
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c ||
         c == 0x1d || c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
}

bool IsWordChar(char32_t c) {
  if (c < 0x80) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
  }
  if (IsSpace(c) || !IsPrintable(c)) return false;
  // Punctuation and symbol blocks (approximate).
  if ((c >= 0xa1 && c <= 0xbf && c != 0xaa && c != 0xb5 && c != 0xba) ||
      c == 0xd7 || c == 0xf7 || (c >= 0x2000 && c <= 0x2bff) ||
      (c >= 0x3000 && c <= 0x303f) || (c >= 0xff00 && c <= 0xff0f) ||
      (c >= 0xff1a && c <= 0xff20) || (c >= 0xff3b && c <= 0xff40) ||
      (c >= 0xff5b && c <= 0xff65) || (c >= 0x1f000 && c <= 0x1faff)) {
    return false;
  }
  return true;
}

// Clamps Python slice-style bounds to [0, n].
void AdjustBounds(int64_t n, int64_t* start, int64_t* end) {
  if (*end > n) *end = n;
  if (*end < 0) *end = std::max<int64_t>(*end + n, 0);
  if (*start < 0) *start = std::max<int64_t>(*start + n, 0);
}

std::string Map(std::string_view s, char32_t (*f)(char32_t)) {
  std::u32string cps = Decode(s);
  std::string out;
  out.reserve(s.size());
  for (char32_t c : cps) {
    if (f == ToUpper && c == 0xdf) {  // ß -> SS
      out += "SS";
      continue;
    }
    AppendUtf8(f(c), &out);
  }
  return out;
}

}  // namespace

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars,
                    bool left, bool right) {
  const std::u32string cps = Decode(s);
  const std::u32string set = chars.has_value() ? Decode(*chars) : U"";
  auto strip = [&](char32_t c) {
    return chars.has_value() ? set.find(c) != std::u32string::npos : IsSpace(c);
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip(cps[e - 1])) --e;
  }
  return Encode(std::u32string_view(cps).substr(b, e - b));
}

std::vector<std::string> PySplit(std::string_view s,
                                 const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right) {
  std::vector<std::string> out;
  if (maxsplit < 0) maxsplit = std::numeric_limits<int64_t>::max();
  if (!sep.has_value()) {
    const std::u32string cps = Decode(s);
    const size_t n = cps.size();
    std::vector<std::u32string_view> parts;
    const std::u32string_view v(cps);
    if (!from_right) {
      size_t i = 0;
      while (maxsplit-- > 0) {
        while (i < n && IsSpace(cps[i])) ++i;
        if (i == n) break;
        const size_t j = i;
        while (i < n && !IsSpace(cps[i])) ++i;
        parts.push_back(v.substr(j, i - j));
      }
      if (i < n) {
        while (i < n && IsSpace(cps[i])) ++i;
        if (i != n) parts.push_back(v.substr(i));
      }
    } else {
      size_t i = n;
      while (maxsplit-- > 0) {
        while (i > 0 && IsSpace(cps[i - 1])) --i;
        if (i == 0) break;
        const size_t j = i;
        while (i > 0 && !IsSpace(cps[i - 1])) --i;
        parts.push_back(v.substr(i, j - i));
      }
      if (i > 0) {
        while (i > 0 && IsSpace(cps[i - 1])) --i;
        if (i != 0) parts.push_back(v.substr(0, i));
      }
      std::reverse(parts.begin(), parts.end());
    }
    for (std::u32string_view p : parts) out.push_back(Encode(p));
    return out;
  }
  const std::string& d = *sep;
  if (!from_right) {
    size_t i = 0;
    while (maxsplit-- > 0) {
      const size_t j = s.find(d, i);
      if (j == std::string_view::npos) break;
      out.emplace_back(s.substr(i, j - i));
      i = j + d.size();
    }
    out.emplace_back(s.substr(i));
    return out;
  }
  size_t end = s.size();
  while (maxsplit-- > 0 && end >= d.size()) {
    const size_t j = s.rfind(d, end - d.size());
    if (j == std::string_view::npos) break;
    out.emplace_back(s.substr(j + d.size(), end - j - d.size()));
    end = j;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s, bool keepends) {
  const std::u32string cps = Decode(s);
  const std::u32string_view v(cps);
  std::vector<std::string> out;
  size_t i = 0;
  const size_t n = cps.size();
  while (i < n) {
    size_t j = i;
    while (j < n && !IsLineBreak(cps[j])) ++j;
    size_t eol = j;
    if (j < n) {
      if (cps[j] == '\r' && j + 1 < n && cps[j + 1] == '\n') {
        j += 2;
      } else {
        ++j;
      }
      if (keepends) eol = j;
    }
    out.push_back(Encode(v.substr(i, eol - i)));
    i = j;
  }
  return out;
}

std::optional<std::string> PyReplace(std::string_view s, std::string_view old,
                                     std::string_view replacement,
                                     int64_t count, size_t max_bytes) {
  if (count < 0) count = std::numeric_limits<int64_t>::max();
  std::string out;
  if (old.empty()) {
    const std::u32string cps = Decode(s);
    const int64_t n =
        std::min<int64_t>(count, static_cast<int64_t>(cps.size()) + 1);
    const size_t size = s.size() + static_cast<size_t>(n) * replacement.size();
    if (size > max_bytes) return std::nullopt;
    out.reserve(size);
    int64_t done = 0;
    for (char32_t c : cps) {
      if (done < count) {
        out += replacement;
        ++done;
      }
      AppendUtf8(c, &out);
    }
    if (done < count) out += replacement;
    return out;
  }
  int64_t matches = 0;
  for (size_t p = s.find(old); p != std::string_view::npos && matches < count;
       p = s.find(old, p + old.size())) {
    ++matches;
  }
  const double size =
      static_cast<double>(s.size()) +
      static_cast<double>(matches) * (static_cast<double>(replacement.size()) -
                                      static_cast<double>(old.size()));
  if (size > static_cast<double>(max_bytes)) return std::nullopt;
  out.reserve(static_cast<size_t>(size));
  size_t i = 0;
  for (int64_t k = 0; k < matches; ++k) {
    const size_t p = s.find(old, i);
    out.append(s.substr(i, p - i));
    out.append(replacement);
    i = p + old.size();
  }
  out.append(s.substr(i));
  return out;
}

std::string PyUpper(std::string_view s) {
  if (IsAscii(s)) return AsciiUpper(s);
  return Map(s, ToUpper);
}

std::string PyLower(std::string_view s) {
  if (IsAscii(s)) return AsciiLower(s);
  return Map(s, ToLower);
}

// Title case of one character (ß has no one-character upper case).
void AppendTitle(char32_t c, std::string* out) {
  if (c == 0xdf) {
    *out += "Ss";
  } else {
    AppendUtf8(ToUpper(c), out);
  }
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : Decode(s)) {
    if (previous_cased) {
      AppendUtf8(ToLower(c), &out);
    } else {
      AppendTitle(c, &out);
    }
    previous_cased = IsCased(c);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t c : Decode(s)) {
    if (first) {
      AppendTitle(c, &out);
    } else {
      AppendUtf8(ToLower(c), &out);
    }
    first = false;
  }
  return out;
}

std::string PySwapCase(std::string_view s) {
  std::string out;
  for (char32_t c : Decode(s)) {
    if (c == 0xdf) {
      out += "SS";
      continue;
    }
    const char32_t u = ToUpper(c);
    AppendUtf8(u != c ? u : ToLower(c), &out);
  }
  return out;
}

std::string JinjaTitle(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (char32_t c : Decode(s)) {
    const bool sep =
        c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsSpace(c);
    if (sep) {
      AppendUtf8(c, &out);
      word_start = true;
    } else {
      if (word_start && c == 0xdf) {
        out += "SS";  // str.upper
      } else {
        AppendUtf8(word_start ? ToUpper(c) : ToLower(c), &out);
      }
      word_start = false;
    }
  }
  return out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

int64_t PyFind(std::string_view s, std::string_view sub, int64_t start,
               int64_t end, bool from_right) {
  const std::u32string cps = Decode(s);
  const std::u32string needle = Decode(sub);
  const auto n = static_cast<int64_t>(cps.size());
  AdjustBounds(n, &start, &end);
  if (end - start < static_cast<int64_t>(needle.size())) return -1;
  const std::u32string_view hay = std::u32string_view(cps).substr(
      static_cast<size_t>(start), static_cast<size_t>(end - start));
  const size_t p = from_right ? hay.rfind(needle) : hay.find(needle);
  return p == std::u32string_view::npos ? -1 : start + static_cast<int64_t>(p);
}

int64_t PyCount(std::string_view s, std::string_view sub, int64_t start,
                int64_t end) {
  const std::u32string cps = Decode(s);
  const std::u32string needle = Decode(sub);
  const auto n = static_cast<int64_t>(cps.size());
  AdjustBounds(n, &start, &end);
  if (end - start < static_cast<int64_t>(needle.size())) return 0;
  const std::u32string_view hay = std::u32string_view(cps).substr(
      static_cast<size_t>(start), static_cast<size_t>(end - start));
  if (needle.empty()) return static_cast<int64_t>(hay.size()) + 1;
  int64_t count = 0;
  for (size_t p = hay.find(needle); p != std::u32string_view::npos;
       p = hay.find(needle, p + needle.size())) {
    ++count;
  }
  return count;
}

std::optional<int64_t> PyParseInt(std::string_view s, int base) {
  std::string t = PyStrip(s, std::nullopt, true, true);
  std::string_view v(t);
  bool negative = false;
  if (!v.empty() && (v[0] == '+' || v[0] == '-')) {
    negative = v[0] == '-';
    v.remove_prefix(1);
  }
  auto has_prefix = [&](char a) {
    return v.size() >= 2 && v[0] == '0' && (v[1] == a || v[1] == a - 32);
  };
  if (base == 0) {
    if (has_prefix('x')) {
      base = 16;
    } else if (has_prefix('o')) {
      base = 8;
    } else if (has_prefix('b')) {
      base = 2;
    } else {
      base = 10;
      // Python refuses "010" in base 0.
      if (v.size() > 1 && v[0] == '0' &&
          v.find_first_not_of("0_") != std::string_view::npos) {
        return std::nullopt;
      }
    }
    if (base != 10) {
      v.remove_prefix(2);
      if (!v.empty() && v[0] == '_') v.remove_prefix(1);
    }
  } else if ((base == 16 && has_prefix('x')) ||
             (base == 8 && has_prefix('o')) || (base == 2 && has_prefix('b'))) {
    v.remove_prefix(2);
    if (!v.empty() && v[0] == '_') v.remove_prefix(1);
  }
  if (base < 2 || base > 36 || v.empty()) return std::nullopt;
  uint64_t acc = 0;
  bool prev_digit = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (c == '_') {
      if (!prev_digit || i + 1 == v.size()) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d < 0 || d >= base) return std::nullopt;
    if (acc >
        (std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(d)) /
            static_cast<uint64_t>(base)) {
      return std::nullopt;
    }
    acc = acc * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
    prev_digit = true;
  }
  const uint64_t limit =
      static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (acc > limit + (negative ? 1 : 0)) return std::nullopt;
  if (negative)
    return acc == limit + 1 ? std::numeric_limits<int64_t>::min()
                            : -static_cast<int64_t>(acc);
  return static_cast<int64_t>(acc);
}

std::optional<double> PyParseFloat(std::string_view s) {
  std::string t = PyStrip(s, std::nullopt, true, true);
  std::string_view v(t);
  std::string clean;
  size_t i = 0;
  if (i < v.size() && (v[i] == '+' || v[i] == '-')) clean += v[i++];
  const std::string rest = AsciiLower(v.substr(i));
  if (rest == "inf" || rest == "infinity" || rest == "nan") {
    clean += rest;
    return std::strtod(clean.c_str(), nullptr);
  }
  // digits [. digits] [e [+-] digits], '_' only between digits.
  bool digits = false, dot = false, exp = false;
  for (; i < v.size(); ++i) {
    const char c = v[i];
    if (c >= '0' && c <= '9') {
      clean += c;
      digits = true;
    } else if (c == '_') {
      if (i == 0 || i + 1 >= v.size() ||
          !(v[i - 1] >= '0' && v[i - 1] <= '9') ||
          !(v[i + 1] >= '0' && v[i + 1] <= '9')) {
        return std::nullopt;
      }
    } else if (c == '.' && !dot && !exp) {
      clean += c;
      dot = true;
    } else if ((c == 'e' || c == 'E') && digits && !exp) {
      clean += c;
      exp = true;
      digits = false;
      if (i + 1 < v.size() && (v[i + 1] == '+' || v[i + 1] == '-')) {
        clean += v[++i];
      }
    } else {
      return std::nullopt;
    }
  }
  if (!digits) return std::nullopt;
  return std::strtod(clean.c_str(), nullptr);
}

bool PyIsLower(std::string_view s) {
  bool cased = false;
  for (char32_t c : Decode(s)) {
    if (ToLower(c) != c) return false;
    if (IsCased(c)) cased = true;
  }
  return cased;
}

bool PyIsUpper(std::string_view s) {
  bool cased = false;
  for (char32_t c : Decode(s)) {
    if (ToUpper(c) != c && c != 0xdf) return false;
    if (c == 0xdf) return false;
    if (IsCased(c)) cased = true;
  }
  return cased;
}

int64_t WordCount(std::string_view s) {
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : Decode(s)) {
    const bool w = IsWordChar(c);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return n;
}

}  // namespace kvserve::jinja
