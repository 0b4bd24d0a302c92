// Jinja's lexer (jinja2/lexer.py) for the delimiters {{ }}, {% %}, {# #}
// with trim_blocks and lstrip_blocks on: template text, tags and the tokens
// inside tags. Whitespace control is applied here, as jinja2 applies it, so
// the parser sees text exactly as it is printed.
#ifndef KVSERVE_CORE_CHAT_JINJA_LEXER_H_
#define KVSERVE_CORE_CHAT_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace kvserve::jinja {

enum class Tok : uint8_t {
  kEof,
  kData,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  // Operators.
  kAdd,
  kSub,
  kDiv,
  kFloorDiv,
  kMul,
  kMod,
  kPow,
  kTilde,
  kLBracket,
  kRBracket,
  kLParen,
  kRParen,
  kLBrace,
  kRBrace,
  kEq,
  kNe,
  kGt,
  kGe,
  kLt,
  kLe,
  kAssign,
  kDot,
  kColon,
  kPipe,
  kComma,
  kSemicolon,
};

struct Token {
  Tok type = Tok::kEof;
  // kData: the text; kName: the name; kString: the decoded value.
  std::string text;
  int64_t int_value = 0;   // kInt
  double float_value = 0;  // kFloat
  int line = 1;
  int col = 1;
};

// The tokens of `source`, ending with kEof. INVALID_ARGUMENT "line L:C: ..."
// for an unterminated comment or raw block, a bad character or string
// escape, or unbalanced brackets.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

// How a token is named in messages: its name, "end of statement block"...
std::string DescribeToken(const Token& token);
std::string_view DescribeTok(Tok type);

}  // namespace kvserve::jinja

#endif  // KVSERVE_CORE_CHAT_JINJA_LEXER_H_
