// The grammar of a JSON object (OpenAI's response_format "json_object"):
// RFC 8259's syntax with an object at the top, \u escapes of surrogates
// only as a high-low pair (as strict parsers require), numbers within a
// double's range, whitespace between tokens bounded (a newline and up to
// 20 spaces or tabs, or one space: a model cannot spend its tokens on
// whitespace forever) and none after the object, which ends the output.
#ifndef KVSERVE_CORE_CONSTRAIN_JSON_GRAMMAR_H_
#define KVSERVE_CORE_CONSTRAIN_JSON_GRAMMAR_H_

#include <memory>
#include <string_view>

#include "core/constrain/grammar.h"

namespace kvserve::constrain {

// The GBNF text; its rule `value` is any JSON value.
std::string_view JsonObjectGbnf();

// JsonObjectGbnf() compiled (once; shared).
std::shared_ptr<const Grammar> JsonObjectGrammar();

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_JSON_GRAMMAR_H_
