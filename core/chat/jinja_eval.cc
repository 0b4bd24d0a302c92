#include "core/chat/jinja_eval.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace kvserve::jinja {
namespace {

// Evaluation recursion (expressions, statements, macro bodies) beyond which
// a render fails instead of risking the C++ stack: the parser bounds one
// template's nesting; this bounds what macro recursion multiplies it to.
constexpr int kMaxEvalNesting = 1500;
// Builtin work allowed per step of max_steps.
constexpr int64_t kWorkPerStep = 32;

class NestingGuard {
 public:
  explicit NestingGuard(int* n) : n_(n) { ++*n_; }
  ~NestingGuard() { --*n_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  int* n_;
};

absl::Status NestingError() {
  return TypeError(Cat("evaluation nested deeper than ", kMaxEvalNesting,
                       " levels (recursion)"));
}

// {% macro %} and the `caller` of {% call %}.
class MacroObject : public Callable {
 public:
  MacroObject(const Stmt* stmt, std::weak_ptr<Frame> closure)
      : stmt_(stmt), closure_(std::move(closure)) {}
  std::string_view type_name() const override { return "Macro"; }
  std::string Repr(size_t /*limit*/) const override {
    return Cat("<Macro '", stmt_->signature->name, "'>");
  }
  absl::StatusOr<Value> Call(Interp& in, CallArgs args) override {
    std::shared_ptr<Frame> closure = closure_.lock();
    if (closure == nullptr) {
      return TypeError(Cat("macro '", stmt_->signature->name,
                           "' called after its scope ended"));
    }
    return in.CallMacro(*stmt_, closure, std::move(args));
  }

 private:
  const Stmt* stmt_;
  // Weak: the frame holds the macro, and macros only run during the render.
  std::weak_ptr<Frame> closure_;
};

}  // namespace

// ---- loop ------------------------------------------------------------------

// jinja2's LoopContext over a (possibly filtered) sequence. The filter
// (`for x in xs if cond`) runs lazily, as jinja2's generator does: `last`
// and `nextitem` look one item ahead, `length` consumes the rest.
class LoopObject : public Callable {
 public:
  LoopObject(Interp* in, const Stmt* stmt, std::shared_ptr<Frame> outer,
             std::vector<Value> items, int depth0)
      : in_(in),
        stmt_(stmt),
        outer_(std::move(outer)),
        items_(std::move(items)),
        depth0_(depth0) {}

  std::string_view type_name() const override { return "LoopContext"; }
  std::string Repr(size_t /*limit*/) const override {
    const std::string length = length_.has_value()      ? Cat(*length_)
                               : stmt_->cond == nullptr ? Cat(items_.size())
                                                        : "?";
    return Cat("<LoopContext ", index0_ + 1, "/", length, ">");
  }

  const Value& current() const { return current_; }

  // Moves to the next item: false at the end.
  absl::StatusOr<bool> Advance() {
    std::optional<Value> next;
    if (after_.has_value()) {
      next = std::move(*after_);
      after_.reset();
    } else {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(next, Pull());
    }
    peeked_end_ = false;
    if (!next.has_value()) return false;
    ++index0_;
    before_ = std::move(current_);
    current_ = *std::move(next);
    return true;
  }

