// The tree-walking evaluator behind jinja::Template::Render, and the
// interface the built-in filters, tests, methods and globals
// (jinja_builtins.cc) use.
//
// Scoping is jinja2's: the template, each loop iteration, each macro call
// and each {% with %}/{% filter %}/{% set %}-block body get their own frame;
// `set` writes the innermost frame; names resolve outwards.
//
// Bounds (RenderOptions): steps (loop iterations and macro calls), macro
// nesting, output bytes per buffer, string sizes, plus a work budget for
// builtin work proportional to the data (copies, scans, sorts), a byte
// budget for the values and output a render builds (Allocate: never given
// back, so it bounds the peak too) and a fixed bound on evaluation nesting,
// so that no input exhausts time, memory or the C++ stack.
#ifndef KVSERVE_CORE_CHAT_JINJA_EVAL_H_
#define KVSERVE_CORE_CHAT_JINJA_EVAL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/chat/jinja.h"
#include "core/chat/jinja_ast.h"
#include "core/chat/jinja_value.h"

#define KVSERVE_JINJA_CONCAT_INNER(a, b) a##b
#define KVSERVE_JINJA_CONCAT(a, b) KVSERVE_JINJA_CONCAT_INNER(a, b)
// lhs = *expr, or returns expr's error.
#define KVSERVE_JINJA_ASSIGN_OR_RETURN(lhs, expr)              \
  auto KVSERVE_JINJA_CONCAT(jinja_or_, __LINE__) = (expr);     \
  if (!KVSERVE_JINJA_CONCAT(jinja_or_, __LINE__).ok()) {       \
    return KVSERVE_JINJA_CONCAT(jinja_or_, __LINE__).status(); \
  }                                                            \
  lhs = *std::move(KVSERVE_JINJA_CONCAT(jinja_or_, __LINE__))

namespace kvserve::jinja {

class Interp;

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

class Callable : public Object {
 public:
  bool callable() const override { return true; }
  // Errors without a line; the interpreter adds the call's.
  virtual absl::StatusOr<Value> Call(Interp& in, CallArgs args) = 0;
};

// Variables of one scope.
class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> parent) : parent_(std::move(parent)) {}
  // The innermost binding of `name`, or nullptr.
  const Value* Lookup(std::string_view name) const;
  void Set(std::string_view name, Value value);

 private:
  std::shared_ptr<Frame> parent_;
  // Most frames hold a loop variable or a few sets: a short list, indexed
  // once it grows (a template may set thousands of names).
  std::vector<std::pair<std::string, Value>> vars_;
  absl::flat_hash_map<std::string, size_t> index_;
};

// {% set ns = namespace(...) %}: the one mutable value.
class Namespace : public Object {
 public:
  std::string_view type_name() const override { return "Namespace"; }
  std::string Repr(size_t limit) const override;
  int depth() const override { return depth_; }
  const Value* Get(std::string_view name) const;
  void Set(std::string_view name, Value value);
  void Clear() {
    attrs_.clear();
    index_.clear();
  }

 private:
  std::vector<std::pair<std::string, Value>> attrs_;  // in insertion order
  absl::flat_hash_map<std::string, size_t> index_;    // name -> attrs_ slot
  int depth_ = 1;  // never decreases: a bound, not exact
};

// A sandboxed error, as Python's TypeError/UndefinedError text.
absl::Status TypeError(std::string_view message);

// Status payloads: the error already names its line; the error is the
// template's raise_exception (its message is exactly the template's).
inline constexpr char kLocatedPayload[] = "kvserve.jinja/located";
inline constexpr char kRaisedPayload[] = "kvserve.jinja/raised";
// "line N: message" unless the status already names its line or was raised.
absl::Status AtLine(int line, absl::Status status);

class Interp {
 public:
  explicit Interp(const RenderOptions& options);
  ~Interp();
  Interp(const Interp&) = delete;
  Interp& operator=(const Interp&) = delete;

  absl::StatusOr<SpannedText> Render(const Node& root,
                                     const nlohmann::ordered_json& context);

  const RenderOptions& options() const { return options_; }
  // Largest string a template may build (its output bound).
  size_t max_string_bytes() const { return max_string_; }

  // One loop iteration or macro call.
  absl::Status Step();
  // Builtin work proportional to `units` elements or 64-byte chunks.
  absl::Status Charge(int64_t units);
  // Bytes of values and output built (RenderOptions::max_alloc_bytes):
  // charged before building what is charged here, or just after for a
  // value no bigger than the values it was made from.
  absl::Status Allocate(int64_t bytes);
  // `n` list or dict slots.
  absl::Status AllocateValues(int64_t n);
  // A string result checked against max_string_bytes() and charged to
  // Allocate().
  absl::StatusOr<Value> MakeString(std::string s, bool safe = false);
  // MakeString() keeping the text's provenance (SpannedText).
  absl::StatusOr<Value> MakeSpanned(SpannedText s, bool safe = false);
  // A list result charged to AllocateValues().
  absl::StatusOr<Value> MakeList(std::vector<Value> items,
                                 SeqKind kind = SeqKind::kList);
  absl::Status CheckStringSize(size_t bytes) const;

