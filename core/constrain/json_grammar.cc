#include "core/constrain/json_grammar.h"

#include "core/util/check.h"

namespace kvserve::constrain {

std::string_view JsonObjectGbnf() {
  return R"(root    ::= object
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" char* "\""
char    ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" unicode )
unicode ::= ( [0-9a-cA-Ce-fE-F] hex{3} | [dD] [0-7] hex{2} | [dD] [89abAB] hex{2} "\\u" [dD] [c-fC-F] hex{2} )
hex     ::= [0-9a-fA-F]
number  ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [+-]? [0-9]{1,2} )?
ws      ::= ( " " | "\n" [ \t]{0,20} )?
)";
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