  absl::StatusOr<Value> Attr(std::string_view name) {
    if (name == "index0") return Value::Int(index0_);
    if (name == "index") return Value::Int(index0_ + 1);
    if (name == "first") return Value::Bool(index0_ == 0);
    if (name == "depth") return Value::Int(depth0_ + 1);
    if (name == "depth0") return Value::Int(depth0_);
    if (name == "length" || name == "revindex" || name == "revindex0") {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const int64_t length, Length());
      if (name == "length") return Value::Int(length);
      if (name == "revindex") return Value::Int(length - index0_);
      return Value::Int(length - index0_ - 1);
    }
    if (name == "last" || name == "nextitem") {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const bool more, Peek());
      if (name == "last") return Value::Bool(!more);
      if (!more) return Value::Undefined("there is no next item");
      return *after_;
    }
    if (name == "previtem") {
      if (index0_ == 0) return Value::Undefined("there is no previous item");
      return before_;
    }
    if (name == "cycle" || name == "changed") {
      return *BoundMethod(Value::MakeObject(self_.lock()), name);
    }
    return Value::Undefined(
        Cat("'LoopContext object' has no attribute '", name, "'"));
  }

  absl::StatusOr<Value> Cycle(const CallArgs& args) {
    if (args.pos.empty()) return TypeError("no items for cycling given");
    return args.pos[static_cast<size_t>(index0_) % args.pos.size()];
  }

  Value Changed(const CallArgs& args) {
    Value values = Value::Seq(args.pos, SeqKind::kTuple);
    if (last_changed_.has_value() && Equal(*last_changed_, values)) {
      return Value::Bool(false);
    }
    last_changed_ = std::move(values);
    return Value::Bool(true);
  }

  // loop(items) in a `recursive` loop.
  absl::StatusOr<Value> Call(Interp& in, CallArgs args) override {
    if (!stmt_->recursive) {
      return TypeError(
          "The loop must have the 'recursive' marker to be called "
          "recursively.");
    }
    if (args.pos.size() != 1 || !args.kw.empty()) {
      return TypeError("loop() takes exactly one argument");
    }
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items,
                                   in.Iterate(args.pos[0]));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(
        SpannedText text,
        in.RunLoop(*stmt_, std::move(items), outer_, depth0_ + 1));
    return Value::Spanned(std::move(text));
  }

  void set_self(const std::shared_ptr<LoopObject>& self) { self_ = self; }

 private:
  // The next item passing the filter, or nullopt.
  absl::StatusOr<std::optional<Value>> Pull() {
    if (!rest_.empty()) {
      Value v = std::move(rest_.front());
      rest_.pop_front();
      return std::optional<Value>(std::move(v));
    }
    while (next_ < items_.size()) {
      const Value& item = items_[next_++];
      if (stmt_->cond == nullptr) return std::optional<Value>(item);
      auto frame = std::make_shared<Frame>(outer_);
      if (absl::Status s = in_->AssignTarget(*stmt_->target, item, *frame);
          !s.ok()) {
        return s;
      }
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value ok,
                                     in_->Eval(*stmt_->cond, frame));
      if (Truthy(ok)) return std::optional<Value>(item);
    }
    return std::optional<Value>();
  }

  // Whether there is a next item (kept in after_).
  absl::StatusOr<bool> Peek() {
    if (after_.has_value()) return true;
    if (peeked_end_) return false;
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::optional<Value> next, Pull());
    if (!next.has_value()) {
      peeked_end_ = true;
      return false;
    }
    after_ = std::move(next);
    return true;
  }

  absl::StatusOr<int64_t> Length() {
    if (length_.has_value()) return *length_;
    if (stmt_->cond == nullptr) {
      length_ = static_cast<int64_t>(items_.size());
      return *length_;
    }
    std::deque<Value> rest;
    while (true) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(std::optional<Value> next, Pull());
      if (!next.has_value()) break;
      rest.push_back(*std::move(next));
    }
    rest_ = std::move(rest);
    length_ = static_cast<int64_t>(rest_.size()) + index0_ + 1 +
              (after_.has_value() ? 1 : 0);
    return *length_;
  }

  Interp* in_;
  const Stmt* stmt_;
  std::shared_ptr<Frame> outer_;
  std::vector<Value> items_;
  size_t next_ = 0;         // next of items_ to pull
  std::deque<Value> rest_;  // pulled by length, not yet visited
  int depth0_;
  int64_t index0_ = -1;
  Value current_;
  Value before_;
  std::optional<Value> after_;  // peeked item
  bool peeked_end_ = false;
  std::optional<int64_t> length_;
  std::optional<Value> last_changed_;
  std::weak_ptr<LoopObject> self_;
};

absl::StatusOr<Value> LoopAttr(const Value& loop, std::string_view name) {
  return static_cast<LoopObject*>(loop.object())->Attr(name);
}
absl::StatusOr<Value> LoopCycle(const Value& loop, const CallArgs& args) {
  return static_cast<LoopObject*>(loop.object())->Cycle(args);
}
Value LoopChanged(const Value& loop, const CallArgs& args) {
  return static_cast<LoopObject*>(loop.object())->Changed(args);
}

// ---- frames and namespaces -------------------------------------------------

namespace {
constexpr size_t kFrameIndexThreshold = 8;
}  // namespace

