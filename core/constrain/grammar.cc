#include "core/constrain/grammar.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/constrain/gbnf_builder.h"
#include "core/tokenizer/unicode.h"
#include "core/util/quote.h"

namespace kvserve::constrain {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// A code point's UTF-8 bytes. REQUIRES: cp <= kMaxCodePoint.
std::string EncodeUtf8(uint32_t cp) {
  std::string out;
  AppendUtf8(cp, out);
  return out;
}

// [lo, hi] without surrogates, as Utf8RangeSequences' ranges of one
// encoded length whose continuation bytes each span a whole range.
void SplitUtf8(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
  if (lo > hi) return;
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && max < hi) {
      SplitUtf8(lo, max, out);
      SplitUtf8(max + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  const int n = hi < 0x800 ? 2 : hi < 0x10000 ? 3 : 4;
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        SplitUtf8(lo, lo | m, out);
        SplitUtf8((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        SplitUtf8(lo, (hi & ~m) - 1, out);
        SplitUtf8(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = EncodeUtf8(lo), b = EncodeUtf8(hi);
  ByteRangeSeq seq;
  for (size_t i = 0; i < a.size(); ++i) {
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out.push_back(std::move(seq));
}

// A symbol of a sequence while parsing.
struct Sym {
  enum class Kind { kBytes, kRuleName, kRule };
  Kind kind = Kind::kBytes;
  ByteSet bytes;
  std::string name;  // kRuleName
  uint32_t rule = 0;
  size_t offset = 0;  // kRuleName: where it is used
};
using Seq = std::vector<Sym>;

struct RawRule {
  std::string name{};
  std::vector<Seq> alternatives{};
  bool defined = false;
  int line = 0;  // where it is defined
};

Sym RuleSym(uint32_t rule) {
  Sym s;
  s.kind = Sym::Kind::kRule;
  s.rule = rule;
  return s;
}

Sym BytesSym(uint8_t lo, uint8_t hi) {
  Sym s;
  s.bytes.AddRange(lo, hi);
  return s;
}

class Parser {
 public:
  Parser(std::string_view text, const GrammarLimits& limits)
      : text_(text), limits_(limits) {}

  absl::StatusOr<Grammar> Parse(std::string_view root) {
    if (static_cast<int64_t>(text_.size()) > limits_.max_text_bytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the grammar is %d bytes, more than the %d allowed",
                          text_.size(), limits_.max_text_bytes));
    }
    const absl::Time deadline = absl::Now() + limits_.max_time;
    SkipSpace(/*newlines=*/true);
    while (pos_ < text_.size()) {
      if (absl::Status s = ParseRule(); !s.ok()) return s;
      SkipSpace(/*newlines=*/true);
      if (absl::Now() > deadline) return TooSlow();
    }
    deadline_ = deadline;
    return Build(root);
  }

 private:
  absl::Status TooSlow() const {
    return absl::InvalidArgumentError(
        absl::StrCat("compiling the grammar took more than ",
                     absl::FormatDuration(limits_.max_time), "; simplify it"));
  }

  // --- errors and position ---
  // The line of `pos`, for rules as they are defined (in text order: the
  // count goes on from the last call, so the whole parse stays linear).
  int LineOf(size_t pos) {
    if (pos < line_pos_) line_pos_ = 0, line_ = 1;
    for (; line_pos_ < pos && line_pos_ < text_.size(); ++line_pos_) {
      line_ += text_[line_pos_] == '\n';
    }
    return line_;
  }
  std::pair<int, int> LineColumn(size_t pos) const {
    int line = 1, column = 1;
    for (size_t i = 0; i < pos && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    return {line, column};
  }
  absl::Status Error(std::string_view what) const {
    auto [line, column] = LineColumn(pos_);
    return absl::InvalidArgumentError(
        absl::StrFormat("grammar line %d column %d: %s", line, column, what));
  }
  std::string Here() const {
    if (pos_ >= text_.size()) return "the end of the grammar";
    return QuoteClientText(text_.substr(pos_, 1));
  }

  // --- lexing ---
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '_';
  }

  // Spaces, tabs and comments; newlines too when `newlines`.
  void SkipSpace(bool newlines) {
    while (!AtEnd()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!AtEnd() && text_[pos_] != '\n') ++pos_;
      } else if (newlines && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string ParseName() {
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // One code point of the text (UTF-8), or an error for invalid UTF-8.
  absl::StatusOr<uint32_t> DecodeOne() {
    const Utf8Char c = DecodeUtf8At(text_, pos_);
    if (!c.valid) return Error("invalid UTF-8 in the grammar");
    pos_ += c.len;
    return c.cp;
  }

  absl::StatusOr<uint32_t> ParseHex(int digits) {
    std::optional<uint32_t> v = ParseHexDigits(text_, pos_, digits);
    if (!v.has_value()) {
      return Error(absl::StrFormat("expected %d hex digits", digits));
    }
    if (*v > kMaxCodePoint || (*v >= 0xD800 && *v <= 0xDFFF)) {
      return Error(absl::StrFormat("U+%X is not a Unicode scalar value", *v));
    }
    return *v;
  }

  // A character of a literal or class: itself or an escape.
  absl::StatusOr<uint32_t> ParseChar() {
    if (AtEnd()) return Error("unexpected end of the grammar");
    if (text_[pos_] != '\\') return DecodeOne();
    ++pos_;
    const char c = Peek();
    ++pos_;
    switch (c) {
      case 'x':
        return ParseHex(2);
      case 'u':
        return ParseHex(4);
      case 'U':
        return ParseHex(8);
      case 'n':
        return '\n';
      case 'r':
        return '\r';
      case 't':
        return '\t';
      case '\\':
      case '"':
      case '[':
      case ']':
      case '-':
      case '^':
      case '/':
      case '\'':
        return static_cast<uint8_t>(c);
      default:
        --pos_;
        return Error(absl::StrCat("unknown escape \\", Here()));
    }
  }

  // --- rules ---
  uint32_t RuleIndex(const std::string& name) {
    auto [it, added] = by_name_.try_emplace(name, rules_.size());
    if (added) rules_.push_back(RawRule{.name = name});
    return it->second;
  }
  uint32_t NewHelper(std::string_view base) {
    rules_.push_back(RawRule{
        .name = absl::StrCat(absl::string_view(base.data(), base.size()), "-",
                             rules_.size()),
        .defined = true});
    return rules_.size() - 1;
  }
  // A helper rule with these alternatives.
  uint32_t Helper(std::string_view base, std::vector<Seq> alternatives) {
    const uint32_t r = NewHelper(base);
    rules_[r].alternatives = std::move(alternatives);
    return r;
  }

  absl::Status ParseRule() {
    const size_t start = pos_;
    const std::string name = ParseName();
    if (name.empty()) {
      return Error(absl::StrCat("expected a rule name, found ", Here()));
    }
    SkipSpace(false);
    if (text_.substr(pos_, 3) != "::=") {
      return Error(
          absl::StrCat("expected ::= after rule `", name, "`, found ", Here()));
    }
    pos_ += 3;
    SkipSpace(true);
    const uint32_t r = RuleIndex(name);
    if (rules_[r].defined) {
      pos_ = start;
      return Error(
          absl::StrFormat("rule `%s` is defined twice (first on line "
                          "%d)",
                          name, rules_[r].line));
    }
    rules_[r].defined = true;
    rules_[r].line = LineOf(start);
    std::vector<Seq> alternatives;
    if (absl::Status s = ParseAlternates(name, alternatives, false); !s.ok()) {
      return s;
    }
    rules_[r].alternatives = std::move(alternatives);
    SkipSpace(false);
    if (!AtEnd() && Peek() != '\n' && Peek() != '\r') {
      return Error(absl::StrCat("expected the end of the line after rule `",
                                name, "`, found ", Here()));
    }
    return absl::OkStatus();
  }

  absl::Status ParseAlternates(const std::string& rule,
                               std::vector<Seq>& alternatives, bool nested) {
    while (true) {
      Seq seq;
      if (absl::Status s = ParseSequence(rule, seq, nested); !s.ok()) return s;
      alternatives.push_back(std::move(seq));
      if (Peek() != '|') return absl::OkStatus();
      ++pos_;
      SkipSpace(true);
    }
  }

  // Code-point ranges [lo, hi] as one atom: a byte set when all are ASCII,
  // else a helper rule of their UTF-8 sequences (cached by the ranges).
  Seq ClassAtom(const std::string& rule,
                std::vector<std::pair<uint32_t, uint32_t>> ranges) {
    std::sort(ranges.begin(), ranges.end());
    if (!ranges.empty() && ranges.back().second < 0x80) {
      Sym s;
      for (auto [lo, hi] : ranges) {
        s.bytes.AddRange(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
      }
      return {s};
    }
    std::string key;
    for (auto [lo, hi] : ranges) absl::StrAppend(&key, lo, "-", hi, ",");
    if (auto it = class_rules_.find(key); it != class_rules_.end()) {
      return {RuleSym(it->second)};
    }
    std::vector<ByteRangeSeq> sequences;
    for (auto [lo, hi] : ranges) {
      for (ByteRangeSeq& seq : Utf8RangeSequences(lo, hi)) {
        sequences.push_back(std::move(seq));
      }
    }
    // The one-byte sequences as one byte set.
    std::vector<Seq> alternatives;
    Sym ascii;
    for (const ByteRangeSeq& seq : sequences) {
      if (seq.size() == 1) {
        ascii.bytes.AddRange(seq[0].first, seq[0].second);
        continue;
      }
      Seq alt;
      for (auto [lo, hi] : seq) alt.push_back(BytesSym(lo, hi));
      alternatives.push_back(std::move(alt));
    }
    if (!ascii.bytes.empty())
      alternatives.insert(alternatives.begin(), {ascii});
    const uint32_t r = Helper(absl::StrCat(rule, "-char"), alternatives);
    class_rules_.emplace(key, r);
    return {RuleSym(r)};
  }

  absl::StatusOr<Seq> ParseClass(const std::string& rule) {
    ++pos_;  // [
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++pos_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (AtEnd()) return Error("unterminated character class");
      if (Peek() == ']') {
        ++pos_;
        break;
      }
      absl::StatusOr<uint32_t> lo = ParseChar();
      if (!lo.ok()) return lo.status();
      uint32_t hi = *lo;
      if (Peek() == '-' && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        absl::StatusOr<uint32_t> h = ParseChar();
        if (!h.ok()) return h.status();
        if (*h < *lo) {
          return Error(
              absl::StrFormat("the range U+%X-U+%X is reversed", *lo, *h));
        }
        hi = *h;
      }
      ranges.emplace_back(*lo, hi);
    }
    if (negated) {
      std::sort(ranges.begin(), ranges.end());
      std::vector<std::pair<uint32_t, uint32_t>> rest;
      uint32_t next = 0;
      for (auto [lo, hi] : ranges) {
        if (lo > next) rest.emplace_back(next, lo - 1);
        next = std::max(next, hi + 1);
      }
      if (next <= kMaxCodePoint) rest.emplace_back(next, kMaxCodePoint);
      ranges = std::move(rest);
    }
    if (ranges.empty()) return Error("the character class matches nothing");
    return ClassAtom(rule, std::move(ranges));
  }

  // Applies the repetition operators that follow an atom.
  absl::StatusOr<Seq> ParsePostfix(const std::string& rule, Seq atom) {
    while (true) {
      const char c = Peek();
      if (c != '*' && c != '+' && c != '?' && c != '{') return atom;
      int min = 0, max = -1;  // -1: unbounded
      ++pos_;
      if (c == '+') {
        min = 1;
      } else if (c == '?') {
        max = 1;
      } else if (c == '{') {
        SkipSpace(true);
        absl::StatusOr<int> m = ParseCount();
        if (!m.ok()) return m.status();
        min = max = *m;
        SkipSpace(true);
        if (Peek() == ',') {
          ++pos_;
          SkipSpace(true);
          max = -1;
          if (Peek() != '}') {
            absl::StatusOr<int> n = ParseCount();
            if (!n.ok()) return n.status();
            max = *n;
            SkipSpace(true);
          }
        }
        if (Peek() != '}') {
          return Error(
              absl::StrCat("expected } to end a repetition, found ", Here()));
        }
        ++pos_;
        if (max >= 0 && max < min) {
          return Error(
              absl::StrFormat("the repetition {%d,%d} is reversed", min, max));
        }
      }
      atom = Repeat(rule, std::move(atom), min, max);
      SkipSpace(false);
    }
  }

  absl::StatusOr<int> ParseCount() {
    const size_t start = pos_;
    int64_t v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      ++pos_;
      if (v > limits_.max_repetition) {
        pos_ = start;
        return Error(absl::StrFormat("a repetition count above %d",
                                     limits_.max_repetition));
      }
    }
    if (pos_ == start) {
      return Error(absl::StrCat("expected a repetition count, found ", Here()));
    }
    return static_cast<int>(v);
  }

  // x{min,max} (max -1: unbounded): min copies of x, then x* or a nest of
  // max - min optional x's (x (x (x)?)?)?, which is unambiguous.
  Seq Repeat(const std::string& rule, Seq x, int min, int max) {
    if (x.size() != 1) x = {RuleSym(Helper(rule, {x}))};
    Seq out;
    for (int i = 0; i < min; ++i) out.push_back(x[0]);
    if (max < 0) {
      const uint32_t star = NewHelper(absl::StrCat(rule, "-star"));
      rules_[star].alternatives = {{x[0], RuleSym(star)}, {}};
      out.push_back(RuleSym(star));
    } else if (max > min) {
      Seq inner;  // empty: nothing more
      for (int i = 0; i < max - min; ++i) {
        Seq alt = {x[0]};
        alt.insert(alt.end(), inner.begin(), inner.end());
        inner = {RuleSym(Helper(absl::StrCat(rule, "-opt"), {alt, {}}))};
      }
      out.insert(out.end(), inner.begin(), inner.end());
    }
    return out;
  }

  absl::Status ParseSequence(const std::string& rule, Seq& seq, bool nested) {
    while (!AtEnd()) {
      const char c = Peek();
      Seq atom;
      if (c == '"') {
        ++pos_;
        while (true) {
          if (AtEnd() || Peek() == '\n') {
            return Error("unterminated string literal");
          }
          if (Peek() == '"') {
            ++pos_;
            break;
          }
          absl::StatusOr<uint32_t> cp = ParseChar();
          if (!cp.ok()) return cp.status();
          for (char b : EncodeUtf8(*cp)) {
            atom.push_back(
                BytesSym(static_cast<uint8_t>(b), static_cast<uint8_t>(b)));
          }
        }
      } else if (c == '[') {
        absl::StatusOr<Seq> cls = ParseClass(rule);
        if (!cls.ok()) return cls.status();
        atom = *std::move(cls);
      } else if (c == '.') {
        ++pos_;
        atom = ClassAtom(rule, {{0, kMaxCodePoint}});
      } else if (c == '(') {
        ++pos_;
        SkipSpace(true);
        std::vector<Seq> alternatives;
        if (absl::Status s = ParseAlternates(rule, alternatives, true);
            !s.ok()) {
          return s;
        }
        if (Peek() != ')') {
          return Error(
              absl::StrCat("expected ) to close a group, found ", Here()));
        }
        ++pos_;
        atom = {RuleSym(Helper(rule, std::move(alternatives)))};
      } else if (IsNameChar(c)) {
        Sym s;
        s.kind = Sym::Kind::kRuleName;
        s.offset = pos_;
        s.name = ParseName();
        atom = {std::move(s)};
      } else if (c == '<') {
        return Error(
            "token references (<[id]>, <|token|>) are not supported: write "
            "the text the token stands for");
      } else if (c == '|' || c == ')' || c == '\n' || c == '\r') {
        break;
      } else {
        return Error(absl::StrCat("unexpected ", Here()));
      }
      SkipSpace(nested);
      absl::StatusOr<Seq> repeated = ParsePostfix(rule, std::move(atom));
      if (!repeated.ok()) return repeated.status();
      seq.insert(seq.end(), repeated->begin(), repeated->end());
      SkipSpace(nested);
      if (!nested && (Peek() == '\n' || Peek() == '\r')) break;
    }
    return absl::OkStatus();
  }

  // --- compiling ---
  absl::StatusOr<Grammar> Build(std::string_view root) {
    // Names to rule indices.
    for (RawRule& r : rules_) {
      for (Seq& alt : r.alternatives) {
        for (Sym& s : alt) {
          if (s.kind != Sym::Kind::kRuleName) continue;
          auto it = by_name_.find(s.name);
          if (it == by_name_.end() || !rules_[it->second].defined) {
            auto [line, column] = LineColumn(s.offset);
            return absl::InvalidArgumentError(absl::StrFormat(
                "grammar line %d column %d: rule `%s` is used but never "
                "defined",
                line, column, s.name));
          }
          s = RuleSym(it->second);
        }
      }
    }
    auto root_it = by_name_.find(std::string(root));
    if (root_it == by_name_.end() || !rules_[root_it->second].defined) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the grammar has no rule `%s` to start from", root));
    }
    if (absl::Status s = DropUnproductive(root_it->second); !s.ok()) return s;
    if (absl::Now() > deadline_) return TooSlow();
    if (absl::Status s = CheckNotLeftRecursive(); !s.ok()) return s;

    Grammar g;
    g.root = root_it->second;
    absl::flat_hash_map<std::string, uint32_t> byte_set_ids;
    g.alternatives.resize(rules_.size());
    for (size_t r = 0; r < rules_.size(); ++r) {
      g.rule_names.push_back(rules_[r].name);
      for (const Seq& alt : rules_[r].alternatives) {
        g.alternatives[r].push_back(g.elements.size());
        for (const Sym& s : alt) {
          Grammar::Element e;
          if (s.kind == Sym::Kind::kRule) {
            e.kind = Grammar::Element::Kind::kRule;
            e.index = s.rule;
          } else {
            e.kind = Grammar::Element::Kind::kBytes;
            std::string key;
            for (int b = 0; b < 256; ++b) {
              key.push_back(s.bytes.Has(static_cast<uint8_t>(b)) ? '1' : '0');
            }
            auto [it, added] =
                byte_set_ids.try_emplace(key, g.byte_sets.size());
            if (added) g.byte_sets.push_back(s.bytes);
            e.index = it->second;
          }
          g.elements.push_back(e);
        }
        g.elements.push_back(Grammar::Element{});  // kEnd
        if (static_cast<int64_t>(g.elements.size()) > limits_.max_elements) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "the grammar expands to more than %d elements (its repetitions "
              "multiplied out)",
              limits_.max_elements));
        }
      }
    }
    return g;
  }

  // Alternatives that can never be completed (they use a rule with no
  // finite match, like `a ::= "x" a`) go, so that every state the matcher
  // reaches can still end; a root with none left matches nothing.
  absl::Status DropUnproductive(uint32_t root) {
    const size_t n = rules_.size();
    std::vector<bool> productive(n, false);
    auto complete = [&](const Seq& alt) {
      return std::all_of(alt.begin(), alt.end(), [&](const Sym& s) {
        return s.kind != Sym::Kind::kRule || productive[s.rule];
      });
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (productive[r]) continue;
        const auto& alts = rules_[r].alternatives;
        if (std::any_of(alts.begin(), alts.end(), complete)) {
          productive[r] = changed = true;
        }
      }
    }
    if (!productive[root]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rule `", rules_[root].name,
          "` matches no finite text (every alternative recurses for ever)"));
    }
    for (RawRule& r : rules_) {
      auto& alts = r.alternatives;
      alts.erase(std::remove_if(alts.begin(), alts.end(),
                                [&](const Seq& alt) { return !complete(alt); }),
                 alts.end());
    }
    return absl::OkStatus();
  }

