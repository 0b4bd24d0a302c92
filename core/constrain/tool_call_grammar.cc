#include "core/constrain/tool_call_grammar.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/constrain/gbnf_builder.h"
#include "core/constrain/json_grammar.h"
#include "core/constrain/json_schema.h"

namespace kvserve::constrain {
namespace {

// OpenAI's function without `parameters` takes none.
constexpr char kNoParameters[] =
    R"({"type": "object", "properties": {}, "additionalProperties": false})";

std::string Lit(std::string_view s) { return GbnfLiteral(s); }

// One call of function `name` whose arguments are rule `args`, as `f`
// writes it (the spacing ParseReply reads, and the templates print).
std::string CallExpr(ToolCallFormat f, const std::string& name,
                     const std::string& args) {
  switch (f) {
    case ToolCallFormat::kGeneric:
      return absl::StrCat(
          Lit(absl::StrCat("{\"name\": \"", name, "\", \"arguments\": ")), " ",
          args, " ", Lit("}"));
    case ToolCallFormat::kLlama3:
      return absl::StrCat(
          Lit(absl::StrCat("{\"name\": \"", name, "\", \"parameters\": ")), " ",
          args, " ", Lit("}"));
    case ToolCallFormat::kHermes:
      return absl::StrCat(Lit(absl::StrCat("<tool_call>\n{\"name\": \"", name,
                                           "\", \"arguments\": ")),
                          " ", args, " ", Lit("}\n</tool_call>"));
    case ToolCallFormat::kMistral:
      // Mistral's templates want ids of nine letters and digits.
      return absl::StrCat(
          Lit(absl::StrCat("{\"name\": \"", name, "\", \"arguments\": ")), " ",
          args, " ", Lit(", \"id\": \""), " [a-zA-Z0-9]{9} ", Lit("\"}"));
    case ToolCallFormat::kDeepSeekR1:
      return absl::StrCat(
          Lit(absl::StrCat("<｜tool▁call▁begin｜>function<｜tool▁sep｜>", name,
                           "\n```json\n")),
          " ", args, " ", Lit("\n```<｜tool▁call▁end｜>"));
    case ToolCallFormat::kCommandR:
      return absl::StrCat(Lit("{\"tool_call_id\": \""), " [0-9] ",
                          Lit(absl::StrCat("\", \"tool_name\": \"", name,
                                           "\", \"parameters\": ")),
                          " ", args, " ", Lit("}"));
    case ToolCallFormat::kFunctionaryV3:
      return absl::StrCat(Lit(absl::StrCat(">>>", name, "\n")), " ", args);
  }
  return "";
}

// The calls of a reply, each a `tool-call`.
std::string CallsExpr(ToolCallFormat f, bool parallel, bool with_response) {
  auto list = [&](std::string_view open, std::string_view sep,
                  std::string_view close) {
    std::string e = Lit(open) + " tool-call";
    if (parallel) {
      absl::StrAppend(&e, " (", sep.empty() ? "" : Lit(sep) + " ",
                      "tool-call)*");
    }
    if (!close.empty()) absl::StrAppend(&e, " ", Lit(close));
    return e;
  };
  switch (f) {
    case ToolCallFormat::kGeneric: {
      std::string calls = parallel ? list("{\"tool_calls\": [", ", ", "]}")
                                   : absl::StrCat(Lit("{\"tool_call\": "),
                                                  " tool-call ", Lit("}"));
      if (!with_response) return calls;
      return absl::StrCat("( ", calls, " | ", Lit("{\"response\": "),
                          " json-string ", Lit("}"), " )");
    }
    case ToolCallFormat::kLlama3:
    case ToolCallFormat::kHermes:
      return list("", "\n", "");
    case ToolCallFormat::kMistral:
      return list("[TOOL_CALLS][", ", ", "]");
    case ToolCallFormat::kDeepSeekR1:
      return list("<｜tool▁calls▁begin｜>", "", "<｜tool▁calls▁end｜>");
    case ToolCallFormat::kCommandR:
      return list("<|START_ACTION|>[", ", ", "]<|END_ACTION|>");
    case ToolCallFormat::kFunctionaryV3:
      return list("", "", "");
  }
  return "";
}

// A GBNF class of every character but `a` and `b`.
std::string Except(char a, char b) {
  std::string cls = "[^";
  for (char c : {a, b}) {
    if (c == ']' || c == '\\' || c == '^' || c == '-') cls.push_back('\\');
    cls.push_back(c);
  }
  return cls + "]";
}

// Text that does not contain `word` (ASCII, its first character not
// repeated in it), then `word`.
std::string TextThen(std::string_view word) {
  // After word[0..k) was seen: a character that breaks the match (and is
  // not word[0], which would start one), or word[k] and on.
  std::string tail = Except(word.back(), word[0]);
  for (size_t k = word.size() - 1; k-- > 1;) {
    tail = absl::StrCat("( ", Except(word[k], word[0]), " | ",
                        Lit(word.substr(k, 1)), " ", tail, " )");
  }
  return absl::StrCat("( ", Except(word[0], word[0]), " | ",
                      Lit(word.substr(0, 1)), "+ ", tail, " )* ", Lit(word));
}

// Where a call begins, as the grammar writes it: a lazy grammar's
// triggers.
std::vector<std::string> Openers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kGeneric:
      return {};
    case ToolCallFormat::kLlama3:
      return {"{\"name\": \""};
    case ToolCallFormat::kHermes:
      return {"<tool_call>"};
    case ToolCallFormat::kMistral:
      return {"[TOOL_CALLS]"};
    case ToolCallFormat::kDeepSeekR1:
      return {"<｜tool▁calls▁begin｜>"};
    case ToolCallFormat::kCommandR:
      return {"<|START_ACTION|>"};
    case ToolCallFormat::kFunctionaryV3:
      return {">>>"};
  }
  return {};
}

}  // namespace

