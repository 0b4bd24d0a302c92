#include "core/constrain/gbnf_builder.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvserve::constrain {

void CodePointSet::Add(uint32_t lo, uint32_t hi) {
  hi = std::min(hi, kMax);
  if (lo > hi) return;
  std::vector<std::pair<uint32_t, uint32_t>> out;
  bool placed = false;
  for (auto [a, b] : ranges_) {
    if (b + 1 < lo) {
      out.emplace_back(a, b);
    } else if (hi + 1 < a) {
      if (!placed) out.emplace_back(lo, hi);
      placed = true;
      out.emplace_back(a, b);
    } else {
      lo = std::min(lo, a);
      hi = std::max(hi, b);
    }
  }
  if (!placed) out.emplace_back(lo, hi);
  std::sort(out.begin(), out.end());
  ranges_ = std::move(out);
}

CodePointSet CodePointSet::Complement() const {
  CodePointSet out;
  uint32_t next = 0;
  for (auto [lo, hi] : ranges_) {
    if (lo > next) out.ranges_.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMax) out.ranges_.emplace_back(next, kMax);
  return out;
}

CodePointSet CodePointSet::Intersect(const CodePointSet& other) const {
  CodePointSet out;
  for (auto [a, b] : ranges_) {
    for (auto [c, d] : other.ranges_) {
      const uint32_t lo = std::max(a, c), hi = std::min(b, d);
      if (lo <= hi) out.Add(lo, hi);
    }
  }
  return out;
}

bool CodePointSet::Contains(uint32_t cp) const {
  for (auto [lo, hi] : ranges_) {
    if (cp >= lo && cp <= hi) return true;
  }
  return false;
}

namespace {

// A code point as GBNF writes it inside a literal or class.
std::string Escaped(uint32_t cp) {
  if (cp >= 0x20 && cp < 0x7F && cp != '"' && cp != '\\' && cp != '[' &&
      cp != ']' && cp != '-' && cp != '^') {
    return std::string(1, static_cast<char>(cp));
  }
  if (cp <= 0xFF) return absl::StrFormat("\\x%02X", cp);
  if (cp <= 0xFFFF) return absl::StrFormat("\\u%04X", cp);
  return absl::StrFormat("\\U%08X", cp);
}

}  // namespace

std::optional<uint32_t> ParseHexDigits(std::string_view text, size_t& pos,
                                       int digits) {
  uint32_t v = 0;
  for (int i = 0; i < digits; ++i, ++pos) {
    const char c = pos < text.size() ? text[pos] : '\0';
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      d = c - 'A' + 10;
    } else {
      return std::nullopt;
    }
    v = v * 16 + d;
  }
  return v;
}

std::string GbnfLiteral(std::string_view bytes) {
  std::string out = "\"";
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (b < 0x80) {
      out += Escaped(b);
      continue;
    }
    // A UTF-8 sequence passes through as is (ParseGbnf decodes it); a
    // stray byte cannot be written, as GBNF's terminals are code points.
    out.push_back(static_cast<char>(b));
  }
  return out + "\"";
}

std::string GbnfClass(const CodePointSet& set) {
  std::string out = "[";
  for (auto [lo, hi] : set.ranges()) {
    out += Escaped(lo);
    if (hi != lo) absl::StrAppend(&out, "-", Escaped(hi));
  }
  return out + "]";
}

std::string GbnfBuilder::Reserve(std::string_view base) {
  std::string clean = prefix_;
  for (char c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '-';
    clean.push_back(ok ? c : '-');
    if (clean.size() >= prefix_.size() + 40) break;
  }
  if (clean.size() == prefix_.size()) clean.push_back('r');
  std::string name = clean;
  for (int i = 2; !names_.insert(name).second; ++i) {
    name = absl::StrCat(clean, "-", i);
  }
  return name;
}

void GbnfBuilder::Define(const std::string& name, std::string body) {
  bytes_ += name.size() + body.size() + 6;
  rules_.emplace_back(name, std::move(body));
}

std::string GbnfBuilder::Text(std::string_view tail) const {
  std::string out;
  for (const auto& [name, body] : rules_) {
    absl::StrAppend(&out, name, " ::= ", body, "\n");
  }
  out.append(tail);
  return out;
}

}  // namespace kvserve::constrain
