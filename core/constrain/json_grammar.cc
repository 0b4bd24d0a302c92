#include "core/constrain/json_grammar.h"

#include <string>

#include "core/util/check.h"

namespace kvserve::constrain {

std::string_view JsonGbnfRules() {
  return R"(json-value   ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object  ::= "{" ws ( json-member ( ws "," ws json-member )* ws )? "}"
json-member  ::= json-string ws ":" ws json-value
json-array   ::= "[" ws ( json-value ( ws "," ws json-value )* ws )? "]"
json-string  ::= "\"" json-char* "\""
json-char    ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" json-unicode )
json-unicode ::= ( [0-9a-cA-Ce-fE-F] json-hex{3} | [dD] [0-7] json-hex{2} | [dD] [89abAB] json-hex{2} "\\u" [dD] [c-fC-F] json-hex{2} )
json-hex     ::= [0-9a-fA-F]
json-number  ::= json-integer ( "." [0-9]{1,16} )? ( [eE] [+-]? [0-9]{1,2} )?
json-integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
json-boolean ::= "true" | "false"
json-null    ::= "null"
ws           ::= ( " " | "\n" [ \t]{0,20} )?
)";
}

std::string JsonObjectGbnf() {
  return "root ::= json-object\n" + std::string(JsonGbnfRules());
}

std::shared_ptr<const Grammar> JsonObjectGrammar() {
  static const auto* const grammar = [] {
    absl::StatusOr<Grammar> g = ParseGbnf(JsonObjectGbnf());
    KVSERVE_CHECK(g.ok());
    return new std::shared_ptr<const Grammar>(
        std::make_shared<const Grammar>(*std::move(g)));
  }();
  return *grammar;
}

}  // namespace kvserve::constrain
