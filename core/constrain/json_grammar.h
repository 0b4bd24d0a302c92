// JSON in GBNF: the rules every JSON grammar shares (named json-*), and the
// grammar of a JSON object (OpenAI's response_format "json_object").
//
// The rules follow RFC 8259's syntax, with \u escapes of surrogates only as
// a high-low pair (as strict parsers require), numbers within a double's
// range, and whitespace between tokens bounded (one space, or a newline
// and up to 20 spaces or tabs: a model cannot spend its tokens on
// whitespace forever). A top-level value is followed by nothing, so that
// its last byte ends the output.
//
//   json-value   any JSON value       json-object, json-array
//   json-string  a string, quoted     json-char: one character of one,
//                                     escaped as JSON needs
//   json-number, json-integer, json-boolean, json-null, ws
#ifndef KVSERVE_CORE_CONSTRAIN_JSON_GRAMMAR_H_
#define KVSERVE_CORE_CONSTRAIN_JSON_GRAMMAR_H_

#include <memory>
#include <string>
#include <string_view>

#include "core/constrain/grammar.h"

namespace kvserve::constrain {

// The json-* rules and `ws`, to append to a grammar that uses them.
std::string_view JsonGbnfRules();

// `root ::= json-object` and the rules.
std::string JsonObjectGbnf();

// JsonObjectGbnf() compiled (once; shared).
std::shared_ptr<const Grammar> JsonObjectGrammar();

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_JSON_GRAMMAR_H_