const Value* Frame::Lookup(std::string_view name) const {
  const absl::string_view key(name.data(), name.size());
  for (const Frame* f = this; f != nullptr; f = f->parent_.get()) {
    if (!f->index_.empty()) {
      if (auto it = f->index_.find(key); it != f->index_.end()) {
        return &f->vars_[it->second].second;
      }
      continue;
    }
    for (const auto& [k, v] : f->vars_) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Frame::Set(std::string_view name, Value value) {
  if (!index_.empty()) {
    auto [it, inserted] = index_.try_emplace(std::string(name), vars_.size());
    if (inserted) {
      vars_.emplace_back(std::string(name), std::move(value));
    } else {
      vars_[it->second].second = std::move(value);
    }
    return;
  }
  for (auto& [k, v] : vars_) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars_.emplace_back(std::string(name), std::move(value));
  if (vars_.size() > kFrameIndexThreshold) {
    for (size_t i = 0; i < vars_.size(); ++i) index_.emplace(vars_[i].first, i);
  }
}

std::string Namespace::Repr(size_t limit) const {
  // A namespace inside itself prints as Python's recursive dict repr does.
  thread_local std::vector<const Namespace*> active;
  if (std::find(active.begin(), active.end(), this) != active.end()) {
    return "<Namespace {...}>";
  }
  active.push_back(this);
  DictBuilder b;
  for (const auto& [k, v] : attrs_) b.Set(Value::String(k), v);
  std::string text = Cat("<Namespace ", StrBounded(b.Build(), limit), ">");
  active.pop_back();
  return text;
}

const Value* Namespace::Get(std::string_view name) const {
  auto it = index_.find(absl::string_view(name.data(), name.size()));
  return it == index_.end() ? nullptr : &attrs_[it->second].second;
}

void Namespace::Set(std::string_view name, Value value) {
  depth_ = std::max(depth_, value.depth() + 1);
  auto [it, inserted] = index_.try_emplace(std::string(name), attrs_.size());
  if (inserted) {
    attrs_.emplace_back(std::string(name), std::move(value));
  } else {
    attrs_[it->second].second = std::move(value);
  }
}

// ---- errors ----------------------------------------------------------------

absl::Status TypeError(std::string_view message) {
  return absl::InvalidArgumentError(std::string(message));
}

absl::Status AtLine(int line, absl::Status status) {
  if (status.ok() || status.GetPayload(kLocatedPayload).has_value() ||
      status.GetPayload(kRaisedPayload).has_value()) {
    return status;
  }
  absl::Status located(status.code(),
                       Cat("line ", line, ": ", status.message()));
  located.SetPayload(kLocatedPayload, absl::Cord("1"));
  return located;
}

// ---- Interp ----------------------------------------------------------------

Interp::Interp(const RenderOptions& options)
    : options_(options),
      max_string_(
          static_cast<size_t>(std::max<int64_t>(options.max_output_bytes, 0))),
      max_work_(std::max<int64_t>(options.max_steps, 1) * kWorkPerStep +
                (int64_t{1} << 20)) {}

Interp::~Interp() {
  // Namespaces may hold themselves (ns.x = ns): break such cycles.
  for (const std::weak_ptr<Namespace>& w : namespaces_) {
    if (std::shared_ptr<Namespace> ns = w.lock()) ns->Clear();
  }
}

void Interp::RegisterNamespace(const std::shared_ptr<Namespace>& ns) {
  namespaces_.push_back(ns);
}

absl::Status Interp::Step() {
  if (++steps_ > options_.max_steps) {
    return TypeError(
        Cat("loop limit of ", options_.max_steps, " steps reached"));
  }
  return absl::OkStatus();
}

absl::Status Interp::Charge(int64_t units) {
  work_ += std::max<int64_t>(units, 1);
  if (work_ > max_work_) {
    return TypeError(Cat("work limit reached (", options_.max_steps,
                         " steps' worth of builtin work)"));
  }
  return absl::OkStatus();
}

absl::Status Interp::CheckStringSize(size_t bytes) const {
  if (bytes > max_string_) {
    return TypeError(Cat("string of ", bytes,
                         " bytes exceeds the output limit of ", max_string_,
                         " bytes"));
  }
  return absl::OkStatus();
}

absl::Status Interp::Allocate(int64_t bytes) {
  allocated_ += std::max<int64_t>(bytes, 0);
  if (allocated_ > options_.max_alloc_bytes) {
    return TypeError(Cat("memory limit of ", options_.max_alloc_bytes,
                         " bytes reached (strings, lists and output the "
                         "render built)"));
  }
  return absl::OkStatus();
}

absl::Status Interp::AllocateValues(int64_t n) {
  // Saturates: n may be a template's product of sizes.
  constexpr auto kSlot = static_cast<int64_t>(sizeof(Value));
  return Allocate(n > std::numeric_limits<int64_t>::max() / kSlot
                      ? std::numeric_limits<int64_t>::max()
                      : n * kSlot);
}

absl::StatusOr<Value> Interp::MakeList(std::vector<Value> items, SeqKind kind) {
  if (absl::Status st = AllocateValues(static_cast<int64_t>(items.size()));
      !st.ok()) {
    return st;
  }
  return Value::Seq(std::move(items), kind);
}

absl::StatusOr<Value> Interp::MakeSpanned(SpannedText s, bool safe) {
  if (absl::Status st = CheckStringSize(s.text.size()); !st.ok()) return st;
  if (absl::Status st = Allocate(static_cast<int64_t>(s.text.size()));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = Charge(static_cast<int64_t>(s.text.size() / 64));
      !st.ok()) {
    return st;
  }
  return Value::Spanned(std::move(s), safe);
}

absl::StatusOr<Value> Interp::MakeString(std::string s, bool safe) {
  if (absl::Status st = CheckStringSize(s.size()); !st.ok()) return st;
  if (absl::Status st = Allocate(static_cast<int64_t>(s.size())); !st.ok()) {
    return st;
  }
  if (absl::Status st = Charge(static_cast<int64_t>(s.size() / 64)); !st.ok()) {
    return st;
  }
  return Value::String(std::move(s), safe);
}

absl::StatusOr<std::string> Interp::ToStr(const Value& v) {
  if (v.is_string()) {
    if (absl::Status st = Charge(static_cast<int64_t>(v.str().size() / 64));
        !st.ok()) {
      return st;
    }
    return v.str();
  }
  std::string s = StrBounded(v, max_string_ + 1);
  if (absl::Status st = CheckStringSize(s.size()); !st.ok()) return st;
  if (absl::Status st = Charge(static_cast<int64_t>(s.size() / 64)); !st.ok()) {
    return st;
  }
  return s;
}

absl::Status Interp::Append(SpannedText* out, std::string_view s,
                            bool is_literal) {
  if (out->text.size() + s.size() >
      static_cast<size_t>(std::max<int64_t>(options_.max_output_bytes, 0))) {
    return TypeError(
        Cat("output limit of ", options_.max_output_bytes, " bytes reached"));
  }
  if (absl::Status st = Allocate(static_cast<int64_t>(s.size())); !st.ok()) {
    return st;
  }
  out->Append(s, is_literal);
  return absl::OkStatus();
}

absl::Status Interp::AppendValue(SpannedText* out, const Value& v) {
  if (!v.is_string()) {
    absl::StatusOr<std::string> text = ToStr(v);
    if (!text.ok()) return text.status();
    return Append(out, *text, /*is_literal=*/false);
  }
  const SpannedText& text = v.spanned();
  if (out->text.size() + text.text.size() >
      static_cast<size_t>(std::max<int64_t>(options_.max_output_bytes, 0))) {
    return TypeError(
        Cat("output limit of ", options_.max_output_bytes, " bytes reached"));
  }
  if (absl::Status st = Charge(static_cast<int64_t>(text.text.size() / 64));
      !st.ok()) {
    return st;
  }
  if (absl::Status st = Allocate(static_cast<int64_t>(text.text.size()));
      !st.ok()) {
    return st;
  }
  out->Append(text);
  return absl::OkStatus();
}

absl::StatusOr<SpannedText> Interp::Render(
    const Node& root, const nlohmann::ordered_json& context) {
  auto frame = std::make_shared<Frame>(nullptr);
  if (context.is_object()) {
    for (const auto& [key, value] : context.items()) {
      absl::StatusOr<Value> v = FromJson(value);
      if (!v.ok()) {
        return TypeError(Cat("context '", key, "': ", v.status().message()));
      }
      const std::vector<std::string>& literal = options_.literal_variables;
      if (v->is_string() &&
          std::find(literal.begin(), literal.end(), key) != literal.end()) {
        v = Value::Literal(v->str());
      }
      frame->Set(key, *std::move(v));
    }
  } else if (!context.is_null()) {
    return TypeError("the render context must be a JSON object");
  }
  root_ = frame;
  SpannedText out;
  absl::Status s = ExecBody(root.body, frame, &out);
  root_.reset();
  if (!s.ok()) return s;
  return out;
}

// ---- statements ------------------------------------------------------------

absl::Status Interp::ExecBody(const Body& body,
                              const std::shared_ptr<Frame>& frame,
                              SpannedText* out) {
  for (const StmtPtr& s : body) {
    if (absl::Status st = Exec(*s, frame, out); !st.ok()) return st;
    if (flow_ != Flow::kNormal) break;
  }
  return absl::OkStatus();
}

absl::Status Interp::Exec(const Stmt& s, const std::shared_ptr<Frame>& frame,
                          SpannedText* out) {
  NestingGuard guard(&nesting_);
  if (nesting_ > kMaxEvalNesting) return AtLine(s.line, NestingError());
  switch (s.kind) {
    case StmtKind::kText:
      return AtLine(s.line, Append(out, s.text, /*is_literal=*/true));
    case StmtKind::kOutput: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*s.expr, frame));
      return AtLine(s.line, AppendValue(out, v));
    }
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value c, Eval(*cond, frame));
        if (Truthy(c)) return ExecBody(body, frame, out);
      }
      return ExecBody(s.else_body, frame, out);
    case StmtKind::kFor:
      return ExecFor(s, frame, out);
    case StmtKind::kSet: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*s.expr, frame));
      return AtLine(s.line, AssignTarget(*s.target, v, *frame));
    }
    case StmtKind::kSetBlock:
    case StmtKind::kFilterBlock: {
      auto inner = std::make_shared<Frame>(frame);
      SpannedText text;
      if (absl::Status st = ExecBody(s.body, inner, &text); !st.ok()) return st;
      Value v = Value::Spanned(std::move(text));
      if (s.expr != nullptr) {
        block_input_.push_back(std::move(v));
        absl::StatusOr<Value> filtered = Eval(*s.expr, frame);
        block_input_.pop_back();
        if (!filtered.ok()) return filtered.status();
        v = *std::move(filtered);
      }
      if (s.kind == StmtKind::kSetBlock) {
        return AtLine(s.line, AssignTarget(*s.target, v, *frame));
      }
      return AtLine(s.line, AppendValue(out, v));
    }
    case StmtKind::kMacro:
      frame->Set(s.signature->name,
                 Value::MakeObject(std::make_shared<MacroObject>(&s, frame)));
      return absl::OkStatus();
    case StmtKind::kCallBlock:
      return ExecCallBlock(s, frame, out);
    case StmtKind::kWith: {
      std::vector<Value> values;
      for (const auto& a : s.assignments) {
        KVSERVE_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*a.second, frame));
        values.push_back(std::move(v));
      }
      auto inner = std::make_shared<Frame>(frame);
      for (size_t i = 0; i < values.size(); ++i) {
        if (absl::Status st =
                AssignTarget(*s.assignments[i].first, values[i], *inner);
            !st.ok()) {
          return AtLine(s.line, st);
        }
      }
      return ExecBody(s.body, inner, out);
    }
    case StmtKind::kBreak:
      flow_ = Flow::kBreak;
      return absl::OkStatus();
    case StmtKind::kContinue:
      flow_ = Flow::kContinue;
      return absl::OkStatus();
    case StmtKind::kGeneration: {
      auto inner = std::make_shared<Frame>(frame);
      return ExecBody(s.body, inner, out);
    }
    case StmtKind::kBlock: {
      // A block sees the template's variables, the enclosing scope only
      // when `scoped`.
      auto inner = std::make_shared<Frame>(s.scoped ? frame : root_);
      return ExecBody(s.body, inner, out);
    }
  }
  return absl::OkStatus();
}