  // Python semantics the builtins share.
  absl::StatusOr<Value> GetAttr(const Value& obj, std::string_view name);
  absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
  // The elements a `for` visits (dict keys, string characters; undefined
  // is empty).
  absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
  absl::StatusOr<Value> CallValue(const Value& callee, CallArgs args);
  absl::StatusOr<Value> ApplyFilter(std::string_view name, Value input,
                                    CallArgs args);
  absl::StatusOr<bool> ApplyTest(std::string_view name, const Value& input,
                                 CallArgs args);
  // Str() bounded by max_string_bytes().
  absl::StatusOr<std::string> ToStr(const Value& v);
  void RegisterNamespace(const std::shared_ptr<Namespace>& ns);
  std::optional<absl::Time> now() const { return options_.now; }

  // Statements and expressions (jinja_eval.cc).
  absl::Status ExecBody(const Body& body, const std::shared_ptr<Frame>& frame,
                        SpannedText* out);
  absl::StatusOr<Value> Eval(const Expr& e,
                             const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> CallMacro(const Stmt& macro,
                                  const std::shared_ptr<Frame>& closure,
                                  CallArgs args);
  absl::StatusOr<SpannedText> RunLoop(const Stmt& loop,
                                      std::vector<Value> items,
                                      const std::shared_ptr<Frame>& outer,
                                      int depth0);
  // Binds a set/for/with target (a name, ns.attr or a tuple of targets).
  absl::Status AssignTarget(const Expr& target, const Value& value,
                            Frame& frame);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status Exec(const Stmt& s, const std::shared_ptr<Frame>& frame,
                    SpannedText* out);
  absl::Status ExecFor(const Stmt& s, const std::shared_ptr<Frame>& frame,
                       SpannedText* out);
  absl::Status ExecCallBlock(const Stmt& s, const std::shared_ptr<Frame>& frame,
                             SpannedText* out);
  absl::Status RunLoopInto(const Stmt& loop, std::vector<Value> items,
                           const std::shared_ptr<Frame>& outer, int depth0,
                           SpannedText* out);
  // Output: `s` (template text when `is_literal`); a value as printed (a
  // string keeps its provenance).
  absl::Status Append(SpannedText* out, std::string_view s, bool is_literal);
  absl::Status AppendValue(SpannedText* out, const Value& v);

  absl::StatusOr<Value> EvalNode(const Expr& e,
                                 const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalName(const Expr& e, const Frame& frame);
  absl::StatusOr<Value> EvalCall(const Expr& e,
                                 const std::shared_ptr<Frame>& frame);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e,
                                    const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalSlice(const Value& obj, const Expr& slice,
                                  const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalCompare(const Expr& e,
                                    const std::shared_ptr<Frame>& frame);
  absl::StatusOr<Value> EvalFilter(const Expr& e,
                                   const std::shared_ptr<Frame>& frame);

  const RenderOptions options_;
  const size_t max_string_;
  const int64_t max_work_;
  int64_t steps_ = 0;
  int64_t work_ = 0;
  int64_t allocated_ = 0;  // bytes charged to Allocate()
  int nesting_ = 0;        // Eval/Exec recursion
  int macro_depth_ = 0;    // macro calls in progress
  Flow flow_ = Flow::kNormal;
  // The text a {% filter %} or {% set x | f %} block's filter chain starts
  // from.
  std::vector<Value> block_input_;
  std::vector<std::weak_ptr<Namespace>> namespaces_;
  std::shared_ptr<Frame> root_;  // the template's frame (for blocks)
};

// ---- builtins (jinja_builtins.cc) ------------------------------------------

// Python's binary operators (op: kAdd ... kPow) and `in`.
absl::StatusOr<Value> Arith(Interp& in, Tok op, const Value& a, const Value& b);
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
absl::StatusOr<Value> Negate(const Value& v);
absl::StatusOr<Value> SliceValue(Interp& in, const Value& obj,
                                 const Value& start, const Value& stop,
                                 const Value& step);
// The global functions (range, dict, namespace, cycler, joiner,
// raise_exception, strftime_now), or undefined.
Value Global(std::string_view name);
absl::StatusOr<Value> CallFilter(Interp& in, std::string_view name, Value input,
                                 CallArgs args);
absl::StatusOr<bool> CallTest(Interp& in, std::string_view name,
                              const Value& input, CallArgs args);
// A method of a str, dict, list or tuple (`obj.name`), or a loop's
// cycle/changed; nullopt when obj has no such attribute.
std::optional<Value> BoundMethod(const Value& obj, std::string_view name);
// Mutating methods the immutable sandbox refuses (list.append, dict.pop...).
bool IsUnsafeMethod(const Value& obj, std::string_view name);

// The loop object's attributes and methods (jinja_eval.cc).
absl::StatusOr<Value> LoopAttr(const Value& loop, std::string_view name);
absl::StatusOr<Value> LoopCycle(const Value& loop, const CallArgs& args);
Value LoopChanged(const Value& loop, const CallArgs& args);

}  // namespace kvserve::jinja

#endif  // KVSERVE_CORE_CHAT_JINJA_EVAL_H_
