#include "core/constrain/tool_call_grammar.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/constrain/grammar_automaton.h"
#include "core/constrain/tool_calls.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/jsonschema_reference.h"
#include "tests/testing/random_sentence.h"

namespace kvserve::constrain {
namespace {

using ::testing::HasSubstr;
using Mode = ToolChoice::Mode;

const std::vector<ToolSpec>& Tools() {
  static const auto* const tools = new std::vector<ToolSpec>{
      {"get_weather",
       R"({"type": "object", "properties": {"city": {"type": "string",
           "minLength": 1, "maxLength": 20}, "days": {"type": "integer",
           "minimum": 1, "maximum": 7}, "unit": {"enum": ["C", "F"]}},
           "required": ["city", "days"], "additionalProperties": false})"},
      {"search",
       R"({"type": "object", "properties": {"query": {"type": "string"},
           "filters": {"type": "array", "items": {"type": "string",
           "pattern": "^[a-z]+$"}, "maxItems": 3}}, "required": ["query"]})"},
      {"ping", ""},
  };
  return *tools;
}

std::string ParametersOf(const std::string& name) {
  for (const ToolSpec& t : Tools()) {
    if (t.name == name) {
      // No parameters: none (arguments {}).
      return t.parameters_json.empty() ? R"({"maxProperties": 0})"
                                       : t.parameters_json;
    }
  }
  ADD_FAILURE() << "no tool " << name;
  return "{}";
}

ReplyFormat Format(ToolCallFormat tools, bool reasoning = false,
                   bool reasoning_open = false) {
  ReplyFormat f;
  f.tools = tools;
  f.reasoning = reasoning;
  f.reasoning_open = reasoning_open;
  return f;
}

// Random replies of the grammar for `choice`, each read back by
// ParseReply: the calls it holds (at least one; exactly one unless
// `parallel`), each of an allowed function, and every call's arguments
// validate against its parameters (Python's jsonschema). Returns the
// replies' calls.
std::vector<ToolCall> CheckReplies(const ReplyFormat& format,
                                   const ToolChoice& choice, bool parallel,
                                   std::string_view prefix = "",
                                   int replies = 30) {
  absl::StatusOr<ToolCallConstraint> g =
      ToolCallGrammar(format, Tools(), choice, parallel);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok() || g->grammar == nullptr) return {};
  GrammarAutomaton a(g->grammar);
  std::mt19937 rng(7);
  ParseOptions options;
  options.format = format;
  options.tools = true;
  std::vector<ToolCall> all;
  std::vector<testing::SchemaCheck> checks;
  for (int i = 0; i < replies; ++i) {
    // Fewer random bytes when the completion is too far to find (inside
    // a string of an open-ended object, say).
    std::optional<std::string> text;
    for (int bytes = 20 + i * 10; !text.has_value() && bytes > 0; bytes /= 2) {
      text = testing::RandomSentence(a, rng, bytes, 5000, prefix);
    }
    if (!text.has_value()) {
      ADD_FAILURE() << "no sentence";
      continue;
    }
    // A lazy grammar's sentences begin with a trigger.
    if (!g->triggers.empty()) {
      EXPECT_TRUE(std::any_of(
          g->triggers.begin(), g->triggers.end(),
          [&](const std::string& t) { return text->rfind(t, 0) == 0; }))
          << *text;
    }
    const ParsedReply r = ParseReply(options, *text, /*partial=*/false);
    EXPECT_GE(r.calls.size(), 1) << *text;
    if (!parallel) {
      EXPECT_LE(r.calls.size(), 1) << *text;
    }
    EXPECT_EQ(r.content, "") << *text;
    for (const ToolCall& c : r.calls) {
      if (choice.mode == Mode::kFunction) {
        EXPECT_EQ(c.name, choice.function);
      }
      checks.push_back({ParametersOf(c.name), c.arguments});
      all.push_back(c);
    }
  }
  if (const std::string why = testing::JsonschemaUnavailable(); !why.empty()) {
    ADD_FAILURE() << why;  // Debian's python3-jsonschema is a test dependency
    return all;
  }
  absl::StatusOr<std::vector<std::string>> verdicts =
      testing::ValidateWithJsonschema(checks);
  EXPECT_TRUE(verdicts.ok()) << verdicts.status();
  for (size_t i = 0; verdicts.ok() && i < verdicts->size(); ++i) {
    EXPECT_EQ((*verdicts)[i], "") << checks[i].instance;
  }
  return all;
}

TEST(ToolCallGrammarTest, RequiredCallsParseAndValidateInEveryFormat) {
  for (ToolCallFormat f :
       {ToolCallFormat::kGeneric, ToolCallFormat::kLlama3,
        ToolCallFormat::kHermes, ToolCallFormat::kMistral,
        ToolCallFormat::kDeepSeekR1, ToolCallFormat::kCommandR,
        ToolCallFormat::kFunctionaryV3}) {
    SCOPED_TRACE(std::string(ToolCallFormatName(f)));
    ToolChoice required;
    required.mode = Mode::kRequired;
    const std::vector<ToolCall> calls =
        CheckReplies(Format(f), required, /*parallel=*/true);
    // Random replies reach every function.
    for (const ToolSpec& t : Tools()) {
      EXPECT_TRUE(
          std::any_of(calls.begin(), calls.end(),
                      [&](const ToolCall& c) { return c.name == t.name; }))
          << t.name;
    }
    CheckReplies(Format(f), required, /*parallel=*/false);
  }
}