absl::Status Interp::ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame,
                             SpannedText* out) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value iterable, Eval(*s.expr, frame));
  absl::StatusOr<std::vector<Value>> items = Iterate(iterable);
  if (!items.ok()) return AtLine(s.line, items.status());
  return RunLoopInto(s, *std::move(items), frame, 0, out);
}

absl::StatusOr<SpannedText> Interp::RunLoop(const Stmt& loop,
                                            std::vector<Value> items,
                                            const std::shared_ptr<Frame>& outer,
                                            int depth0) {
  NestingGuard guard(&nesting_);
  if (nesting_ > kMaxEvalNesting) return AtLine(loop.line, NestingError());
  SpannedText out;
  if (absl::Status s = RunLoopInto(loop, std::move(items), outer, depth0, &out);
      !s.ok()) {
    return s;
  }
  return out;
}

absl::Status Interp::RunLoopInto(const Stmt& s, std::vector<Value> items,
                                 const std::shared_ptr<Frame>& outer,
                                 int depth0, SpannedText* out) {
  auto loop =
      std::make_shared<LoopObject>(this, &s, outer, std::move(items), depth0);
  loop->set_self(loop);
  const Value loop_value = Value::MakeObject(loop);
  // jinja2 runs the else block unless an iteration reached the end of the
  // body (so an iteration left by break or continue does not count).
  bool completed = false;
  while (true) {
    absl::StatusOr<bool> more = loop->Advance();
    if (!more.ok()) return AtLine(s.line, more.status());
    if (!*more) break;
    if (absl::Status st = Step(); !st.ok()) return AtLine(s.line, st);
    auto iteration = std::make_shared<Frame>(outer);
    if (absl::Status st = AssignTarget(*s.target, loop->current(), *iteration);
        !st.ok()) {
      return AtLine(s.line, st);
    }
    iteration->Set("loop", loop_value);
    if (absl::Status st = ExecBody(s.body, iteration, out); !st.ok()) return st;
    const Flow flow = flow_;
    flow_ = Flow::kNormal;
    if (flow == Flow::kNormal) completed = true;
    if (flow == Flow::kBreak) break;
  }
  if (!completed && !s.else_body.empty()) {
    auto inner = std::make_shared<Frame>(outer);
    return ExecBody(s.else_body, inner, out);
  }
  return absl::OkStatus();
}

