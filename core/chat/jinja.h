// A small Jinja2 interpreter for chat templates: the language as Python's
// jinja2 (3.1) implements it, in the environment Hugging Face transformers
// renders chat templates with (ImmutableSandboxedEnvironment, trim_blocks,
// lstrip_blocks, jinja2.ext.loopcontrols, the {% generation %} tag,
// transformers' tojson, globals raise_exception and strftime_now). Output is
// byte-identical to that environment's for the constructs it supports;
// anything else is an error naming the construct, never a guess.
//
// Sandboxed: templates are untrusted input. No attribute access outside
// dicts, lists and strings (and only their non-mutating methods); loops,
// recursion and output are bounded by RenderOptions.
//
// Thread-safety: a parsed Template is immutable; Render() may run
// concurrently.
#ifndef KVSERVE_CORE_CHAT_JINJA_H_
#define KVSERVE_CORE_CHAT_JINJA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace kvserve::jinja {

// A byte range [begin, end) of a text.
struct TextRange {
  size_t begin = 0;
  size_t end = 0;
  friend bool operator==(const TextRange& a, const TextRange& b) {
    return a.begin == b.begin && a.end == b.end;
  }
};

// Text and the provenance of its bytes: `literal` are the ranges that come
// from the template's own text (its source: text between tags and string
// literals, and the RenderOptions::literal_variables); the rest comes from
// the context's values (or from an operation that is not tracked, below).
// Sorted, disjoint, none empty, and no two adjacent (adjacent ranges are
// merged: two literals printed side by side are one piece of template
// text).
//
// Provenance follows a string through `+` and `~`, printing, {% set %}
// blocks, macro and call-block output and recursive loops. Every other
// operation (filters, methods, slicing, `%` formatting) makes its result
// context text, even from literals: conservative, so that the context's
// text can never be taken for the template's. REQUIRES for a caller
// relying on it: the template builds its control tokens from literals by
// concatenation only (every template in ../shared/templates does).
struct SpannedText {
  std::string text;
  std::vector<TextRange> literal;

  // Appends `s`, as template text when `is_literal`.
  void Append(std::string_view s, bool is_literal);
  // Appends `other` with its provenance.
  void Append(const SpannedText& other);
};

struct RenderOptions {
  int64_t max_output_bytes = int64_t{4} << 20;
  // Bytes of the strings, list slots and output a render builds (by
  // operators, literals, filters, methods and output), counted as they are
  // built and never given back, so also a bound on the render's peak memory.
  // Measured: the six templates of ../shared/templates build 2.7-4.4 times
  // their output (2 or 200 turns, 3 MiB of content), so 64 MiB is 16 times
  // max_output_bytes, over 3 times what the largest legitimate render needs;
  // a list doubled 40 times stops at it in well under a second (the step
  // and work limits alone let it reach 650 MB and 2 s).
  int64_t max_alloc_bytes = int64_t{64} << 20;
  // Loop iterations plus macro calls, over the whole render.
  int64_t max_steps = 1'000'000;
  // Nesting of macro calls and expression evaluation.
  int max_depth = 200;
  // strftime_now's clock (local time zone rules of the process, as Python's
  // datetime.now()); unset: the current time.
  std::optional<absl::Time> now;
  // Context keys whose string values count as the template's own text
  // (SpannedText), e.g. a chat template's bos_token and eos_token.
  std::vector<std::string> literal_variables;
};

class Node;  // the parsed tree (jinja.cc)

class Template {
 public:
  // INVALID_ARGUMENT naming line:column and what was expected.
  static absl::StatusOr<std::unique_ptr<Template>> Parse(
      std::string_view source);
  ~Template();

  // Renders with `context`'s keys as variables (a JSON object; key order is
  // kept, as Python dicts keep it). JSON null is None, arrays are lists,
  // objects are dicts, integers stay ints and other numbers floats.
  // raise_exception(msg) fails with INVALID_ARGUMENT whose message is
  // exactly msg; other errors are INVALID_ARGUMENT naming the construct and
  // its line ("line 3: 'foo' is undefined", "line 7: loop limit of 1000000
  // steps reached").
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderOptions& options = {}) const;
  // Render() with the provenance of the output's bytes.
  absl::StatusOr<SpannedText> RenderSpanned(
      const nlohmann::ordered_json& context,
      const RenderOptions& options = {}) const;

 private:
  Template();
  std::unique_ptr<Node> root_;
  friend class Parser;
};

// The message of a status made by raise_exception (so callers can tell a
// template's own refusal from an interpreter error): true for those.
bool IsRaisedException(const absl::Status& status);

}  // namespace kvserve::jinja

#endif  // KVSERVE_CORE_CHAT_JINJA_H_
