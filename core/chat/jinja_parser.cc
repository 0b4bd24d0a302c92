// Recursive descent over the lexer's tokens, following jinja2/parser.py
// function by function (same precedence, same tuple and test quirks).
#include <algorithm>
#include <initializer_list>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "core/chat/jinja_ast.h"

namespace kvserve::jinja {
namespace {

// Python's jinja2 filter and test names: an unknown one is a parse error
// outside {% if %} (jinja2 fails at compile time), a render error inside.
constexpr std::string_view kFilterNames[] = {
    "abs",       "attr",       "batch",       "capitalize",
    "center",    "count",      "d",           "default",
    "dictsort",  "e",          "escape",      "filesizeformat",
    "first",     "float",      "forceescape", "format",
    "groupby",   "indent",     "int",         "join",
    "last",      "length",     "list",        "lower",
    "items",     "map",        "min",         "max",
    "pprint",    "random",     "reject",      "rejectattr",
    "replace",   "reverse",    "round",       "safe",
    "select",    "selectattr", "slice",       "sort",
    "string",    "striptags",  "sum",         "title",
    "trim",      "truncate",   "unique",      "upper",
    "urlencode", "urlize",     "wordcount",   "wordwrap",
    "xmlattr",   "tojson"};
constexpr std::string_view kTestNames[] = {
    "odd",      "even",        "divisibleby", "defined", "undefined", "filter",
    "test",     "none",        "boolean",     "false",   "true",      "integer",
    "float",    "lower",       "upper",       "string",  "mapping",   "number",
    "sequence", "iterable",    "callable",    "sameas",  "escaped",   "in",
    "==",       "eq",          "equalto",     "!=",      "ne",        ">",
    "gt",       "greaterthan", "ge",          ">=",      "<",         "lt",
    "lessthan", "<=",          "le"};

template <size_t N>
bool Contains(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

using Names = std::initializer_list<std::string_view>;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  absl::StatusOr<std::unique_ptr<Node>> Parse() {
    auto root = std::make_unique<Node>();
    absl::StatusOr<Body> body = Subparse({});
    if (!body.ok()) return body.status();
    root->body = *std::move(body);
    return root;
  }

 private:
  // ---- token stream --------------------------------------------------------

  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const {
    return toks_[std::min(pos_ + 1, toks_.size() - 1)];
  }
  void Next() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool Is(Tok t) const { return cur().type == t; }
  bool IsName(std::string_view n) const {
    return cur().type == Tok::kName && cur().text == n;
  }
  bool IsNameIn(Names names) const {
    if (cur().type != Tok::kName) return false;
    for (std::string_view n : names) {
      if (cur().text == n) return true;
    }
    return false;
  }
  bool Skip(Tok t) {
    if (!Is(t)) return false;
    Next();
    return true;
  }
  bool SkipName(std::string_view n) {
    if (!IsName(n)) return false;
    Next();
    return true;
  }

  absl::Status Fail(const Token& at, std::string_view message) const {
    return absl::InvalidArgumentError(
        Cat("line ", at.line, ":", at.col, ": ", message));
  }
  absl::Status Fail(std::string_view message) const {
    return Fail(cur(), message);
  }

  absl::Status Expect(Tok t) {
    if (Is(t)) {
      Next();
      return absl::OkStatus();
    }
    if (Is(Tok::kEof)) return FailEof({});
    return Fail(Cat("expected token '", DescribeTok(t), "', got '",
                    DescribeToken(cur()), "'"));
  }
  absl::StatusOr<std::string> ExpectName() {
    if (!Is(Tok::kName)) {
      if (absl::Status s = Expect(Tok::kName); !s.ok()) return s;
    }
    std::string name = cur().text;
    Next();
    return name;
  }
  absl::Status ExpectName(std::string_view n) {
    if (SkipName(n)) return absl::OkStatus();
    if (Is(Tok::kEof)) return FailEof({});
    return Fail(
        Cat("expected token '", n, "', got '", DescribeToken(cur()), "'"));
  }

  // jinja2's _fail_ut_eof: the end of the template or an unknown tag, and
  // what the innermost open block waits for.
  absl::Status FailEof(Names extra) const {
    std::vector<std::string> looking;
    for (std::string_view n : extra) looking.push_back(Cat("'", n, "'"));
    if (looking.empty() && !end_stack_.empty()) {
      for (std::string_view n : end_stack_.back()) {
        looking.push_back(Cat("'", n, "'"));
      }
    }
    std::string msg = "unexpected end of template";
    if (!looking.empty()) {
      CatTo(&msg, ", expected ", absl::StrJoin(looking, " or "));
    }
    if (!tag_stack_.empty()) {
      CatTo(&msg, " (the innermost open block is '", tag_stack_.back(), "')");
    }
    return Fail(msg);
  }

  // ---- nesting -------------------------------------------------------------

  class Nest {
   public:
    explicit Nest(Parser* p) : p_(p) { ++p_->depth_; }
    ~Nest() { --p_->depth_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser* p_;
  };
  absl::Status CheckDepth() const {
    if (depth_ > kMaxNesting) {
      return Fail(Cat("nested deeper than ", kMaxNesting, " levels"));
    }
    return absl::OkStatus();
  }

  ExprPtr Make(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  // Records e's depth; fails when too deep (long operator or filter chains
  // build deep trees without deep recursion here).
  absl::StatusOr<ExprPtr> Seal(ExprPtr e) {
    int d = 0;
    auto see = [&d](const ExprPtr& c) {
      if (c != nullptr) d = std::max(d, c->depth);
    };
    see(e->lhs);
    see(e->rhs);
    see(e->dyn_args);
    see(e->dyn_kwargs);
    for (const ExprPtr& a : e->args) see(a);
    for (const auto& kw : e->kwargs) see(kw.second);
    e->depth = d + 1;
    if (e->depth > kMaxNesting) {
      return Fail(
          Cat("expression nested deeper than ", kMaxNesting, " levels"));
    }
    return e;
  }

  // ---- statements ----------------------------------------------------------

  absl::StatusOr<Body> Subparse(Names end_tokens) {
    Body body;
    const bool pushed = end_tokens.size() > 0;
    if (pushed) end_stack_.emplace_back(end_tokens);
    while (!Is(Tok::kEof)) {
      if (Is(Tok::kData)) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->line = cur().line;
        s->text = cur().text;
        body.push_back(std::move(s));
        Next();
      } else if (Is(Tok::kVarBegin)) {
        const int line = cur().line;
        Next();
        absl::StatusOr<ExprPtr> e = ParseTuple(false, true, {}, false);
        if (!e.ok()) return e.status();
        if (absl::Status s = Expect(Tok::kVarEnd); !s.ok()) return s;
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = line;
        s->expr = *std::move(e);
        body.push_back(std::move(s));
      } else if (Is(Tok::kBlockBegin)) {
        Next();
        if (pushed && IsNameIn(end_tokens)) {
          end_stack_.pop_back();
          return body;
        }
        absl::StatusOr<Body> stmts = ParseStatement();
        if (!stmts.ok()) return stmts.status();
        for (StmtPtr& s : *stmts) body.push_back(std::move(s));
        if (absl::Status s = Expect(Tok::kBlockEnd); !s.ok()) return s;
      } else {
        return Fail(Cat("unexpected '", DescribeToken(cur()), "'"));
      }
    }
    if (pushed) end_stack_.pop_back();
    return body;
  }

  absl::StatusOr<Body> ParseStatements(Names end_tokens, bool drop_needle) {
    Skip(Tok::kColon);
    if (absl::Status s = Expect(Tok::kBlockEnd); !s.ok()) return s;
    absl::StatusOr<Body> body = Subparse(end_tokens);
    if (!body.ok()) return body.status();
    if (Is(Tok::kEof)) return FailEof(end_tokens);
    if (drop_needle) Next();
    return body;
  }

  StmtPtr MakeStmt(StmtKind kind, int line) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = line;
    return s;
  }

  // One tag's statements (several only for {% print a, b %}).
  absl::StatusOr<Body> ParseStatement() {
    Nest nest(this);
    if (absl::Status s = CheckDepth(); !s.ok()) return s;
    if (!Is(Tok::kName)) return Fail("tag name expected");
    const std::string tag = cur().text;
    tag_stack_.push_back(tag);
    absl::StatusOr<Body> result = ParseTag(tag);
    tag_stack_.pop_back();
    return result;
  }

  absl::StatusOr<Body> One(absl::StatusOr<StmtPtr> s) {
    if (!s.ok()) return s.status();
    Body b;
    b.push_back(*std::move(s));
    return b;
  }

  absl::StatusOr<Body> ParseTag(const std::string& tag) {
    if (tag == "for") return One(ParseFor());
    if (tag == "if") return One(ParseIf());
    if (tag == "set") return One(ParseSet());
    if (tag == "macro") return One(ParseMacro());
    if (tag == "call") return One(ParseCallBlock());
    if (tag == "filter") return One(ParseFilterBlock());
    if (tag == "with") return One(ParseWith());
    if (tag == "generation") {
      auto s = MakeStmt(StmtKind::kGeneration, cur().line);
      Next();
      absl::StatusOr<Body> body = ParseStatements({"endgeneration"}, true);
      if (!body.ok()) return body.status();
      s->body = *std::move(body);
      return One(std::move(s));
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) {
        return Fail(Cat("'", tag, "' outside loop"));
      }
      auto s = MakeStmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue,
                        cur().line);
      Next();
      return One(std::move(s));
    }
    if (tag == "print") {
      const int line = cur().line;
      Next();
      Body body;
      while (!Is(Tok::kBlockEnd)) {
        if (!body.empty()) {
          if (absl::Status s = Expect(Tok::kComma); !s.ok()) return s;
        }
        absl::StatusOr<ExprPtr> e = ParseExpression(true);
        if (!e.ok()) return e.status();
        auto s = MakeStmt(StmtKind::kOutput, line);
        s->expr = *std::move(e);
        body.push_back(std::move(s));
      }
      return body;
    }
    if (tag == "block") return One(ParseBlock());
    if (tag == "extends" || tag == "include" || tag == "import" ||
        tag == "from" || tag == "autoescape") {
      return Fail(Cat("tag '", tag, "' is not supported"));
    }
    // Unknown tag: maybe a misplaced end tag.
    std::string msg = Cat("unknown tag '", tag, "'");
    if (!end_stack_.empty()) {
      std::vector<std::string> looking;
      for (std::string_view n : end_stack_.back()) {
        looking.push_back(Cat("'", n, "'"));
      }
      CatTo(&msg, ", expected ", absl::StrJoin(looking, " or "));
    }
    if (tag_stack_.size() > 1) {
      CatTo(&msg, " (the innermost open block is '",
            tag_stack_[tag_stack_.size() - 2], "')");
    }
    return Fail(msg);
  }