absl::Status Interp::ExecCallBlock(const Stmt& s,
                                   const std::shared_ptr<Frame>& frame,
                                   SpannedText* out) {
  const Expr& call = *s.expr;
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value callee, Eval(*call.lhs, frame));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, frame));
  args.kw.emplace_back(
      "caller", Value::MakeObject(std::make_shared<MacroObject>(&s, frame)));
  absl::StatusOr<Value> result = CallValue(callee, std::move(args));
  if (!result.ok()) return AtLine(s.line, result.status());
  return AtLine(s.line, AppendValue(out, *result));
}

absl::StatusOr<Value> Interp::CallMacro(const Stmt& macro,
                                        const std::shared_ptr<Frame>& closure,
                                        CallArgs args) {
  const MacroSignature& sig = *macro.signature;
  if (absl::Status s = Step(); !s.ok()) return s;
  if (macro_depth_ >= options_.max_depth) {
    return TypeError(
        Cat("macro calls nested deeper than ", options_.max_depth, " levels"));
  }
  const size_t n = sig.params.size();
  if (args.pos.size() > n && !sig.uses_varargs) {
    return TypeError(
        Cat("macro '", sig.name, "' takes not more than ", n, " argument(s)"));
  }
  auto frame = std::make_shared<Frame>(closure);
  std::vector<std::optional<Value>> bound(n);
  for (size_t i = 0; i < n && i < args.pos.size(); ++i) bound[i] = args.pos[i];
  std::vector<Value> varargs;
  for (size_t i = n; i < args.pos.size(); ++i) varargs.push_back(args.pos[i]);
  DictBuilder kwargs;
  Value caller = Value::Undefined("no caller defined");
  for (auto& [key, value] : args.kw) {
    const auto it = std::find(sig.params.begin(), sig.params.end(), key);
    if (it != sig.params.end()) {
      const size_t i = static_cast<size_t>(it - sig.params.begin());
      if (bound[i].has_value()) {
        return TypeError(Cat("macro '", sig.name,
                             "' got multiple values for argument '", key, "'"));
      }
      bound[i] = std::move(value);
    } else if (key == "caller" && sig.uses_caller) {
      caller = std::move(value);
    } else if (sig.uses_kwargs) {
      kwargs.Set(Value::String(key), std::move(value));
    } else {
      return TypeError(
          Cat("macro '", sig.name, "' takes no keyword argument '", key, "'"));
    }
  }
  const size_t first_default = n - sig.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (bound[i].has_value()) {
      frame->Set(sig.params[i], *std::move(bound[i]));
    } else if (i >= first_default) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(
          Value d, Eval(*sig.defaults[i - first_default], frame));
      frame->Set(sig.params[i], std::move(d));
    } else {
      frame->Set(sig.params[i],
                 Value::Undefined(
                     Cat("parameter '", sig.params[i], "' was not provided")));
    }
  }
  if (sig.uses_varargs) {
    frame->Set("varargs", Value::Seq(std::move(varargs), SeqKind::kTuple));
  }
  if (sig.uses_kwargs) frame->Set("kwargs", kwargs.Build());
  if (sig.uses_caller) frame->Set("caller", std::move(caller));
  ++macro_depth_;
  SpannedText out;
  absl::Status s = ExecBody(macro.body, frame, &out);
  --macro_depth_;
  if (!s.ok()) return s;
  return Value::Spanned(std::move(out));
}