absl::StatusOr<ToolCallConstraint> ToolCallGrammar(
    const ReplyFormat& format, const std::vector<ToolSpec>& tools,
    const ToolChoice& choice, bool parallel) {
  using Mode = ToolChoice::Mode;
  const ToolCallFormat f = format.tools;
  ToolCallConstraint out;
  if (choice.mode == Mode::kNone || tools.empty()) return out;
  const bool lazy = choice.mode == Mode::kAuto && f != ToolCallFormat::kGeneric;
  if (lazy) out.triggers = Openers(f);
  // One schema's limits bound all of them together: a request's tools
  // cost what one schema may.
  const JsonSchemaLimits whole;
  const absl::Time deadline = absl::Now() + whole.max_time;
  std::string rules;
  std::vector<std::string> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ToolSpec& t = tools[i];
    if (choice.mode == Mode::kFunction && t.name != choice.function) continue;
    const std::string prefix = absl::StrCat("tool", i, "-");
    JsonSchemaLimits limits = whole;
    limits.max_time = deadline - absl::Now();
    limits.max_grammar_bytes =
        whole.max_grammar_bytes - static_cast<int64_t>(rules.size());
    if (limits.max_time <= absl::ZeroDuration() ||
        limits.max_grammar_bytes <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "`tools` cannot be honoured: their parameters compile to more than "
          "a schema may (",
          absl::FormatDuration(whole.max_time), ", ", whole.max_grammar_bytes,
          " bytes of grammar), at `tools[", i, "]`"));
    }
    absl::StatusOr<std::string> args = JsonSchemaRules(
        t.parameters_json.empty() ? kNoParameters : t.parameters_json, prefix,
        limits);
    if (!args.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("`tools[", i,
                       "].function.parameters` cannot be "
                       "honoured: ",
                       args.status().message()));
    }
    rules += *args;
    calls.push_back(CallExpr(f, t.name, prefix + "root"));
  }
  absl::StrAppend(&rules, "tool-call ::= ", absl::StrJoin(calls, " | "), "\n");
  std::string reply = CallsExpr(
      f, parallel, /*with_response=*/choice.mode == Mode::kAuto && !lazy);
  // A lazy grammar starts at a call, after any reasoning.
  if (format.reasoning && !lazy) {
    const bool command_r = f == ToolCallFormat::kCommandR;
    const std::string_view open = command_r ? "<|START_THINKING|>" : "<think>";
    const std::string_view close = command_r ? "<|END_THINKING|>" : "</think>";
    absl::StrAppend(&rules, "think ::= ", TextThen(close), " ", Lit("\n\n"),
                    "\n");
    reply = format.reasoning_open
                ? absl::StrCat("think ", reply)
                : absl::StrCat("( ", Lit(open), " think )? ", reply);
  }
  std::string text = absl::StrCat("root ::= ", reply, "\n", rules);
  const std::string_view json = JsonGbnfRules();
  text.append(json.data(), json.size());
  GrammarLimits limits;
  limits.max_text_bytes = whole.max_grammar_bytes + (int64_t{64} << 10);
  limits.max_elements = int64_t{4} << 20;
  limits.max_repetition = std::max(whole.max_count, 1000);
  limits.max_time = std::max(deadline - absl::Now(), absl::Milliseconds(100));
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar =
      CompileGbnf(text, limits);
  if (!grammar.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the tools' grammar does not compile (a limit passed, or a bug in "
        "kvserve): ",
        grammar.status().message()));
  }
  out.grammar = *std::move(grammar);
  return out;
}

}  // namespace kvserve::constrain