  absl::StatusOr<StmtPtr> ParseFor() {
    auto s = MakeStmt(StmtKind::kFor, cur().line);
    Next();
    absl::StatusOr<ExprPtr> target =
        ParseAssignTarget(true, false, {"in"}, false);
    if (!target.ok()) return target.status();
    s->target = *std::move(target);
    if (absl::Status st = ExpectName("in"); !st.ok()) return st;
    absl::StatusOr<ExprPtr> iter =
        ParseTuple(false, false, {"recursive"}, false);
    if (!iter.ok()) return iter.status();
    s->expr = *std::move(iter);
    if (SkipName("if")) {
      absl::StatusOr<ExprPtr> cond = ParseExpression(true);
      if (!cond.ok()) return cond.status();
      s->cond = *std::move(cond);
    }
    s->recursive = SkipName("recursive");
    const bool soft = soft_;
    soft_ = false;
    ++loop_depth_;
    absl::StatusOr<Body> body = ParseStatements({"endfor", "else"}, false);
    --loop_depth_;
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    if (IsName("endfor")) {
      Next();
    } else {
      Next();  // else
      absl::StatusOr<Body> else_body = ParseStatements({"endfor"}, true);
      if (!else_body.ok()) return else_body.status();
      s->else_body = *std::move(else_body);
    }
    soft_ = soft;
    return s;
  }