absl::Status Interp::AssignTarget(const Expr& target, const Value& value,
                                  Frame& frame) {
  switch (target.kind) {
    case ExprKind::kName:
      if (value.depth() > kMaxValueDepth) {
        return TypeError(
            Cat("value nested deeper than ", kMaxValueDepth, " levels"));
      }
      frame.Set(target.name, value);
      return absl::OkStatus();
    case ExprKind::kNsRef: {
      const Value* ns = frame.Lookup(target.name);
      Namespace* n = ns != nullptr && ns->kind() == Kind::kObject
                         ? dynamic_cast<Namespace*>(ns->object())
                         : nullptr;
      if (n == nullptr) {
        return TypeError("cannot assign attribute on non-namespace object");
      }
      if (value.depth() > kMaxValueDepth) {
        return TypeError(
            Cat("value nested deeper than ", kMaxValueDepth, " levels"));
      }
      n->Set(target.attr, value);
      return absl::OkStatus();
    }
    case ExprKind::kTuple: {
      if (value.kind() != Kind::kList && value.kind() != Kind::kDict &&
          value.kind() != Kind::kString) {
        return TypeError(
            Cat("cannot unpack non-iterable ", TypeName(value), " object"));
      }
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::vector<Value> items,
                                     Iterate(value));
      const size_t n = target.args.size();
      if (items.size() < n) {
        return TypeError(Cat("not enough values to unpack (expected ", n,
                             ", got ", items.size(), ")"));
      }
      if (items.size() > n) {
        return TypeError(Cat("too many values to unpack (expected ", n, ")"));
      }
      for (size_t i = 0; i < n; ++i) {
        if (absl::Status s = AssignTarget(*target.args[i], items[i], frame);
            !s.ok()) {
          return s;
        }
      }
      return absl::OkStatus();
    }
    default:
      return TypeError("can't assign to this expression");
  }
}

// ---- expressions -----------------------------------------------------------

absl::StatusOr<Value> Interp::Eval(const Expr& e,
                                   const std::shared_ptr<Frame>& frame) {
  NestingGuard guard(&nesting_);
  if (nesting_ > kMaxEvalNesting) return AtLine(e.line, NestingError());
  absl::StatusOr<Value> v = EvalNode(e, frame);
  if (!v.ok()) return AtLine(e.line, v.status());
  return v;
}

absl::StatusOr<Value> Interp::EvalNode(const Expr& e,
                                       const std::shared_ptr<Frame>& frame) {
  switch (e.kind) {
    case ExprKind::kLiteral:
      return e.value;
    case ExprKind::kName:
      return EvalName(e, *frame);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const ExprPtr& a : e.args) {
        KVSERVE_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*a, frame));
        items.push_back(std::move(v));
      }
      return MakeList(std::move(items), e.kind == ExprKind::kList
                                            ? SeqKind::kList
                                            : SeqKind::kTuple);
    }
    case ExprKind::kDict: {
      DictBuilder b;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        KVSERVE_JINJA_ASSIGN_OR_RETURN(Value key, Eval(*e.args[i], frame));
        if (absl::StatusOr<size_t> h = Hash(key); !h.ok()) return h.status();
        KVSERVE_JINJA_ASSIGN_OR_RETURN(Value value,
                                       Eval(*e.args[i + 1], frame));
        b.Set(std::move(key), std::move(value));
      }
      return b.Build();
    }
    case ExprKind::kGetAttr: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value obj, Eval(*e.lhs, frame));
      return GetAttr(obj, e.name);
    }
    case ExprKind::kGetItem: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value obj, Eval(*e.lhs, frame));
      if (e.rhs->kind == ExprKind::kSlice) return EvalSlice(obj, *e.rhs, frame);
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value key, Eval(*e.rhs, frame));
      return GetItem(obj, key);
    }
    case ExprKind::kCall:
      return EvalCall(e, frame);
    case ExprKind::kFilter:
      return EvalFilter(e, frame);
    case ExprKind::kTest: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*e.lhs, frame));
      KVSERVE_JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, frame));
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const bool r,
                                     ApplyTest(e.name, v, std::move(args)));
      return Value::Bool(r);
    }
    case ExprKind::kNeg: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*e.lhs, frame));
      return Negate(v);
    }
    case ExprKind::kPos: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*e.lhs, frame));
      if (v.kind() == Kind::kBool) return Value::Int(v.as_int());
      if (v.is_number()) return v;
      return TypeError(
          Cat("bad operand type for unary +: '", TypeName(v), "'"));
    }
    case ExprKind::kNot: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*e.lhs, frame));
      return Value::Bool(!Truthy(v));
    }
    case ExprKind::kBinary: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value a, Eval(*e.lhs, frame));
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value b, Eval(*e.rhs, frame));
      return Arith(*this, e.op, a, b);
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(Value a, Eval(*e.lhs, frame));
      if (Truthy(a) == (e.kind == ExprKind::kOr)) return a;
      return Eval(*e.rhs, frame);
    }
    case ExprKind::kCompare:
      return EvalCompare(e, frame);
    case ExprKind::kConcat: {
      SpannedText s;
      for (const ExprPtr& a : e.args) {
        KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*a, frame));
        if (v.is_string()) {
          if (absl::Status st = CheckStringSize(s.text.size() + v.str().size());
              !st.ok()) {
            return st;
          }
          s.Append(v.spanned());
          continue;
        }
        KVSERVE_JINJA_ASSIGN_OR_RETURN(const std::string part, ToStr(v));
        if (absl::Status st = CheckStringSize(s.text.size() + part.size());
            !st.ok()) {
          return st;
        }
        s.Append(part, /*is_literal=*/false);
      }
      return MakeSpanned(std::move(s));
    }
    case ExprKind::kCondExpr: {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value c, Eval(*e.args[0], frame));
      if (Truthy(c)) return Eval(*e.lhs, frame);
      if (e.rhs != nullptr) return Eval(*e.rhs, frame);
      return Value::Undefined(
          Cat("the inline if-expression on line ", e.line,
              " evaluated to false and no else section was defined."));
    }
    case ExprKind::kSlice:
    case ExprKind::kNsRef:
      break;
  }
  return TypeError("unexpected expression");
}