TEST(ToolCallGrammarTest, ANamedFunctionIsTheOnlyOneCalled) {
  ToolChoice named;
  named.mode = Mode::kFunction;
  named.function = "search";
  CheckReplies(Format(ToolCallFormat::kHermes), named, /*parallel=*/true);
  CheckReplies(Format(ToolCallFormat::kGeneric), named, /*parallel=*/false);
}

TEST(ToolCallGrammarTest, ReasoningComesFirst) {
  ToolChoice required;
  required.mode = Mode::kRequired;
  // DeepSeek R1's prompt opens the reasoning; Qwen 3's reply may. (The
  // replies' reasoning is given: no search completes free text.)
  CheckReplies(Format(ToolCallFormat::kDeepSeekR1, true, true), required,
               /*parallel=*/true, "Weather? </think>\n\n");
  CheckReplies(Format(ToolCallFormat::kHermes, true, false), required,
               /*parallel=*/true, "<think>a <b> </thin </think>\n\n");
  CheckReplies(Format(ToolCallFormat::kHermes, true, false), required,
               /*parallel=*/true);
  // The reasoning cannot close early or hold its closer.
  absl::StatusOr<ToolCallConstraint> g = ToolCallGrammar(
      Format(ToolCallFormat::kHermes, true, true), Tools(), required, true);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(g->triggers.empty());
  GrammarAutomaton a(g->grammar);
  EXPECT_GE(a.Walk(a.start(), "a < b </thi"), 0);
  EXPECT_GE(a.Walk(a.start(), "x</think>\n\n<tool_call>"), 0);
  EXPECT_LT(a.Walk(a.start(), "x</think>y"), 0);
}

// "auto": in the generic format the reply is calls or {"response": ...};
// in the others the grammar is lazy, switched on at the call's opener (its
// sentences are calls that begin with a trigger), reasoning left free.
TEST(ToolCallGrammarTest, AutoIsLazyExceptInTheGenericFormat) {
  ToolChoice autoc;
  for (ToolCallFormat f :
       {ToolCallFormat::kLlama3, ToolCallFormat::kHermes,
        ToolCallFormat::kMistral, ToolCallFormat::kDeepSeekR1,
        ToolCallFormat::kCommandR, ToolCallFormat::kFunctionaryV3}) {
    SCOPED_TRACE(std::string(ToolCallFormatName(f)));
    absl::StatusOr<ToolCallConstraint> g =
        ToolCallGrammar(Format(f, true, true), Tools(), autoc, true);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_NE(g->grammar, nullptr);
    EXPECT_FALSE(g->triggers.empty());
    CheckReplies(Format(f), autoc, /*parallel=*/true, "", 10);
  }
  absl::StatusOr<ToolCallConstraint> g =
      ToolCallGrammar(Format(ToolCallFormat::kGeneric), Tools(), autoc, true);
  ASSERT_TRUE(g.ok());
  ASSERT_NE(g->grammar, nullptr);
  EXPECT_TRUE(g->triggers.empty());
  GrammarAutomaton a(g->grammar);
  EXPECT_TRUE(a.CanEnd(a.Walk(a.start(), "{\"response\": \"hi\"}")));
  ParseOptions o;
  o.tools = true;
  EXPECT_EQ(ParseReply(o, "{\"response\": \"hi\"}", false).content, "hi");
  // "none", or no tools: no constraint.
  ToolChoice none;
  none.mode = Mode::kNone;
  g = ToolCallGrammar(Format(ToolCallFormat::kGeneric), Tools(), none, true);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->grammar, nullptr);
  g = ToolCallGrammar(Format(ToolCallFormat::kHermes), {}, autoc, true);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->grammar, nullptr);
}

TEST(ToolCallGrammarTest, ParametersThatCannotBeHonouredAreRefusedByTool) {
  ToolChoice required;
  required.mode = Mode::kRequired;
  std::vector<ToolSpec> tools = Tools();
  tools.push_back({"odd", R"({"type": "object", "properties": {"n":
                     {"type": "integer", "multipleOf": 3}}})"});
  absl::StatusOr<ToolCallConstraint> g =
      ToolCallGrammar(Format(ToolCallFormat::kHermes), tools, required, true);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.status().message(), HasSubstr("tools[3].function.parameters"));
  EXPECT_THAT(g.status().message(), HasSubstr("multipleOf"));
}

// A request's tools together are bounded as one schema is: each under the
// limits, a hundred of them past them are refused naming where.
TEST(ToolCallGrammarTest, TheToolsTogetherAreBoundedAsOneSchema) {
  std::string values;
  for (int i = 0; i < 1000; ++i) {
    absl::StrAppend(&values, i == 0 ? "" : ",", "\"", std::string(90, 'a'), i,
                    "\"");
  }
  const std::string big = absl::StrCat(
      R"({"type": "object", "properties": {"v": {"enum": [)", values, "]}}}");
  std::vector<ToolSpec> tools;
  for (int i = 0; i < 100; ++i) tools.push_back({absl::StrCat("f", i), big});
  ToolChoice required;
  required.mode = Mode::kRequired;
  // One alone compiles.
  EXPECT_TRUE(ToolCallGrammar(Format(ToolCallFormat::kHermes), {tools[0]},
                              required, true)
                  .ok());
  absl::StatusOr<ToolCallConstraint> g =
      ToolCallGrammar(Format(ToolCallFormat::kHermes), tools, required, true);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  // Named by the tool where the budget ran out.
  EXPECT_THAT(g.status().message(), HasSubstr("`tools["));
  EXPECT_THAT(g.status().message(), HasSubstr("more than"));
}

}  // namespace
}  // namespace kvserve::constrain
