#include "core/constrain/regex_gbnf.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/tokenizer/unicode.h"
#include "core/util/quote.h"

namespace kvserve::constrain {
namespace {

CodePointSet Digits() { return CodePointSet::Range('0', '9'); }
CodePointSet Word() {
  CodePointSet s = CodePointSet::Range('a', 'z');
  s.Add('A', 'Z');
  s.Add('0', '9');
  s.Add('_', '_');
  return s;
}
CodePointSet Space() {
  CodePointSet s = CodePointSet::Range('\t', '\r');
  for (uint32_t cp : {0x20u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu,
                      0x3000u, 0xFEFFu}) {
    s.Add(cp, cp);
  }
  s.Add(0x2000, 0x200A);
  return s;
}
CodePointSet AnyButLineEnds() {
  CodePointSet s;
  for (uint32_t cp : {0x0Au, 0x0Du, 0x2028u, 0x2029u}) s.Add(cp, cp);
  return s.Complement();
}

// A parsed piece of a pattern as GBNF: `expr`, whether it may match the
// empty string, and `non_empty`, the same language without it. A
// repetition of something that may be empty repeats its non-empty form
// (the same language), so that the grammar is never left-recursive.
//
// Lengths are counted in characters (code points, as minLength counts
// them); max_len -1: unbounded. A repetition keeps its atom and counts,
// so that length bounds can re-count it.
struct Expr {
  std::string expr;
  bool nullable = false;
  std::string non_empty;  // when nullable
  int64_t min_len = 0;
  int64_t max_len = 0;
  std::shared_ptr<const Expr> atom{};  // a repetition of it, when set
  int64_t rep_min = 0, rep_max = 0;    // its counts (max -1: unbounded)
  // A group (not repeated): its alternatives' items, so that length bounds
  // can narrow each alternative on its own.
  std::shared_ptr<const std::vector<std::vector<Expr>>> branches{};
};

// One character of the set `e` matches.
Expr Plain(std::string e) { return Expr{e, false, e, 1, 1, nullptr, 0, 0}; }

// Lengths saturate here (nested quantifiers multiply).
constexpr int64_t kMaxLen = int64_t{1} << 40;
int64_t AddLen(int64_t a, int64_t b) {
  return a < 0 || b < 0 ? -1 : std::min(a + b, kMaxLen);
}
int64_t MulLen(int64_t a, int64_t b) {
  return a == 0 || b == 0 ? 0
         : a < 0 || b < 0
             ? -1
             : std::min(kMaxLen, a > kMaxLen / b ? kMaxLen : a * b);
}

std::string Group(const std::vector<std::string>& alternatives) {
  if (alternatives.size() == 1) return alternatives[0];
  return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
}

Expr Sequence(const std::vector<Expr>& items) {
  if (items.empty()) return Expr{"\"\"", true, ""};
  std::vector<std::string> exprs;
  bool nullable = true;
  int64_t min_len = 0, max_len = 0;
  for (const Expr& e : items) {
    exprs.push_back(e.expr);
    nullable = nullable && e.nullable;
    min_len = AddLen(min_len, e.min_len);
    max_len = AddLen(max_len, e.max_len);
  }
  Expr out{absl::StrJoin(exprs, " "), nullable, ""};
  out.min_len = min_len;
  out.max_len = max_len;
  if (!nullable) {
    out.non_empty = out.expr;
    return out;
  }
  // All may be empty: the first non-empty one, then the rest as they are.
  std::vector<std::string> alternatives;
  for (size_t k = 0; k < items.size(); ++k) {
    if (items[k].non_empty.empty()) continue;
    std::vector<std::string> parts = {items[k].non_empty};
    for (size_t j = k + 1; j < items.size(); ++j)
      parts.push_back(items[j].expr);
    alternatives.push_back(absl::StrJoin(parts, " "));
  }
  out.non_empty = alternatives.empty() ? "" : Group(alternatives);
  return out;
}

Expr Alternatives(const std::vector<Expr>& alts) {
  std::vector<std::string> exprs, non_empty;
  bool nullable = false;
  int64_t min_len = alts[0].min_len, max_len = alts[0].max_len;
  for (const Expr& e : alts) {
    exprs.push_back(e.expr);
    nullable = nullable || e.nullable;
    if (!e.non_empty.empty()) non_empty.push_back(e.non_empty);
    min_len = std::min(min_len, e.min_len);
    max_len = max_len < 0 || e.max_len < 0 ? -1 : std::max(max_len, e.max_len);
  }
  Expr out{absl::StrCat("( ", absl::StrJoin(exprs, " | "), " )"), nullable,
           non_empty.empty() ? "" : Group(non_empty)};
  out.min_len = min_len;
  out.max_len = max_len;
  return out;
}

Expr RepeatExpr(const Expr& x, int64_t min, int64_t max);

// x{min,max} (max -1: unbounded), with its length range.
Expr Repeat(const Expr& x, int64_t min, int64_t max) {
  Expr out = RepeatExpr(x, min, max);
  out.min_len = MulLen(x.min_len, min);
  out.max_len = MulLen(x.max_len, max);
  out.atom = std::make_shared<const Expr>(x);
  out.rep_min = min;
  out.rep_max = max;
  if (min == 0 && max == 1) {
    // x? is ( | x ): alternatives length bounds may split.
    auto branches = std::make_shared<std::vector<std::vector<Expr>>>();
    branches->emplace_back();
    if (x.branches != nullptr) {
      branches->insert(branches->end(), x.branches->begin(), x.branches->end());
    } else {
      branches->push_back({x});
    }
    out.branches = std::move(branches);
  }
  return out;
}

Expr RepeatExpr(const Expr& x, int64_t min, int64_t max) {
  auto count = [](int64_t lo, int64_t hi) {
    return hi < 0 ? absl::StrCat("{", lo, ",}")
                  : absl::StrCat("{", lo, ",", hi, "}");
  };
  if (x.nullable) {
    // Empty iterations add nothing: 0 to max non-empty ones.
    if (x.non_empty.empty() || max == 0) return Expr{"\"\"", true, ""};
    const std::string ne = absl::StrCat("( ", x.non_empty, " )");
    return Expr{ne + count(0, max), true,
                absl::StrCat(ne, " ", ne, count(0, max < 0 ? -1 : max - 1))};
  }
  const std::string e = absl::StrCat("( ", x.expr, " )");
  if (max == 0) return Expr{"\"\"", true, ""};
  Expr out{e + count(min, max), min == 0, ""};
  out.non_empty =
      min == 0 ? absl::StrCat(e, " ", e, count(0, max < 0 ? -1 : max - 1))
               : out.expr;
  return out;
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view pattern) : p_(pattern) {}