absl::StatusOr<Value> Interp::EvalName(const Expr& e, const Frame& frame) {
  if (const Value* v = frame.Lookup(e.name)) return *v;
  Value g = Global(e.name);
  if (!g.is_undefined()) return g;
  return Value::Undefined(Cat("'", e.name, "' is undefined"));
}

absl::StatusOr<CallArgs> Interp::EvalArgs(const Expr& e,
                                          const std::shared_ptr<Frame>& frame) {
  CallArgs args;
  for (const ExprPtr& a : e.args) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*a, frame));
    args.pos.push_back(std::move(v));
  }
  if (e.dyn_args != nullptr) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*e.dyn_args, frame));
    KVSERVE_JINJA_ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(v));
    for (Value& item : items) args.pos.push_back(std::move(item));
  }
  for (const auto& [key, a] : e.kwargs) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(Value v, Eval(*a, frame));
    args.kw.emplace_back(key, std::move(v));
  }
  if (e.dyn_kwargs != nullptr) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value v, Eval(*e.dyn_kwargs, frame));
    if (!v.is_dict()) {
      return TypeError(
          Cat("argument after ** must be a mapping, not ", TypeName(v)));
    }
    for (const auto& [key, value] : v.dict().items) {
      if (!key.is_string()) return TypeError("keywords must be strings");
      args.kw.emplace_back(key.str(), value);
    }
  }
  return args;
}

absl::StatusOr<Value> Interp::EvalCall(const Expr& e,
                                       const std::shared_ptr<Frame>& frame) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(const Value callee, Eval(*e.lhs, frame));
  KVSERVE_JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, frame));
  return CallValue(callee, std::move(args));
}

absl::StatusOr<Value> Interp::CallValue(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) {
    return TypeError(callee.undefined_hint().empty()
                         ? "undefined value is not callable"
                         : callee.undefined_hint());
  }
  if (callee.kind() == Kind::kObject && callee.object()->callable()) {
    // Keep the callee alive while it runs (it may drop its own binding).
    std::shared_ptr<Object> keep = callee.object_ptr();
    return static_cast<Callable*>(keep.get())->Call(*this, std::move(args));
  }
  return TypeError(Cat("'", TypeName(callee), "' object is not callable"));
}

absl::StatusOr<Value> Interp::EvalFilter(const Expr& e,
                                         const std::shared_ptr<Frame>& frame) {
  Value input;
  if (e.lhs != nullptr) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(input, Eval(*e.lhs, frame));
  } else if (!block_input_.empty()) {
    input = block_input_.back();
  }
  KVSERVE_JINJA_ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, frame));
  return ApplyFilter(e.name, std::move(input), std::move(args));
}

absl::StatusOr<Value> Interp::EvalSlice(const Value& obj, const Expr& slice,
                                        const std::shared_ptr<Frame>& frame) {
  Value parts[3] = {Value::None(), Value::None(), Value::None()};
  for (int i = 0; i < 3; ++i) {
    if (slice.args[i] != nullptr) {
      KVSERVE_JINJA_ASSIGN_OR_RETURN(parts[i], Eval(*slice.args[i], frame));
    }
  }
  return SliceValue(*this, obj, parts[0], parts[1], parts[2]);
}

namespace {

// What comparing or searching a value costs, in Charge() units.
int64_t ScanUnits(const Value& v) {
  if (v.is_string()) return static_cast<int64_t>(v.str().size() / 64);
  if (v.is_list()) return static_cast<int64_t>(v.items().size());
  return 1;
}

}  // namespace