  absl::StatusOr<StmtPtr> ParseIf() {
    auto s = MakeStmt(StmtKind::kIf, cur().line);
    Next();
    const bool soft = soft_;
    soft_ = true;
    while (true) {
      absl::StatusOr<ExprPtr> cond = ParseTuple(false, false, {}, false);
      if (!cond.ok()) return cond.status();
      absl::StatusOr<Body> body =
          ParseStatements({"elif", "else", "endif"}, false);
      if (!body.ok()) return body.status();
      s->branches.emplace_back(*std::move(cond), *std::move(body));
      if (SkipName("elif")) continue;
      if (SkipName("else")) {
        absl::StatusOr<Body> else_body = ParseStatements({"endif"}, true);
        if (!else_body.ok()) return else_body.status();
        s->else_body = *std::move(else_body);
      } else {
        Next();  // endif
      }
      break;
    }
    soft_ = soft;
    return s;
  }

  absl::StatusOr<StmtPtr> ParseSet() {
    const int line = cur().line;
    Next();
    absl::StatusOr<ExprPtr> target = ParseAssignTarget(true, false, {}, true);
    if (!target.ok()) return target.status();
    if (Skip(Tok::kAssign)) {
      auto s = MakeStmt(StmtKind::kSet, line);
      s->target = *std::move(target);
      absl::StatusOr<ExprPtr> value = ParseTuple(false, true, {}, false);
      if (!value.ok()) return value.status();
      s->expr = *std::move(value);
      return s;
    }
    auto s = MakeStmt(StmtKind::kSetBlock, line);
    s->target = *std::move(target);
    if (Is(Tok::kPipe)) {
      absl::StatusOr<ExprPtr> filter = ParseFilter(nullptr, false);
      if (!filter.ok()) return filter.status();
      s->expr = *std::move(filter);
    }
    const bool soft = soft_;
    soft_ = false;
    absl::StatusOr<Body> body = ParseStatements({"endset"}, true);
    soft_ = soft;
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    return s;
  }

  absl::Status ParseSignature(MacroSignature* sig) {
    if (absl::Status s = Expect(Tok::kLParen); !s.ok()) return s;
    while (!Is(Tok::kRParen)) {
      if (!sig->params.empty()) {
        if (absl::Status s = Expect(Tok::kComma); !s.ok()) return s;
      }
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      sig->params.push_back(*std::move(name));
      if (Skip(Tok::kAssign)) {
        absl::StatusOr<ExprPtr> d = ParseExpression(true);
        if (!d.ok()) return d.status();
        sig->defaults.push_back(*std::move(d));
      } else if (!sig->defaults.empty()) {
        return Fail("non-default argument follows default argument");
      }
    }
    return Expect(Tok::kRParen);
  }

