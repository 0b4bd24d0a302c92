// Writing GBNF from code (the JSON Schema and regex compilers): rules with
// unique names, literals and character classes escaped so that ParseGbnf
// reads back exactly the bytes and code points meant.
#ifndef KVSERVE_CORE_CONSTRAIN_GBNF_BUILDER_H_
#define KVSERVE_CORE_CONSTRAIN_GBNF_BUILDER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"

namespace kvserve::constrain {

// A set of code points as sorted, disjoint, non-adjacent ranges.
class CodePointSet {
 public:
  static constexpr uint32_t kMax = 0x10FFFF;
  CodePointSet() = default;
  static CodePointSet Range(uint32_t lo, uint32_t hi) {
    CodePointSet s;
    s.Add(lo, hi);
    return s;
  }

  void Add(uint32_t lo, uint32_t hi);
  void Add(const CodePointSet& other) {
    for (auto [lo, hi] : other.ranges_) Add(lo, hi);
  }
  CodePointSet Complement() const;
  CodePointSet Intersect(const CodePointSet& other) const;
  bool Contains(uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const {
    return ranges_;
  }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// The value of `digits` hex digits at text[pos...] (pos advanced past
// them), or nullopt when one is missing. For the escapes of GBNF and
// regular expressions.
std::optional<uint32_t> ParseHexDigits(std::string_view text, size_t& pos,
                                       int digits);

// A GBNF string literal of these bytes ("..." with escapes).
std::string GbnfLiteral(std::string_view bytes);
// A GBNF character class of these code points. REQUIRES: !set.empty().
std::string GbnfClass(const CodePointSet& set);

class GbnfBuilder {
 public:
  // Every name begins with `prefix` (for rules that join a larger grammar).
  explicit GbnfBuilder(std::string prefix = "") : prefix_(std::move(prefix)) {}

  // A new rule's name, made from `base` (characters outside [a-zA-Z0-9-]
  // become '-'), unique in this builder; its body is set later.
  std::string Reserve(std::string_view base);
  void Define(const std::string& name, std::string body);
  // Reserve + Define.
  std::string Add(std::string_view base, std::string body) {
    std::string name = Reserve(base);
    Define(name, std::move(body));
    return name;
  }
  // Every rule defined, one per line, then `tail` (shared rules).
  std::string Text(std::string_view tail = "") const;
  int64_t bytes() const { return bytes_; }

 private:
  const std::string prefix_;
  std::vector<std::pair<std::string, std::string>> rules_;
  absl::flat_hash_set<std::string> names_;
  int64_t bytes_ = 0;
};

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_GBNF_BUILDER_H_