absl::StatusOr<Value> Interp::EvalCompare(const Expr& e,
                                          const std::shared_ptr<Frame>& frame) {
  KVSERVE_JINJA_ASSIGN_OR_RETURN(Value left, Eval(*e.lhs, frame));
  for (size_t i = 0; i < e.ops.size(); ++i) {
    KVSERVE_JINJA_ASSIGN_OR_RETURN(Value right, Eval(*e.args[i], frame));
    if (absl::Status s = Charge(ScanUnits(left) + ScanUnits(right)); !s.ok()) {
      return s;
    }
    bool r = false;
    switch (e.ops[i]) {
      case CmpOp::kEq:
        r = Equal(left, right);
        break;
      case CmpOp::kNe:
        r = !Equal(left, right);
        break;
      case CmpOp::kIn:
      case CmpOp::kNotIn: {
        KVSERVE_JINJA_ASSIGN_OR_RETURN(const bool in, Contains(right, left));
        r = in == (e.ops[i] == CmpOp::kIn);
        break;
      }
      default: {
        KVSERVE_JINJA_ASSIGN_OR_RETURN(const int c, Compare(left, right));
        r = e.ops[i] == CmpOp::kLt   ? c < 0
            : e.ops[i] == CmpOp::kLe ? c <= 0
            : e.ops[i] == CmpOp::kGt ? c > 0
                                     : c >= 0;
        // NaN compares false both ways.
        if ((left.kind() == Kind::kFloat &&
             left.as_double() != left.as_double()) ||
            (right.kind() == Kind::kFloat &&
             right.as_double() != right.as_double())) {
          r = false;
        }
        break;
      }
    }
    if (!r) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Interp::ApplyFilter(std::string_view name, Value input,
                                          CallArgs args) {
  return CallFilter(*this, name, std::move(input), std::move(args));
}

absl::StatusOr<bool> Interp::ApplyTest(std::string_view name,
                                       const Value& input, CallArgs args) {
  return CallTest(*this, name, input, std::move(args));
}

// ---- sandboxed attribute and item access -----------------------------------

namespace {

bool IsDunder(std::string_view name) {
  return name.size() >= 4 && name.substr(0, 2) == "__" &&
         name.substr(name.size() - 2) == "__";
}

std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  return Cat(TypeName(v), " object");
}

Value Unsafe(const Value& obj, std::string_view name) {
  return Value::Undefined(Cat("access to attribute '", name, "' of '",
                              TypeName(obj), "' object is unsafe."));
}

Value NoAttribute(const Value& obj, std::string_view name) {
  return Value::Undefined(
      Cat("'", ObjectTypeRepr(obj), "' has no attribute '", name, "'"));
}

}  // namespace

absl::StatusOr<Value> Interp::GetAttr(const Value& obj, std::string_view name) {
  if (obj.is_undefined()) {
    return TypeError(obj.undefined_hint().empty() ? "value is undefined"
                                                  : obj.undefined_hint());
  }
  if (obj.kind() == Kind::kObject) {
    if (const auto* ns = dynamic_cast<const Namespace*>(obj.object())) {
      if (const Value* v = ns->Get(name)) return *v;
      return NoAttribute(obj, name);
    }
    if (dynamic_cast<const LoopObject*>(obj.object()) != nullptr) {
      return LoopAttr(obj, name);
    }
  }
  if (std::optional<Value> m = BoundMethod(obj, name)) return *std::move(m);
  if (IsDunder(name) || IsUnsafeMethod(obj, name)) return Unsafe(obj, name);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict().Find(name)) return *v;
  }
  return NoAttribute(obj, name);
}

absl::StatusOr<Value> Interp::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    return TypeError(obj.undefined_hint().empty() ? "value is undefined"
                                                  : obj.undefined_hint());
  }
  switch (obj.kind()) {
    case Kind::kDict:
      if (Hash(key).ok()) {
        if (const Value* v = obj.dict().Find(key)) return *v;
      }
      break;
    case Kind::kList: {
      const SeqKind k = obj.seq_kind();
      if (key.is_integral() && (k == SeqKind::kList || k == SeqKind::kTuple ||
                                k == SeqKind::kRange)) {
        const auto& items = obj.items();
        int64_t i = key.as_int();
        const auto n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
        return Value::Undefined(
            Cat("'", ObjectTypeRepr(obj), "' has no element ", key.as_int()));
      }
      break;
    }
    case Kind::kString:
      if (key.is_integral()) {
        if (absl::Status s = Charge(ScanUnits(obj)); !s.ok()) return s;
        const std::string& str = obj.str();
        if (IsAscii(str)) {
          int64_t i = key.as_int();
          const auto n = static_cast<int64_t>(str.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            return Value::String(std::string(1, str[static_cast<size_t>(i)]));
          }
          return Value::Undefined(
              Cat("'str object' has no element ", key.as_int()));
        }
        const std::u32string cps = Decode(str);
        int64_t i = key.as_int();
        const auto n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          return Value::String(Encode(
              std::u32string_view(cps).substr(static_cast<size_t>(i), 1)));
        }
        return Value::Undefined(
            Cat("'str object' has no element ", key.as_int()));
      }
      break;
    default:
      break;
  }
  if (key.is_string()) {
    if (obj.is_dict()) {
      // A missing key falls back to the attribute (a dict method).
      if (std::optional<Value> m = BoundMethod(obj, key.str())) {
        return *std::move(m);
      }
      if (IsDunder(key.str()) || IsUnsafeMethod(obj, key.str())) {
        return Unsafe(obj, key.str());
      }
      return NoAttribute(obj, key.str());
    }
    return GetAttr(obj, key.str());
  }
  return Value::Undefined(Cat("'", ObjectTypeRepr(obj), "' has no attribute '",
                              StrBounded(key, 200), "'"));
}

absl::StatusOr<std::vector<Value>> Interp::Iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return std::vector<Value>();
    case Kind::kList:
      if (absl::Status s = Charge(static_cast<int64_t>(v.items().size()));
          !s.ok()) {
        return s;
      }
      return v.items();
    case Kind::kDict: {
      const auto& items = v.dict().items;
      if (absl::Status s = Charge(static_cast<int64_t>(items.size()));
          !s.ok()) {
        return s;
      }
      std::vector<Value> keys;
      keys.reserve(items.size());
      for (const auto& kv : items) keys.push_back(kv.first);
      return keys;
    }
    case Kind::kString: {
      const std::u32string cps = Decode(v.str());
      if (absl::Status s = Charge(static_cast<int64_t>(cps.size())); !s.ok()) {
        return s;
      }
      // Each character a string of its own.
      if (absl::Status s = AllocateValues(static_cast<int64_t>(cps.size()) * 2);
          !s.ok()) {
        return s;
      }
      std::vector<Value> chars;
      chars.reserve(cps.size());
      for (size_t i = 0; i < cps.size(); ++i) {
        chars.push_back(
            Value::String(Encode(std::u32string_view(cps).substr(i, 1))));
      }
      return chars;
    }
    default:
      return TypeError(Cat("'", TypeName(v), "' object is not iterable"));
  }
}

}  // namespace kvserve::jinja