  // A macro's (or call block's) body, with what it refers to recorded in
  // `sig` (varargs, kwargs, caller) and loop controls reset.
  absl::StatusOr<Body> ParseMacroBody(MacroSignature* sig,
                                      std::string_view end_tag) {
    const int loops = loop_depth_;
    const bool soft = soft_;
    loop_depth_ = 0;
    soft_ = false;
    macro_stack_.push_back(sig);
    absl::StatusOr<Body> body = ParseStatements({end_tag}, true);
    macro_stack_.pop_back();
    loop_depth_ = loops;
    soft_ = soft;
    return body;
  }

  absl::StatusOr<StmtPtr> ParseMacro() {
    auto s = MakeStmt(StmtKind::kMacro, cur().line);
    Next();
    auto sig = std::make_shared<MacroSignature>();
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    sig->name = *std::move(name);
    if (absl::Status st = ParseSignature(sig.get()); !st.ok()) return st;
    absl::StatusOr<Body> body = ParseMacroBody(sig.get(), "endmacro");
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    s->signature = std::move(sig);
    return s;
  }

  absl::StatusOr<StmtPtr> ParseCallBlock() {
    auto s = MakeStmt(StmtKind::kCallBlock, cur().line);
    Next();
    auto sig = std::make_shared<MacroSignature>();
    sig->name = "caller";
    if (Is(Tok::kLParen)) {
      if (absl::Status st = ParseSignature(sig.get()); !st.ok()) return st;
    }
    absl::StatusOr<ExprPtr> call = ParseExpression(true);
    if (!call.ok()) return call.status();
    if ((*call)->kind != ExprKind::kCall) {
      return Fail("expected call");
    }
    s->expr = *std::move(call);
    absl::StatusOr<Body> body = ParseMacroBody(sig.get(), "endcall");
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    s->signature = std::move(sig);
    return s;
  }

  // {% block %} without {% extends %}: its body, rendered where it stands.
  absl::StatusOr<StmtPtr> ParseBlock() {
    auto s = MakeStmt(StmtKind::kBlock, cur().line);
    Next();
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name.status();
    if (std::find(block_names_.begin(), block_names_.end(), *name) !=
        block_names_.end()) {
      return Fail(Cat("block '", *name, "' defined twice"));
    }
    block_names_.push_back(*name);
    s->scoped = SkipName("scoped");
    SkipName("required");
    if (Is(Tok::kSub)) {
      return Fail("block names may not contain hyphens");
    }
    const int loops = loop_depth_;
    const bool soft = soft_;
    loop_depth_ = 0;
    soft_ = false;
    absl::StatusOr<Body> body = ParseStatements({"endblock"}, true);
    loop_depth_ = loops;
    soft_ = soft;
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    SkipName(*name);
    return s;
  }

  absl::StatusOr<StmtPtr> ParseFilterBlock() {
    auto s = MakeStmt(StmtKind::kFilterBlock, cur().line);
    Next();
    absl::StatusOr<ExprPtr> filter = ParseFilter(nullptr, true);
    if (!filter.ok()) return filter.status();
    s->expr = *std::move(filter);
    const bool soft = soft_;
    soft_ = false;
    absl::StatusOr<Body> body = ParseStatements({"endfilter"}, true);
    soft_ = soft;
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    return s;
  }

  absl::StatusOr<StmtPtr> ParseWith() {
    auto s = MakeStmt(StmtKind::kWith, cur().line);
    Next();
    while (!Is(Tok::kBlockEnd)) {
      if (!s->assignments.empty()) {
        if (absl::Status st = Expect(Tok::kComma); !st.ok()) return st;
      }
      absl::StatusOr<ExprPtr> target =
          ParseAssignTarget(true, false, {}, false);
      if (!target.ok()) return target.status();
      if (absl::Status st = Expect(Tok::kAssign); !st.ok()) return st;
      absl::StatusOr<ExprPtr> value = ParseExpression(true);
      if (!value.ok()) return value.status();
      s->assignments.emplace_back(*std::move(target), *std::move(value));
    }
    const bool soft = soft_;
    soft_ = false;
    absl::StatusOr<Body> body = ParseStatements({"endwith"}, true);
    soft_ = soft;
    if (!body.ok()) return body.status();
    s->body = *std::move(body);
    return s;
  }

  static bool CanAssign(const Expr& e) {
    if (e.kind == ExprKind::kName || e.kind == ExprKind::kNsRef) return true;
    if (e.kind != ExprKind::kTuple) return false;
    for (const ExprPtr& a : e.args) {
      if (!CanAssign(*a)) return false;
    }
    return true;
  }

  absl::StatusOr<ExprPtr> ParseAssignTarget(bool with_tuple, bool name_only,
                                            Names extra_end,
                                            bool with_namespace) {
    const Token start = cur();
    ExprPtr target;
    if (with_namespace && look().type == Tok::kDot) {
      absl::StatusOr<std::string> ns = ExpectName();
      if (!ns.ok()) return ns.status();
      Next();  // .
      absl::StatusOr<std::string> attr = ExpectName();
      if (!attr.ok()) return attr.status();
      target = Make(ExprKind::kNsRef, start.line);
      target->name = *std::move(ns);
      target->attr = *std::move(attr);
      return target;
    }
    if (name_only) {
      absl::StatusOr<std::string> name = ExpectName();
      if (!name.ok()) return name.status();
      target = Make(ExprKind::kName, start.line);
      target->name = *std::move(name);
      return target;
    }
    absl::StatusOr<ExprPtr> t =
        with_tuple ? ParseTuple(true, true, extra_end, false) : ParsePrimary();
    if (!t.ok()) return t.status();
    if (!CanAssign(**t)) {
      return Fail(start, "can't assign to this expression");
    }
    return t;
  }