  absl::StatusOr<std::string> Parse(int64_t min_length, int64_t max_length) {
    const bool bounded = min_length > 0 || max_length >= 0;
    std::vector<std::string> alternatives;
    while (true) {
      const bool start_anchor = Peek() == '^';
      if (start_anchor) ++pos_;
      absl::StatusOr<std::vector<Expr>> items = ParseItems(/*top=*/true);
      if (!items.ok()) return items.status();
      bool end_anchor = false;
      if (Peek() == '$') {
        ++pos_;
        end_anchor = true;
      }
      if (bounded) {
        int budget = kMaxLengthBranches;
        std::optional<std::string> alt =
            WithLength(*std::move(items), start_anchor, end_anchor, min_length,
                       max_length < 0 ? kMaxLen : max_length, budget);
        if (alt.has_value()) alternatives.push_back(*std::move(alt));
      } else {
        std::string alt = Sequence(*items).expr;
        if (!start_anchor) alt = absl::StrCat("json-char* ", alt);
        if (!end_anchor) absl::StrAppend(&alt, " json-char*");
        alternatives.push_back(alt);
      }
      if (AtEnd()) break;
      if (Peek() != '|') return Error("unexpected `)`");
      ++pos_;
    }
    if (alternatives.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the pattern %s cannot be written within the length bounds "
          "[%d, %s] by a grammar",
          QuoteClientText(p_), min_length,
          max_length < 0 ? std::string("unbounded")
                         : std::to_string(max_length)));
    }
    return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
  }

 private:
  // A top-level alternative whose every string has between min and max
  // characters: the sentence of `items` (a match, the string's whole value
  // when the pattern is not anchored: a narrowing, as any string that is
  // a match contains one), its repetitions of fixed-length atoms
  // re-counted so that the shortest and longest sentences fall within the
  // bounds; unanchored, a tail of any characters may take up what the
  // bounds require. nullopt when no such narrowing exists (an item of
  // unbounded length that is not such a repetition, or bounds no count
  // meets).
  //
  // Where that fails, a group (or an optional item: `x?` is `( | x )`) is
  // split, the first of unbounded length or else the first: each of its
  // alternatives in its place is narrowed alone (`^(\d+\.\d+.*)$`,
  // `^(a|b[a-z]*c)?$`), up to `budget` sequences in all. Last, every
  // repetition of a variable-length atom is kept to its fewest.
  static constexpr int kMaxLengthBranches = 64;
  static std::optional<std::string> WithLength(std::vector<Expr> items,
                                               bool start_anchor,
                                               bool end_anchor, int64_t min,
                                               int64_t max, int& budget) {
    if (std::optional<std::string> whole = WithLengthAsIs(
            items, start_anchor, end_anchor, min, max, /*fewest=*/false)) {
      return whole;
    }
    size_t at = items.size();
    for (size_t i = 0; i < items.size(); ++i) {
      if (items[i].branches == nullptr) continue;
      if (at == items.size()) at = i;
      if (items[i].max_len < 0) {
        at = i;
        break;
      }
    }
    if (at < items.size()) {
      std::vector<std::string> out;
      for (const std::vector<Expr>& branch : *items[at].branches) {
        if (--budget < 0) break;  // what was found so far
        std::vector<Expr> split(items.begin(), items.begin() + at);
        split.insert(split.end(), branch.begin(), branch.end());
        split.insert(split.end(), items.begin() + at + 1, items.end());
        if (std::optional<std::string> alt = WithLength(
                std::move(split), start_anchor, end_anchor, min, max, budget)) {
          out.push_back(*std::move(alt));
        }
      }
      if (!out.empty()) {
        return absl::StrCat("( ", absl::StrJoin(out, " | "), " )");
      }
    }
    return WithLengthAsIs(items, start_anchor, end_anchor, min, max,
                          /*fewest=*/true);
  }

  // `fewest`: every repetition of a variable-length atom is kept to its
  // fewest (`(\.[0-9]{1,6})?`, `(\s+\S+)*` to none).
  static std::optional<std::string> WithLengthAsIs(std::vector<Expr> items,
                                                   bool start_anchor,
                                                   bool end_anchor, int64_t min,
                                                   int64_t max, bool fewest) {
    // Where the pattern is free, any characters (a match is at the start
    // unless only its end is anchored).
    if (!end_anchor) {
      items.push_back(Repeat(Plain("json-char"), 0, -1));
    } else if (!start_anchor) {
      items.insert(items.begin(), Repeat(Plain("json-char"), 0, -1));
    }
    // Rigid items count their length range; repetitions of fixed-length
    // atoms are re-counted.
    int64_t rigid_min = 0, rigid_max = 0;
    std::vector<size_t> reps;
    for (size_t i = 0; i < items.size(); ++i) {
      const Expr* atom = items[i].atom.get();
      if (atom != nullptr && items[i].min_len != items[i].max_len &&
          atom->min_len == atom->max_len && atom->min_len > 0) {
        reps.push_back(i);
        continue;
      }
      if (fewest && atom != nullptr &&
          (atom->max_len >= 0 || items[i].rep_min == 0)) {
        items[i] = Repeat(Expr(*atom), items[i].rep_min, items[i].rep_min);
      }
      if (items[i].max_len < 0) return std::nullopt;
      rigid_min = AddLen(rigid_min, items[i].min_len);
      rigid_max = AddLen(rigid_max, items[i].max_len);
    }
    std::vector<int64_t> lo(reps.size()), hi(reps.size());
    int64_t sum_min = rigid_min;
    for (size_t k = 0; k < reps.size(); ++k) {
      lo[k] = items[reps[k]].rep_min;
      sum_min = AddLen(sum_min, MulLen(items[reps[k]].atom->min_len, lo[k]));
    }
    // Raise the first counts that may grow until the shortest is long
    // enough.
    for (size_t k = 0; k < reps.size() && sum_min < min; ++k) {
      const Expr& r = items[reps[k]];
      const int64_t unit = r.atom->min_len;
      int64_t add = (min - sum_min + unit - 1) / unit;
      if (r.rep_max >= 0) add = std::min(add, r.rep_max - lo[k]);
      lo[k] += add;
      sum_min += add * unit;
    }
    if (sum_min < min || sum_min + (rigid_max - rigid_min) > max) {
      return std::nullopt;
    }
    // The room left, shared among the repetitions (with no maximum, they
    // keep theirs).
    int64_t room = max - sum_min - (rigid_max - rigid_min);
    for (size_t k = 0; k < reps.size(); ++k) {
      const Expr& r = items[reps[k]];
      if (max >= kMaxLen) {
        hi[k] = r.rep_max;
        continue;
      }
      const int64_t share = room / static_cast<int64_t>(reps.size() - k);
      int64_t more = share / r.atom->min_len;
      if (r.rep_max >= 0) more = std::min(more, r.rep_max - lo[k]);
      hi[k] = lo[k] + more;
      room -= more * r.atom->min_len;
    }
    for (size_t k = 0; k < reps.size(); ++k) {
      items[reps[k]] = Repeat(*items[reps[k]].atom, lo[k], hi[k]);
    }
    return Sequence(items).expr;
  }

  bool AtEnd() const { return pos_ >= p_.size(); }
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < p_.size() ? p_[pos_ + ahead] : '\0';
  }
  absl::Status Error(std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrFormat("the pattern %s at character %d: %s",
                        QuoteClientText(p_), pos_ + 1, what));
  }

  absl::StatusOr<uint32_t> DecodeUtf8() {
    const Utf8Char c = DecodeUtf8At(p_, pos_);
    if (!c.valid) return Error("invalid UTF-8");
    pos_ += c.len;
    return c.cp;
  }

  absl::StatusOr<uint32_t> Hex(int digits) {
    std::optional<uint32_t> v = ParseHexDigits(p_, pos_, digits);
    if (!v.has_value()) {
      return Error(absl::StrFormat("expected %d hex digits", digits));
    }
    return *v;
  }

  // After a backslash: the set it stands for (one code point, or a class
  // escape). `in_class`: \b is a backspace there.
  absl::StatusOr<CodePointSet> Escape(bool in_class) {
    if (AtEnd()) return Error("a pattern cannot end with a backslash");
    const char c = p_[pos_++];
    auto one = [](uint32_t cp) { return CodePointSet::Range(cp, cp); };
    switch (c) {
      case 'd':
        return Digits();
      case 'D':
        return Digits().Complement();
      case 'w':
        return Word();
      case 'W':
        return Word().Complement();
      case 's':
        return Space();
      case 'S':
        return Space().Complement();
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        return one(0);
      case 'b':
        if (in_class) return one('\b');
        return Error("word boundaries (\\b) are not supported");
      case 'B':
        return Error("word boundaries (\\B) are not supported");
      case 'p':
      case 'P':
        return Error("Unicode property classes (\\p{...}) are not supported");
      case 'k':
        return Error("backreferences are not supported");
      case 'c': {
        const char l = Peek();
        if ((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z')) {
          ++pos_;
          return one(static_cast<uint32_t>(l) % 32);
        }
        return one('c');
      }
      case 'x': {
        absl::StatusOr<uint32_t> v = Hex(2);
        if (!v.ok()) return v.status();
        return one(*v);
      }
      case 'u': {
        if (Peek() == '{') {
          ++pos_;
          uint32_t v = 0;
          int digits = 0;
          while (Peek() != '}') {
            absl::StatusOr<uint32_t> d = Hex(1);
            if (!d.ok()) return d.status();
            v = v * 16 + *d;
            if (++digits > 6 || v > CodePointSet::kMax) {
              return Error("\\u{...} beyond U+10FFFF");
            }
          }
          ++pos_;
          return one(v);
        }
        absl::StatusOr<uint32_t> v = Hex(4);
        if (!v.ok()) return v.status();
        return one(*v);
      }
      default:
        if (c >= '1' && c <= '9') {
          return Error("backreferences are not supported");
        }
        --pos_;
        absl::StatusOr<uint32_t> cp = DecodeUtf8();
        if (!cp.ok()) return cp.status();
        return one(*cp);
    }
  }

  absl::StatusOr<CodePointSet> Class() {
    ++pos_;  // [
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    CodePointSet set;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      absl::StatusOr<CodePointSet> lo = Member();
      if (!lo.ok()) return lo.status();
      if (Peek() == '-' && Peek(1) != ']' && Peek(1) != '\0') {
        ++pos_;
        absl::StatusOr<CodePointSet> hi = Member();
        if (!hi.ok()) return hi.status();
        if (lo->ranges().size() != 1 || hi->ranges().size() != 1 ||
            lo->ranges()[0].first != lo->ranges()[0].second ||
            hi->ranges()[0].first != hi->ranges()[0].second) {
          return Error("a class range must run between two characters");
        }
        const uint32_t a = lo->ranges()[0].first, b = hi->ranges()[0].first;
        if (b < a) return Error("a class range is reversed");
        set.Add(a, b);
        continue;
      }
      set.Add(*lo);
    }
    return negated ? set.Complement() : set;
  }

  // One member of a class: a character or a class escape.
  absl::StatusOr<CodePointSet> Member() {
    if (Peek() == '\\') {
      ++pos_;
      return Escape(/*in_class=*/true);
    }
    absl::StatusOr<uint32_t> cp = DecodeUtf8();
    if (!cp.ok()) return cp.status();
    return CodePointSet::Range(*cp, *cp);
  }

  // A quantifier after an atom: {min, max} (max -1: unbounded), or nullopt
  // when none. A `{` that does not start one is a literal (as browsers
  // read it).
  absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> Quantifier() {
    std::pair<int64_t, int64_t> q;
    const char c = Peek();
    if (c == '*' || c == '+' || c == '?') {
      ++pos_;
      q = c == '*'   ? std::pair<int64_t, int64_t>{0, -1}
          : c == '+' ? std::pair<int64_t, int64_t>{1, -1}
                     : std::pair<int64_t, int64_t>{0, 1};
    } else if (c == '{') {
      size_t i = pos_ + 1;
      auto number = [&](int64_t& v) {
        const size_t start = i;
        v = 0;
        while (i < p_.size() && p_[i] >= '0' && p_[i] <= '9') {
          v = std::min<int64_t>(v * 10 + (p_[i] - '0'), 1 << 20);
          ++i;
        }
        return i > start;
      };
      int64_t min = 0, max = -1;
      if (!number(min)) return std::nullopt;
      if (i < p_.size() && p_[i] == ',') {
        ++i;
        if (!number(max)) max = -1;
      } else {
        max = min;
      }
      if (i >= p_.size() || p_[i] != '}') return std::nullopt;
      if (max >= 0 && max < min) return Error("a quantifier {n,m} is reversed");
      pos_ = i + 1;
      q = {min, max};
    } else {
      return std::nullopt;
    }
    if (Peek() == '?') ++pos_;  // lazy: the same language
    return q;
  }

  absl::StatusOr<Expr> ParseSequence(bool top) {
    absl::StatusOr<std::vector<Expr>> items = ParseItems(top);
    if (!items.ok()) return items.status();
    return Sequence(*items);
  }

  absl::StatusOr<std::vector<Expr>> ParseItems(bool top) {
    std::vector<Expr> items;
    while (!AtEnd()) {
      const char c = Peek();
      if (c == '|' || c == ')') break;
      if (c == '$') {
        // Only at the end of a top-level alternative.
        if (top && (Peek(1) == '\0' || Peek(1) == '|')) break;
        return Error("`$` is supported only at the end of the pattern");
      }
      if (c == '^') {
        return Error("`^` is supported only at the start of the pattern");
      }
      if (c == '*' || c == '+' || c == '?') return Error("nothing to repeat");
      Expr atom;
      if (c == '(') {
        ++pos_;
        if (Peek() == '?') {
          if (Peek(1) == ':') {
            pos_ += 2;
          } else if (Peek(1) == '<' && Peek(2) != '=' && Peek(2) != '!') {
            while (!AtEnd() && Peek() != '>') ++pos_;
            if (AtEnd()) return Error("unterminated group name");
            ++pos_;
          } else {
            return Error("lookaround assertions are not supported");
          }
        }
        std::vector<Expr> alternatives;
        auto branches = std::make_shared<std::vector<std::vector<Expr>>>();
        while (true) {
          absl::StatusOr<std::vector<Expr>> items = ParseItems(/*top=*/false);
          if (!items.ok()) return items.status();
          alternatives.push_back(Sequence(*items));
          branches->push_back(*std::move(items));
          if (Peek() != '|') break;
          ++pos_;
        }
        if (Peek() != ')') return Error("unterminated group");
        ++pos_;
        atom = Alternatives(alternatives);
        atom.branches = std::move(branches);
      } else if (c == '[') {
        absl::StatusOr<CodePointSet> set = Class();
        if (!set.ok()) return set.status();
        if (set->empty()) return Error("the class matches nothing");
        atom = Plain(JsonCharGbnf(*set));
      } else if (c == '.') {
        ++pos_;
        atom = Plain(JsonCharGbnf(AnyButLineEnds()));
      } else if (c == '\\') {
        ++pos_;
        absl::StatusOr<CodePointSet> set = Escape(/*in_class=*/false);
        if (!set.ok()) return set.status();
        atom = Plain(JsonCharGbnf(*set));
      } else {
        absl::StatusOr<uint32_t> cp = DecodeUtf8();
        if (!cp.ok()) return cp.status();
        atom = Plain(JsonCharGbnf(CodePointSet::Range(*cp, *cp)));
      }
      absl::StatusOr<std::optional<std::pair<int64_t, int64_t>>> q =
          Quantifier();
      if (!q.ok()) return q.status();
      if (q->has_value()) atom = Repeat(atom, (*q)->first, (*q)->second);
      items.push_back(std::move(atom));
    }
    return items;
  }

  const std::string_view p_;
  size_t pos_ = 0;
};

}  // namespace

