// The parsed tree of a Jinja template (jinja2/nodes.py, reduced to what the
// interpreter runs). Immutable after parsing; its nesting is bounded by the
// parser (kMaxNesting), so walking it recursively is safe.
#ifndef KVSERVE_CORE_CHAT_JINJA_AST_H_
#define KVSERVE_CORE_CHAT_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/chat/jinja.h"
#include "core/chat/jinja_lexer.h"
#include "core/chat/jinja_value.h"

namespace kvserve::jinja {

// Deepest nesting of statements and expressions a template may have.
inline constexpr int kMaxNesting = 200;

enum class ExprKind : uint8_t {
  kLiteral,   // value
  kName,      // name
  kList,      // args
  kTuple,     // args
  kDict,      // args: key, value, key, value...
  kGetAttr,   // lhs.name
  kGetItem,   // lhs[rhs]
  kSlice,     // args: start, stop, step (each may be null); only in kGetItem
  kCall,      // lhs(args, kwargs, *dyn_args, **dyn_kwargs)
  kFilter,    // lhs|name(args, kwargs); lhs null in filter blocks
  kTest,      // lhs is name(args, kwargs)
  kNeg,       // -lhs
  kPos,       // +lhs
  kNot,       // not lhs
  kBinary,    // lhs op rhs (op: kAdd ... kPow)
  kAnd,       // lhs and rhs
  kOr,        // lhs or rhs
  kCompare,   // lhs ops[0] args[0] ops[1] args[1]...
  kConcat,    // args[0] ~ args[1] ~ ...
  kCondExpr,  // lhs if args[0] else rhs (rhs may be null)
  kNsRef,     // name.attr as an assignment target
};

// Compare operators (kCompare's ops).
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::kLiteral;
  int line = 0;
  Tok op = Tok::kEof;  // kBinary
  Value value;         // kLiteral
  std::string name;    // kName, kGetAttr, kFilter, kTest, kNsRef (namespace)
  std::string attr;    // kNsRef
  ExprPtr lhs;
  ExprPtr rhs;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;        // *args
  ExprPtr dyn_kwargs;      // **kwargs
  std::vector<CmpOp> ops;  // kCompare
  int depth = 1;           // nesting below and including this node
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (cond, body)..., else_body
  kFor,          // for target in expr [if cond] body [else else_body]
  kSet,          // set target = expr
  kSetBlock,     // set target [| filter] body endset (filter in expr)
  kMacro,        // macro name(params) body
  kCallBlock,    // call[(params)] expr(...) body endcall
  kFilterBlock,  // filter expr body endfilter
  kWith,         // with targets = values body endwith
  kBreak,
  kContinue,
  kGeneration,  // generation body endgeneration
  kBlock,       // block name [scoped] body endblock (rendered in place)
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroSignature {
  std::string name;                 // "caller" for call blocks
  std::vector<std::string> params;  // names
  std::vector<ExprPtr> defaults;    // for the last defaults.size() params
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

struct Stmt {
  StmtKind kind = StmtKind::kText;
  int line = 0;
  std::string text;        // kText
  ExprPtr expr;            // kOutput, kFor (iterable), kSet (value), kCallBlock
                           // (the call), kFilterBlock/kSetBlock (filter chain)
  ExprPtr target;          // kFor, kSet, kSetBlock
  ExprPtr cond;            // kFor's filter
  bool recursive = false;  // kFor
  bool scoped = false;     // kBlock
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf
  Body body;
  Body else_body;                                        // kIf, kFor
  std::shared_ptr<const MacroSignature> signature;       // kMacro, kCallBlock
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;  // kWith
};

// The root of a parsed template (declared in jinja.h).
class Node {
 public:
  Body body;
};

// Whether jinja2's default environment has a filter / test of this name.
bool IsFilterName(std::string_view name);
bool IsTestName(std::string_view name);

// Parses a template (jinja2/parser.py). INVALID_ARGUMENT "line L:C: ...".
absl::StatusOr<std::unique_ptr<Node>> ParseTemplate(std::string_view source);

}  // namespace kvserve::jinja

#endif  // KVSERVE_CORE_CHAT_JINJA_AST_H_