  // A rule that can reach itself without consuming a byte would make a
  // top-down matcher loop: refused, naming it.
  absl::Status CheckNotLeftRecursive() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Seq& alt : rules_[r].alternatives) {
          bool all = true;
          for (const Sym& s : alt) {
            if (s.kind != Sym::Kind::kRule || !nullable[s.rule]) {
              all = false;
              break;
            }
          }
          if (all) {
            nullable[r] = changed = true;
            break;
          }
        }
      }
    }
    // left[r]: the rules r may start with, and whether by a tail call (a
    // reference that ends its alternative). The matcher expands a tail call
    // on the same stack, and each (position, stack) once per step
    // (grammar_automaton.h), so a cycle of tail calls is harmless (`(
    // [x]* )*`); a cycle with any other reference grows the stack for ever
    // (`a ::= a "x"`) and is refused.
    struct Edge {
      uint32_t to;
      bool tail;
    };
    std::vector<std::vector<Edge>> left(n);
    for (size_t r = 0; r < n; ++r) {
      for (const Seq& alt : rules_[r].alternatives) {
        for (size_t i = 0; i < alt.size(); ++i) {
          const Sym& s = alt[i];
          if (s.kind != Sym::Kind::kRule) break;
          left[r].push_back({s.rule, i + 1 == alt.size()});
          if (!nullable[s.rule]) break;
        }
      }
    }
    // Tarjan's strongly connected components, iteratively.
    std::vector<int> index(n, -1), low(n, 0), component(n, -1);
    std::vector<bool> on_stack(n, false);
    std::vector<uint32_t> stack;
    int next_index = 0, components = 0;
    for (uint32_t root = 0; root < n; ++root) {
      if (index[root] >= 0) continue;
      std::vector<std::pair<uint32_t, size_t>> work = {{root, 0}};
      index[root] = low[root] = next_index++;
      stack.push_back(root);
      on_stack[root] = true;
      while (!work.empty()) {
        auto& [v, i] = work.back();
        if (i < left[v].size()) {
          const uint32_t w = left[v][i++].to;
          if (index[w] < 0) {
            index[w] = low[w] = next_index++;
            stack.push_back(w);
            on_stack[w] = true;
            work.push_back({w, 0});
          } else if (on_stack[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        if (low[v] == index[v]) {
          uint32_t w;
          do {
            w = stack.back();
            stack.pop_back();
            on_stack[w] = false;
            component[w] = components;
          } while (w != v);
          ++components;
        }
        const uint32_t done = v;
        work.pop_back();
        if (!work.empty()) {
          low[work.back().first] = std::min(low[work.back().first], low[done]);
        }
      }
    }
    std::optional<uint32_t> cyclic;
    for (uint32_t r = 0; r < n && !cyclic.has_value(); ++r) {
      for (const Edge& e : left[r]) {
        if (!e.tail && component[e.to] == component[r]) {
          cyclic = r;
          break;
        }
      }
    }
    if (!cyclic.has_value()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "rule `", rules_[*cyclic].name,
        "` is left-recursive: it can reach itself before matching a "
        "character (a rule that starts with itself, or a repetition of "
        "something that may be empty)"));
  }

  const std::string_view text_;
  const GrammarLimits limits_;
  absl::Time deadline_ = absl::InfiniteFuture();
  size_t pos_ = 0;
  size_t line_pos_ = 0;  // LineOf's cursor: line_ is the line there
  int line_ = 1;
  std::vector<RawRule> rules_;
  absl::flat_hash_map<std::string, uint32_t> by_name_;
  absl::flat_hash_map<std::string, uint32_t> class_rules_;
};

}  // namespace

std::vector<ByteRangeSeq> Utf8RangeSequences(uint32_t lo, uint32_t hi) {
  std::vector<ByteRangeSeq> out;
  hi = std::min(hi, kMaxCodePoint);
  if (lo <= 0xD7FF || hi >= 0xE000) {
    if (lo < 0xD800) SplitUtf8(lo, std::min(hi, 0xD7FFu), out);
    if (hi > 0xDFFF) SplitUtf8(std::max(lo, 0xE000u), hi, out);
  }
  return out;
}

absl::StatusOr<Grammar> ParseGbnf(std::string_view text, std::string_view root,
                                  const GrammarLimits& limits) {
  return Parser(text, limits).Parse(root);
}

absl::StatusOr<std::shared_ptr<const Grammar>> CompileGbnf(
    std::string_view text, const GrammarLimits& limits) {
  absl::StatusOr<Grammar> g = ParseGbnf(text, "root", limits);
  if (!g.ok()) return g.status();
  return std::make_shared<const Grammar>(*std::move(g));
}

}  // namespace kvserve::constrain