std::string JsonCharGbnf(const CodePointSet& set) {
  CodePointSet special = CodePointSet::Range(0, 0x1F);
  special.Add('"', '"');
  special.Add('\\', '\\');
  std::vector<std::string> parts;
  const CodePointSet plain = set.Intersect(special.Complement());
  if (!plain.empty()) parts.push_back(GbnfClass(plain));
  if (set.Contains('"')) parts.push_back(GbnfLiteral("\\\""));
  if (set.Contains('\\')) parts.push_back(GbnfLiteral("\\\\"));
  const CodePointSet controls = set.Intersect(CodePointSet::Range(0, 0x1F));
  if (controls.ranges().size() == 1 && controls.ranges()[0].first == 0 &&
      controls.ranges()[0].second == 0x1F) {
    parts.push_back(R"("\\" ( [bfnrt] | "u00" [01] [0-9a-fA-F] ))");
  } else {
    for (auto [lo, hi] : controls.ranges()) {
      for (uint32_t cp = lo; cp <= hi; ++cp) {
        parts.push_back(GbnfLiteral(absl::StrFormat("\\u%04x", cp)));
      }
    }
  }
  if (parts.size() == 1) return parts[0];
  return absl::StrCat("( ", absl::StrJoin(parts, " | "), " )");
}

absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern,
                                        int64_t min_length,
                                        int64_t max_length) {
  return RegexParser(pattern).Parse(min_length, max_length);
}

}  // namespace kvserve::constrain
