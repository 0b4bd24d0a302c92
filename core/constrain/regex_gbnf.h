// A JSON Schema `pattern` (ECMA-262 regular expression syntax) as GBNF for
// the content of a JSON string: what is matched is the string's value,
// what the grammar writes is its JSON encoding (a quote, a backslash or a
// control character the pattern allows is written escaped).
//
// As JSON Schema has it, a pattern is not anchored: without a leading `^`
// any characters may come first, without a trailing `$` any may follow.
// Supported: literals and escapes (\d \w \s and their negations, \t \n \r
// \f \v \0, \xHH, \uHHHH, \u{H...}, escaped metacharacters), `.`, classes
// with ranges and negation, groups (capturing, (?:...), (?<name>...)),
// alternation, and the quantifiers * + ? {n} {n,} {n,m} (lazy ones as
// greedy: the language is the same). Refused, naming the construct:
// lookaround, backreferences, word boundaries, \p{...} classes, and `^` or
// `$` anywhere but at the ends of the pattern's top-level alternatives.
#ifndef KVSERVE_CORE_CONSTRAIN_REGEX_GBNF_H_
#define KVSERVE_CORE_CONSTRAIN_REGEX_GBNF_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "core/constrain/gbnf_builder.h"

namespace kvserve::constrain {

// A GBNF expression for the string content (the quotes not included). Uses
// the rule `json-char` (JsonGbnfRules) for "any character".
// INVALID_ARGUMENT naming what is not supported.
//
// With length bounds (minLength / maxLength: characters; max -1:
// unbounded), every string the expression writes also has a length within
// them, by narrowing: a pattern not anchored is written as a match and a
// tail, and repetitions of fixed-length atoms (`[a-z]+`, `(ab)*`, the
// tail) are counted so that the shortest and longest strings fit
// (`^[a-z]+$` with maxLength 8 is written as [a-z]{1,8}). INVALID_ARGUMENT
// when no alternative of the pattern can be narrowed so (a part of
// unbounded length that is not such a repetition).
absl::StatusOr<std::string> RegexToGbnf(std::string_view pattern,
                                        int64_t min_length = 0,
                                        int64_t max_length = -1);

// The GBNF expression for one character of a JSON string whose value is in
// `set`, escaped as JSON requires. REQUIRES: !set.empty().
std::string JsonCharGbnf(const CodePointSet& set);

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_REGEX_GBNF_H_