  // ---- expressions ---------------------------------------------------------

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    Nest nest(this);
    if (absl::Status s = CheckDepth(); !s.ok()) return s;
    const int line = cur().line;
    absl::StatusOr<ExprPtr> expr1 = ParseOr();
    if (!expr1.ok()) return expr1;
    ExprPtr result = *std::move(expr1);
    while (SkipName("if")) {
      const bool soft = soft_;
      soft_ = true;
      absl::StatusOr<ExprPtr> expr2 = ParseOr();
      if (!expr2.ok()) return expr2;
      ExprPtr e = Make(ExprKind::kCondExpr, line);
      e->lhs = std::move(result);
      e->args.push_back(*std::move(expr2));
      if (SkipName("else")) {
        absl::StatusOr<ExprPtr> expr3 = ParseCondExpr();
        if (!expr3.ok()) return expr3;
        e->rhs = *std::move(expr3);
      }
      soft_ = soft;
      absl::StatusOr<ExprPtr> sealed = Seal(std::move(e));
      if (!sealed.ok()) return sealed;
      result = *std::move(sealed);
    }
    return result;
  }

  absl::StatusOr<ExprPtr> Binary(ExprKind kind, Tok op, int line, ExprPtr lhs,
                                 ExprPtr rhs) {
    ExprPtr e = Make(kind, line);
    e->op = op;
    e->lhs = std::move(lhs);
    e->rhs = std::move(rhs);
    return Seal(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    const int line = cur().line;
    absl::StatusOr<ExprPtr> left = ParseAnd();
    while (left.ok() && SkipName("or")) {
      absl::StatusOr<ExprPtr> right = ParseAnd();
      if (!right.ok()) return right;
      left = Binary(ExprKind::kOr, Tok::kEof, line, *std::move(left),
                    *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    const int line = cur().line;
    absl::StatusOr<ExprPtr> left = ParseNot();
    while (left.ok() && SkipName("and")) {
      absl::StatusOr<ExprPtr> right = ParseNot();
      if (!right.ok()) return right;
      left = Binary(ExprKind::kAnd, Tok::kEof, line, *std::move(left),
                    *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      Nest nest(this);
      if (absl::Status s = CheckDepth(); !s.ok()) return s;
      const int line = cur().line;
      Next();
      absl::StatusOr<ExprPtr> operand = ParseNot();
      if (!operand.ok()) return operand;
      ExprPtr e = Make(ExprKind::kNot, line);
      e->lhs = *std::move(operand);
      return Seal(std::move(e));
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = cur().line;
    absl::StatusOr<ExprPtr> first = ParseMath1();
    if (!first.ok()) return first;
    ExprPtr e;
    while (true) {
      CmpOp op;
      switch (cur().type) {
        case Tok::kEq:
          op = CmpOp::kEq;
          break;
        case Tok::kNe:
          op = CmpOp::kNe;
          break;
        case Tok::kLt:
          op = CmpOp::kLt;
          break;
        case Tok::kLe:
          op = CmpOp::kLe;
          break;
        case Tok::kGt:
          op = CmpOp::kGt;
          break;
        case Tok::kGe:
          op = CmpOp::kGe;
          break;
        default:
          if (IsName("in")) {
            op = CmpOp::kIn;
          } else if (IsName("not") && look().type == Tok::kName &&
                     look().text == "in") {
            op = CmpOp::kNotIn;
            Next();
          } else {
            op = CmpOp::kEq;
            if (e == nullptr) return first;
            return Seal(std::move(e));
          }
      }
      Next();
      absl::StatusOr<ExprPtr> operand = ParseMath1();
      if (!operand.ok()) return operand;
      if (e == nullptr) {
        e = Make(ExprKind::kCompare, line);
        e->lhs = *std::move(first);
      }
      e->ops.push_back(op);
      e->args.push_back(*std::move(operand));
    }
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    const int line = cur().line;
    absl::StatusOr<ExprPtr> left = ParseConcat();
    while (left.ok() && (Is(Tok::kAdd) || Is(Tok::kSub))) {
      const Tok op = cur().type;
      Next();
      absl::StatusOr<ExprPtr> right = ParseConcat();
      if (!right.ok()) return right;
      left = Binary(ExprKind::kBinary, op, line, *std::move(left),
                    *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    const int line = cur().line;
    absl::StatusOr<ExprPtr> first = ParseMath2();
    if (!first.ok() || !Is(Tok::kTilde)) return first;
    ExprPtr e = Make(ExprKind::kConcat, line);
    e->args.push_back(*std::move(first));
    while (Skip(Tok::kTilde)) {
      absl::StatusOr<ExprPtr> next = ParseMath2();
      if (!next.ok()) return next;
      e->args.push_back(*std::move(next));
    }
    return Seal(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    const int line = cur().line;
    absl::StatusOr<ExprPtr> left = ParsePow();
    while (left.ok() && (Is(Tok::kMul) || Is(Tok::kDiv) || Is(Tok::kFloorDiv) ||
                         Is(Tok::kMod))) {
      const Tok op = cur().type;
      Next();
      absl::StatusOr<ExprPtr> right = ParsePow();
      if (!right.ok()) return right;
      left = Binary(ExprKind::kBinary, op, line, *std::move(left),
                    *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    const int line = cur().line;
    absl::StatusOr<ExprPtr> left = ParseUnary(true);
    while (left.ok() && Skip(Tok::kPow)) {
      absl::StatusOr<ExprPtr> right = ParseUnary(true);
      if (!right.ok()) return right;
      left = Binary(ExprKind::kBinary, Tok::kPow, line, *std::move(left),
                    *std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Nest nest(this);
    if (absl::Status s = CheckDepth(); !s.ok()) return s;
    const int line = cur().line;
    absl::StatusOr<ExprPtr> node;
    if (Is(Tok::kSub) || Is(Tok::kAdd)) {
      const ExprKind kind = Is(Tok::kSub) ? ExprKind::kNeg : ExprKind::kPos;
      Next();
      absl::StatusOr<ExprPtr> operand = ParseUnary(false);
      if (!operand.ok()) return operand;
      ExprPtr e = Make(kind, line);
      e->lhs = *std::move(operand);
      node = Seal(std::move(e));
    } else {
      node = ParsePrimary();
    }
    if (!node.ok()) return node;
    node = ParsePostfix(*std::move(node));
    if (node.ok() && with_filter) node = ParseFilterExpr(*std::move(node));
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    Nest nest(this);
    if (absl::Status s = CheckDepth(); !s.ok()) return s;
    const Token& t = cur();
    switch (t.type) {
      case Tok::kName: {
        ExprPtr e = Make(ExprKind::kLiteral, t.line);
        if (t.text == "true" || t.text == "True") {
          e->value = Value::Bool(true);
        } else if (t.text == "false" || t.text == "False") {
          e->value = Value::Bool(false);
        } else if (t.text == "none" || t.text == "None") {
          e->value = Value::None();
        } else {
          e->kind = ExprKind::kName;
          e->name = t.text;
          if (!macro_stack_.empty()) {
            MacroSignature* sig = macro_stack_.back();
            if (t.text == "varargs") sig->uses_varargs = true;
            if (t.text == "kwargs") sig->uses_kwargs = true;
            if (t.text == "caller") sig->uses_caller = true;
          }
        }
        Next();
        return e;
      }
      case Tok::kString: {
        ExprPtr e = Make(ExprKind::kLiteral, t.line);
        std::string s;
        while (Is(Tok::kString)) {
          s += cur().text;
          Next();
        }
        e->value = Value::Literal(std::move(s));
        return e;
      }
      case Tok::kInt:
      case Tok::kFloat: {
        ExprPtr e = Make(ExprKind::kLiteral, t.line);
        e->value = t.type == Tok::kInt ? Value::Int(t.int_value)
                                       : Value::Float(t.float_value);
        Next();
        return e;
      }
      case Tok::kLParen: {
        Next();
        absl::StatusOr<ExprPtr> e = ParseTuple(false, true, {}, true);
        if (!e.ok()) return e;
        if (absl::Status s = Expect(Tok::kRParen); !s.ok()) return s;
        return e;
      }
      case Tok::kLBracket:
      case Tok::kLBrace: {
        const bool dict = t.type == Tok::kLBrace;
        const Tok close = dict ? Tok::kRBrace : Tok::kRBracket;
        ExprPtr e = Make(dict ? ExprKind::kDict : ExprKind::kList, t.line);
        Next();
        while (!Is(close)) {
          if (!e->args.empty()) {
            if (absl::Status s = Expect(Tok::kComma); !s.ok()) return s;
          }
          if (Is(close)) break;
          absl::StatusOr<ExprPtr> item = ParseExpression(true);
          if (!item.ok()) return item;
          e->args.push_back(*std::move(item));
          if (dict) {
            if (absl::Status s = Expect(Tok::kColon); !s.ok()) return s;
            absl::StatusOr<ExprPtr> value = ParseExpression(true);
            if (!value.ok()) return value;
            e->args.push_back(*std::move(value));
          }
        }
        if (absl::Status s = Expect(close); !s.ok()) return s;
        return Seal(std::move(e));
      }
      case Tok::kEof:
        return FailEof({});
      default:
        return Fail(Cat("unexpected '", DescribeToken(t), "'"));
    }
  }

  bool IsTupleEnd(Names extra_end) const {
    if (Is(Tok::kVarEnd) || Is(Tok::kBlockEnd) || Is(Tok::kRParen)) return true;
    return IsNameIn(extra_end);
  }

  // simplified: names and literals only (assignment targets).
  absl::StatusOr<ExprPtr> ParseTuple(bool simplified, bool with_condexpr,
                                     Names extra_end,
                                     bool explicit_parentheses) {
    const int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) {
        if (absl::Status s = Expect(Tok::kComma); !s.ok()) return s;
      }
      if (IsTupleEnd(extra_end)) break;
      absl::StatusOr<ExprPtr> e =
          simplified ? ParsePrimary() : ParseExpression(with_condexpr);
      if (!e.ok()) return e;
      args.push_back(*std::move(e));
      if (Is(Tok::kComma)) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parentheses) {
        if (Is(Tok::kEof)) return FailEof({});
        return Fail(
            Cat("expected an expression, got '", DescribeToken(cur()), "'"));
      }
    }
    ExprPtr e = Make(ExprKind::kTuple, line);
    e->args = std::move(args);
    return Seal(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      absl::StatusOr<ExprPtr> next;
      if (Is(Tok::kDot) || Is(Tok::kLBracket)) {
        next = ParseSubscript(std::move(node));
      } else if (Is(Tok::kLParen)) {
        next = ParseCall(std::move(node));
      } else {
        return node;
      }
      if (!next.ok()) return next;
      node = *std::move(next);
    }
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      absl::StatusOr<ExprPtr> next;
      if (Is(Tok::kPipe)) {
        next = ParseFilter(std::move(node), false);
      } else if (IsName("is")) {
        next = ParseTest(std::move(node));
      } else if (Is(Tok::kLParen)) {
        next = ParseCall(std::move(node));
      } else {
        return node;
      }
      if (!next.ok()) return next;
      node = *std::move(next);
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node) {
    const Token t = cur();
    Next();
    if (t.type == Tok::kDot) {
      const Token attr = cur();
      Next();
      if (attr.type == Tok::kName) {
        ExprPtr e = Make(ExprKind::kGetAttr, t.line);
        e->lhs = std::move(node);
        e->name = attr.text;
        return Seal(std::move(e));
      }
      if (attr.type != Tok::kInt) return Fail(attr, "expected name or number");
      ExprPtr index = Make(ExprKind::kLiteral, attr.line);
      index->value = Value::Int(attr.int_value);
      ExprPtr e = Make(ExprKind::kGetItem, t.line);
      e->lhs = std::move(node);
      e->rhs = std::move(index);
      return Seal(std::move(e));
    }
    std::vector<ExprPtr> args;
    while (!Is(Tok::kRBracket)) {
      if (!args.empty()) {
        if (absl::Status s = Expect(Tok::kComma); !s.ok()) return s;
      }
      absl::StatusOr<ExprPtr> a = ParseSubscribed();
      if (!a.ok()) return a;
      args.push_back(*std::move(a));
    }
    if (absl::Status s = Expect(Tok::kRBracket); !s.ok()) return s;
    ExprPtr e = Make(ExprKind::kGetItem, t.line);
    e->lhs = std::move(node);
    if (args.size() == 1) {
      e->rhs = std::move(args[0]);
    } else {
      ExprPtr tuple = Make(ExprKind::kTuple, t.line);
      tuple->args = std::move(args);
      absl::StatusOr<ExprPtr> sealed = Seal(std::move(tuple));
      if (!sealed.ok()) return sealed;
      e->rhs = *std::move(sealed);
    }
    return Seal(std::move(e));
  }

  absl::StatusOr<ExprPtr> ParseSubscribed() {
    const int line = cur().line;
    ExprPtr slice = Make(ExprKind::kSlice, line);
    if (Skip(Tok::kColon)) {
      slice->args.push_back(nullptr);
    } else {
      absl::StatusOr<ExprPtr> node = ParseExpression(true);
      if (!node.ok() || !Is(Tok::kColon)) return node;
      Next();
      slice->args.push_back(*std::move(node));
    }
    auto optional_expr = [this]() -> absl::StatusOr<ExprPtr> {
      if (Is(Tok::kRBracket) || Is(Tok::kComma)) return ExprPtr();
      return ParseExpression(true);
    };
    if (Is(Tok::kColon)) {
      slice->args.push_back(nullptr);
    } else {
      absl::StatusOr<ExprPtr> stop = optional_expr();
      if (!stop.ok()) return stop;
      slice->args.push_back(*std::move(stop));
    }
    if (Skip(Tok::kColon)) {
      absl::StatusOr<ExprPtr> step = optional_expr();
      if (!step.ok()) return step;
      slice->args.push_back(*std::move(step));
    } else {
      slice->args.push_back(nullptr);
    }
    return Seal(std::move(slice));
  }

  absl::Status ParseCallArgs(Expr* e) {
    const Token open = cur();
    if (absl::Status s = Expect(Tok::kLParen); !s.ok()) return s;
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      return ok ? absl::OkStatus()
                : Fail(open, "invalid syntax for function call expression");
    };
    while (!Is(Tok::kRParen)) {
      if (require_comma) {
        if (absl::Status s = Expect(Tok::kComma); !s.ok()) return s;
        if (Is(Tok::kRParen)) break;
      }
      if (Is(Tok::kMul)) {
        if (absl::Status s = ensure(!e->dyn_args && !e->dyn_kwargs); !s.ok()) {
          return s;
        }
        Next();
        absl::StatusOr<ExprPtr> a = ParseExpression(true);
        if (!a.ok()) return a.status();
        e->dyn_args = *std::move(a);
      } else if (Is(Tok::kPow)) {
        if (absl::Status s = ensure(!e->dyn_kwargs); !s.ok()) return s;
        Next();
        absl::StatusOr<ExprPtr> a = ParseExpression(true);
        if (!a.ok()) return a.status();
        e->dyn_kwargs = *std::move(a);
      } else if (Is(Tok::kName) && look().type == Tok::kAssign) {
        if (absl::Status s = ensure(!e->dyn_kwargs); !s.ok()) return s;
        std::string key = cur().text;
        Next();
        Next();
        absl::StatusOr<ExprPtr> a = ParseExpression(true);
        if (!a.ok()) return a.status();
        e->kwargs.emplace_back(std::move(key), *std::move(a));
      } else {
        if (absl::Status s =
                ensure(!e->dyn_args && !e->dyn_kwargs && e->kwargs.empty());
            !s.ok()) {
          return s;
        }
        absl::StatusOr<ExprPtr> a = ParseExpression(true);
        if (!a.ok()) return a.status();
        e->args.push_back(*std::move(a));
      }
      require_comma = true;
    }
    return Expect(Tok::kRParen);
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr node) {
    ExprPtr e = Make(ExprKind::kCall, cur().line);
    e->lhs = std::move(node);
    if (absl::Status s = ParseCallArgs(e.get()); !s.ok()) return s;
    return Seal(std::move(e));
  }

  absl::StatusOr<std::string> DottedName() {
    absl::StatusOr<std::string> name = ExpectName();
    if (!name.ok()) return name;
    while (Skip(Tok::kDot)) {
      absl::StatusOr<std::string> part = ExpectName();
      if (!part.ok()) return part;
      CatTo(&*name, ".", *part);
    }
    return name;
  }

  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr node, bool start_inline) {
    while (Is(Tok::kPipe) || start_inline) {
      if (!start_inline) Next();
      start_inline = false;
      const Token t = cur();
      absl::StatusOr<std::string> name = DottedName();
      if (!name.ok()) return name.status();
      if (!soft_ && !Contains(kFilterNames, *name)) {
        return Fail(t, Cat("no filter named '", *name, "'"));
      }
      ExprPtr e = Make(ExprKind::kFilter, t.line);
      e->lhs = std::move(node);
      e->name = *std::move(name);
      if (Is(Tok::kLParen)) {
        if (absl::Status s = ParseCallArgs(e.get()); !s.ok()) return s;
      }
      absl::StatusOr<ExprPtr> sealed = Seal(std::move(e));
      if (!sealed.ok()) return sealed;
      node = *std::move(sealed);
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParseTest(ExprPtr node) {
    const Token is = cur();
    Next();
    const bool negated = SkipName("not");
    const Token t = cur();
    absl::StatusOr<std::string> name = DottedName();
    if (!name.ok()) return name.status();
    if (!soft_ && !Contains(kTestNames, *name)) {
      return Fail(t, Cat("no test named '", *name, "'"));
    }
    ExprPtr e = Make(ExprKind::kTest, is.line);
    e->lhs = std::move(node);
    e->name = *std::move(name);
    if (Is(Tok::kLParen)) {
      if (absl::Status s = ParseCallArgs(e.get()); !s.ok()) return s;
    } else if ((Is(Tok::kName) || Is(Tok::kString) || Is(Tok::kInt) ||
                Is(Tok::kFloat) || Is(Tok::kLParen) || Is(Tok::kLBracket) ||
                Is(Tok::kLBrace)) &&
               !IsNameIn({"else", "or", "and"})) {
      if (IsName("is")) return Fail("you cannot chain multiple tests with is");
      absl::StatusOr<ExprPtr> arg = ParsePrimary();
      if (!arg.ok()) return arg;
      arg = ParsePostfix(*std::move(arg));
      if (!arg.ok()) return arg;
      e->args.push_back(*std::move(arg));
    }
    absl::StatusOr<ExprPtr> sealed = Seal(std::move(e));
    if (!sealed.ok() || !negated) return sealed;
    ExprPtr n = Make(ExprKind::kNot, is.line);
    n->lhs = *std::move(sealed);
    return Seal(std::move(n));
  }

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool soft_ = false;  // inside {% if %} or `x if y`: unknown filters wait
  std::vector<std::string> tag_stack_;
  std::vector<std::vector<std::string_view>> end_stack_;
  std::vector<MacroSignature*> macro_stack_;
  std::vector<std::string> block_names_;
};

}  // namespace

bool IsFilterName(std::string_view name) {
  return Contains(kFilterNames, name);
}
bool IsTestName(std::string_view name) { return Contains(kTestNames, name); }

absl::StatusOr<std::unique_ptr<Node>> ParseTemplate(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return tokens.status();
  return Parser(*std::move(tokens)).Parse();
}

}  // namespace kvserve::jinja
