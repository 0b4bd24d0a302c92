#include "core/constrain/tool_calls.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/paths.h"

namespace kvserve::constrain {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::IsEmpty;

ParseOptions Options(ToolCallFormat tools, bool reasoning = false,
                     bool reasoning_open = false) {
  ParseOptions o;
  o.format.tools = tools;
  o.format.reasoning = reasoning;
  o.format.reasoning_open = reasoning_open;
  o.tools = true;
  return o;
}

// Name and arguments (parsed, so that spacing does not matter).
struct Call {
  std::string name;
  nlohmann::json arguments;
};

std::vector<Call> Calls(const ParsedReply& r) {
  std::vector<Call> out;
  for (const ToolCall& c : r.calls) {
    nlohmann::json args = nlohmann::json::parse(c.arguments, nullptr, false);
    EXPECT_FALSE(args.is_discarded()) << c.arguments;
    out.push_back({c.name, args});
  }
  return out;
}

MATCHER_P2(IsCall, name, arguments_json, "") {
  return arg.name == name &&
         arg.arguments == nlohmann::json::parse(arguments_json);
}

// The reply fed in pieces cut at `cuts`: the deltas put together are the
// whole reply, and every call's id and name come once, first.
ParsedReply Streamed(const ParseOptions& options, const std::string& text,
                     const std::vector<size_t>& cuts) {
  ReplyStream stream(options);
  ParsedReply got;
  auto add = [&](const ReplyDelta& d) {
    got.content += d.content;
    got.reasoning += d.reasoning;
    for (const ReplyDelta::Call& c : d.calls) {
      if (c.index == static_cast<int>(got.calls.size())) {
        EXPECT_FALSE(c.id.empty());
        EXPECT_FALSE(c.name.empty());
        got.calls.push_back({c.id, c.name, ""});
      } else {
        EXPECT_LT(c.index, static_cast<int>(got.calls.size()));
        EXPECT_TRUE(c.id.empty());
        EXPECT_TRUE(c.name.empty());
      }
      got.calls[c.index].arguments += c.arguments;
    }
  };
  size_t from = 0;
  for (size_t cut : cuts) {
    add(stream.Push(std::string_view(text).substr(from, cut - from)));
    from = cut;
  }
  add(stream.Push(std::string_view(text).substr(from)));
  add(stream.Finish());
  const ParsedReply& sent = stream.sent();
  EXPECT_EQ(got.content, sent.content);
  EXPECT_EQ(got.reasoning, sent.reasoning);
  EXPECT_EQ(got.calls.size(), sent.calls.size());
  for (size_t i = 0; i < got.calls.size() && i < sent.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].id, sent.calls[i].id);
    EXPECT_EQ(got.calls[i].arguments, sent.calls[i].arguments);
  }
  return got;
}

// Parses `text` whole, then streamed cut at every byte (in two pieces, and
// one byte at a time): every way gives the same reply.
ParsedReply ParseEveryWay(const ParseOptions& options,
                          const std::string& text) {
  const ParsedReply whole = ParseReply(options, text, /*partial=*/false);
  auto same = [&](const ParsedReply& r, const std::string& how) {
    EXPECT_EQ(r.content, whole.content) << how;
    EXPECT_EQ(r.reasoning, whole.reasoning) << how;
    ASSERT_EQ(r.calls.size(), whole.calls.size()) << how;
    for (size_t i = 0; i < r.calls.size(); ++i) {
      EXPECT_EQ(r.calls[i].name, whole.calls[i].name) << how;
      EXPECT_EQ(r.calls[i].arguments, whole.calls[i].arguments) << how;
    }
  };
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    same(Streamed(options, text, {cut}), "cut at " + std::to_string(cut));
  }
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  same(Streamed(options, text, every), "a byte at a time");
  return whole;
}

TEST(ToolCallsTest, HermesCallsAfterText) {
  const ParsedReply r = ParseEveryWay(
      Options(ToolCallFormat::kHermes),
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n"
      "</tool_call>");
  EXPECT_EQ(r.content, "Let me look.");
  EXPECT_THAT(
      Calls(r),
      ElementsAre(IsCall("get_weather", R"({"city": "Paris", "days": [1, 2]})"),
                  IsCall("get_time", R"({"tz": "CET"})")));
  for (const ToolCall& c : r.calls) EXPECT_TRUE(c.id.empty());
}

TEST(ToolCallsTest, ArgumentsAreTheTextAsWritten) {
  const ParsedReply r = ParseReply(
      Options(ToolCallFormat::kHermes),
      "<tool_call>{\"arguments\": {\"q\": \"a \\\"b\\\" }{\"}, \"name\": "
      "\"search\"}</tool_call>",
      false);
  ASSERT_EQ(r.calls.size(), 1);
  EXPECT_EQ(r.calls[0].name, "search");
  EXPECT_EQ(r.calls[0].arguments, R"({"q": "a \"b\" }{"})");
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallsTest, ArgumentsWrittenAsAStringGiveItsContent) {
  const ParsedReply r = ParseEveryWay(
      Options(ToolCallFormat::kHermes),
      "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}"
      "</tool_call>");
  ASSERT_EQ(r.calls.size(), 1);
  EXPECT_EQ(r.calls[0].arguments, R"({"x": 1})");
}

TEST(ToolCallsTest, WhatIsNotACallStaysContent) {
  const ParseOptions o = Options(ToolCallFormat::kHermes);
  EXPECT_EQ(ParseEveryWay(o, "a <tool_call>oops</tool_call> b").content,
            "a <tool_call>oops</tool_call> b");
  EXPECT_THAT(ParseEveryWay(o, "a <tool_call>oops</tool_call> b").calls,
              IsEmpty());
  // A call object without a name is text too.
  EXPECT_EQ(
      ParseEveryWay(o, "<tool_call>{\"arguments\": {}}</tool_call>").content,
      "<tool_call>{\"arguments\": {}}</tool_call>");
  // No tools offered: nothing is parsed.
  ParseOptions none = o;
  none.tools = false;
  const std::string text =
      "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
  EXPECT_EQ(ParseEveryWay(none, text).content, text);
}

TEST(ToolCallsTest, APartialReplyHoldsWhatMayOpenACall) {
  const ParseOptions o = Options(ToolCallFormat::kHermes);
  EXPECT_EQ(ParseReply(o, "Sure <tool_c", true).content, "Sure");
  EXPECT_EQ(ParseReply(o, "Sure <tool_c", false).content, "Sure <tool_c");
  EXPECT_EQ(ParseReply(o, "Sure <tools", true).content, "Sure <tools");
  // The call is given once its name is known, arguments as written.
  ParsedReply r = ParseReply(
      o, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1", true);
  ASSERT_EQ(r.calls.size(), 1);
  EXPECT_EQ(r.calls[0].name, "f");
  EXPECT_EQ(r.calls[0].arguments, "{\"a\": 1");
  EXPECT_THAT(ParseReply(o, "<tool_call>{\"name\": \"f", true).calls,
              IsEmpty());
}

TEST(ToolCallsTest, OnlyTheFirstCallWhenParallelCallsAreOff) {
  ParseOptions o = Options(ToolCallFormat::kHermes);
  o.single_call = true;
  const ParsedReply r = ParseEveryWay(
      o,
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>"
      "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>");
  EXPECT_THAT(Calls(r), ElementsAre(IsCall("a", "{}")));
}

TEST(ToolCallsTest, Llama3JsonAndPythonTag) {
  const ParseOptions o = Options(ToolCallFormat::kLlama3);
  EXPECT_THAT(Calls(ParseEveryWay(o,
                                  "{\"name\": \"get_weather\", \"parameters\": "
                                  "{\"city\": \"Oslo\"}}")),
              ElementsAre(IsCall("get_weather", R"({"city": "Oslo"})")));
  EXPECT_THAT(
      Calls(ParseEveryWay(
          o,
          " {\"type\": \"function\", \"name\": \"a\", \"parameters\": {}};"
          " {\"name\": \"b\", \"parameters\": {\"x\": true}}")),
      ElementsAre(IsCall("a", "{}"), IsCall("b", R"({"x": true})")));
  EXPECT_THAT(Calls(ParseEveryWay(
                  o, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}")),
              ElementsAre(IsCall("f", "{}")));
  EXPECT_THAT(Calls(ParseEveryWay(
                  o, "<|python_tag|>brave_search.call(query=\"kv cache\")")),
              ElementsAre(IsCall("brave_search", R"({"query": "kv cache"})")));
  EXPECT_THAT(Calls(ParseEveryWay(o, "<|python_tag|>print(\"hi\")\n")),
              ElementsAre(IsCall("python", R"({"code": "print(\"hi\")\n"})")));
  // JSON that is not a call is the answer; so is a brace inside text.
  EXPECT_EQ(ParseEveryWay(o, "{\"answer\": 42}").content, "{\"answer\": 42}");
  EXPECT_THAT(ParseEveryWay(o, "{\"answer\": 42}").calls, IsEmpty());
  EXPECT_EQ(ParseEveryWay(o, "Use {\"name\": \"x\"} here").content,
            "Use {\"name\": \"x\"} here");
}

TEST(ToolCallsTest, Mistral) {
  const ParsedReply r = ParseEveryWay(
      Options(ToolCallFormat::kMistral),
      "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}, "
      "\"id\": \"abc123XYZ\"}, {\"name\": \"neg\", \"arguments\": {\"a\": "
      "3}, \"id\": \"def456UVW\"}]");
  EXPECT_THAT(Calls(r), ElementsAre(IsCall("add", R"({"a": 1, "b": 2})"),
                                    IsCall("neg", R"({"a": 3})")));
  EXPECT_EQ(r.calls[0].id, "abc123XYZ");
  EXPECT_EQ(r.calls[1].id, "def456UVW");
  EXPECT_EQ(r.content, "");
}

TEST(ToolCallsTest, DeepSeekR1WithReasoning) {
  const ParsedReply r = ParseEveryWay(
      Options(ToolCallFormat::kDeepSeekR1, /*reasoning=*/true,
              /*reasoning_open=*/true),
      "The user wants weather.\n</think>\n\nChecking."
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"city\": \"Rome\"}\n```<｜tool▁call▁end｜>\n"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>");
  EXPECT_EQ(r.reasoning, "The user wants weather.");
  EXPECT_EQ(r.content, "Checking.");
  EXPECT_THAT(Calls(r),
              ElementsAre(IsCall("get_weather", R"({"city": "Rome"})"),
                          IsCall("get_time", "{}")));
}

TEST(ToolCallsTest, CommandR) {
  const ParsedReply r = ParseEveryWay(
      Options(ToolCallFormat::kCommandR, /*reasoning=*/true),
      "<|START_THINKING|>I will search.<|END_THINKING|><|START_ACTION|>[\n"
      "{\"tool_call_id\": \"0\", \"tool_name\": \"search\", \"parameters\": "
      "{\"q\": \"x\"}}\n]<|END_ACTION|>");
  EXPECT_EQ(r.reasoning, "I will search.");
  EXPECT_THAT(Calls(r), ElementsAre(IsCall("search", R"({"q": "x"})")));
  EXPECT_EQ(r.calls[0].id, "0");
}

TEST(ToolCallsTest, Functionary) {
  const ParseOptions o = Options(ToolCallFormat::kFunctionaryV3);
  const ParsedReply v32 =
      ParseEveryWay(o,
                    ">>>all\nI'll check.>>>get_weather\n{\"city\": \"Lima\"}"
                    ">>>get_time\n{}");
  EXPECT_THAT(Calls(v32),
              ElementsAre(IsCall("get_weather", R"({"city": "Lima"})"),
                          IsCall("get_time", "{}")));
  const ParsedReply v31 = ParseEveryWay(
      o, "Sure.<function=get_weather>{\"city\": \"Lima\"}</function>");
  EXPECT_EQ(v31.content, "Sure.");
  EXPECT_THAT(Calls(v31),
              ElementsAre(IsCall("get_weather", R"({"city": "Lima"})")));
}

TEST(ToolCallsTest, Generic) {
  const ParseOptions o = Options(ToolCallFormat::kGeneric);
  EXPECT_THAT(
      Calls(ParseEveryWay(o,
                          "{\"tool_calls\": [{\"name\": \"f\", "
                          "\"arguments\": {\"n\": 1}}, {\"name\": \"g\", "
                          "\"arguments\": {}}]}")),
      ElementsAre(IsCall("f", R"({"n": 1})"), IsCall("g", "{}")));
  EXPECT_THAT(Calls(ParseEveryWay(
                  o, "{\"tool_call\": {\"name\": \"f\", \"arguments\": {}}}")),
              ElementsAre(IsCall("f", "{}")));
  const ParsedReply text = ParseEveryWay(
      o, "{\"response\": \"Hello \\\"world\\\" \\u00e9\\ud83d\\ude00\"}");
  EXPECT_EQ(text.content, "Hello \"world\" \u00e9\U0001F600");
  EXPECT_THAT(text.calls, IsEmpty());
  EXPECT_EQ(ParseEveryWay(o, "plain words").content, "plain words");
}

TEST(ToolCallsTest, ReasoningKeptInlineOrSplit) {
  ParseOptions o = Options(ToolCallFormat::kHermes, /*reasoning=*/true);
  const std::string text = "<think>\nhmm\n</think>\n\nHello";
  ParsedReply r = ParseEveryWay(o, text);
  EXPECT_EQ(r.reasoning, "hmm");
  EXPECT_EQ(r.content, "Hello");
  o.split_reasoning = false;
  r = ParseEveryWay(o, text);
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, text);
  // Unclosed (max_tokens came first): all of it is reasoning.
  o.split_reasoning = true;
  r = ParseEveryWay(o, "<think>still thinking");
  EXPECT_EQ(r.reasoning, "still thinking");
  EXPECT_EQ(r.content, "");
  // A tool call inside the reasoning is not a call.
  r = ParseEveryWay(
      o,
      "<think><tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
      "</think>ok");
  EXPECT_THAT(r.calls, IsEmpty());
  EXPECT_EQ(r.content, "ok");
}

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(kvserve::testing::SharedDir() + "/templates/" + name);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_FALSE(s.str().empty()) << name;
  return s.str();
}

TEST(ToolCallsTest, FormatsDetectedFromTheSharedTemplates) {
  struct Case {
    const char* file;
    ToolCallFormat format;
    bool reasoning;
  };
  for (const Case& c : std::vector<Case>{
           {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes, false},
           {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
            ToolCallFormat::kDeepSeekR1, true},
           {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3,
            false},
           {"mistralai-Mistral-Nemo-Instruct-2407.jinja",
            ToolCallFormat::kMistral, false},
           {"google-gemma-2-2b-it.jinja", ToolCallFormat::kGeneric, false},
           {"microsoft-Phi-3.5-mini-instruct.jinja", ToolCallFormat::kGeneric,
            false},
       }) {
    const ReplyFormat f = DetectReplyFormat(ReadTemplate(c.file));
    EXPECT_EQ(ToolCallFormatName(f.tools), ToolCallFormatName(c.format))
        << c.file;
    EXPECT_EQ(f.reasoning, c.reasoning) << c.file;
  }
  EXPECT_TRUE(ReasoningOpenAfter("<｜Assistant｜><think>\n"));
  EXPECT_FALSE(ReasoningOpenAfter("<｜Assistant｜>"));
}

TEST(ToolCallsTest, ToolsAreCheckedAndKeepTheirParametersInOrder) {
  absl::StatusOr<std::vector<ToolSpec>> tools = ParseTools(R"([
      {"type": "function", "function": {"name": "get_weather",
       "description": "d", "parameters": {"type": "object", "properties":
       {"z": {}, "a": {}}}}},
      {"function": {"name": "ping"}}])");
  ASSERT_TRUE(tools.ok()) << tools.status();
  ASSERT_EQ(tools->size(), 2);
  EXPECT_EQ((*tools)[0].name, "get_weather");
  EXPECT_EQ((*tools)[0].parameters_json,
            R"({"type":"object","properties":{"z":{},"a":{}}})");
  EXPECT_EQ((*tools)[1].parameters_json, "");
  struct Bad {
    const char* json;
    const char* message;
  };
  for (const Bad& b : std::vector<Bad>{
           {"{}", "`tools` must be an array"},
           {"[1]", "`tools[0]` must be an object"},
           {R"([{"type": "retrieval", "function": {"name": "f"}}])",
            "`tools[0].type` must be \"function\""},
           {R"([{"type": "function"}])", "`tools[0].function` must be"},
           {R"([{"function": {"name": "a b"}}])",
            "`tools[0].function.name` must be 1 to 64"},
           {R"([{"function": {"name": "f", "parameters": []}}])",
            "`tools[0].function.parameters` must be an object"},
           {R"([{"function": {"name": "f"}}, {"function": {"name": "f"}}])",
            "`tools[1].function.name` \"f\" names a tool twice"},
       }) {
    absl::StatusOr<std::vector<ToolSpec>> t = ParseTools(b.json);
    ASSERT_FALSE(t.ok()) << b.json;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()),
                ::testing::HasSubstr(b.message));
  }
  std::string many = "[";
  for (int i = 0; i <= kMaxTools; ++i) {
    absl::StrAppend(&many, i == 0 ? "" : ",", R"({"function": {"name": "f)", i,
                    R"("}})");
  }
  absl::StatusOr<std::vector<ToolSpec>> too_many = ParseTools(many + "]");
  ASSERT_FALSE(too_many.ok());
  EXPECT_THAT(std::string(too_many.status().message()),
              ::testing::HasSubstr("holds 129 functions, at most 128"));
  ToolChoice required;
  required.mode = ToolChoice::Mode::kRequired;
  EXPECT_FALSE(CheckToolChoice(required, {}).ok());
  EXPECT_TRUE(CheckToolChoice(required, *tools).ok());
  ToolChoice named;
  named.mode = ToolChoice::Mode::kFunction;
  named.function = "pong";
  EXPECT_FALSE(CheckToolChoice(named, *tools).ok());
  named.function = "ping";
  EXPECT_TRUE(CheckToolChoice(named, *tools).ok());
}

// A control token reaches the parser by its piece when it is a format's
// marker (Mistral's [TOOL_CALLS] is one), and is dropped otherwise (a BOS
// the model wrote is not text).
TEST(ToolCallsTest, ControlTokensCountOnlyAsMarkers) {
  ReplyStream stream(Options(ToolCallFormat::kMistral));
  ReplyDelta d = stream.PushControl("<s>");
  EXPECT_TRUE(d.empty());
  d = stream.Push("ok ");
  d.Append(stream.PushControl("[TOOL_CALLS]"));
  d.Append(stream.Push("[{\"name\": \"f\", \"arguments\": {\"a\""));
  d.Append(stream.Push(": 1}}]"));
  d.Append(stream.Finish());
  EXPECT_EQ(d.content, "ok");
  ASSERT_EQ(d.calls.size(), 1);  // the pieces of one call, merged
  EXPECT_EQ(d.calls[0].name, "f");
  EXPECT_EQ(d.calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(stream.sent().calls[0].arguments, "{\"a\": 1}");
  EXPECT_EQ(stream.text(),
            "ok [TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}}]");
}

// What the reply_parser fuzzer found streaming and whole parses to
// disagree on: a key written twice counts the first time; arguments cut by
// a byte JSON forbids stay as far as they were read; a generic response
// string is read leniently and alike at every length.
TEST(ToolCallsTest, StreamedAndWholeAgreeOnMalformedCalls) {
  const ParsedReply twice =
      ParseEveryWay(Options(ToolCallFormat::kMistral),
                    "[TOOL_CALLS][{\"name\": \"add\", \"name\": \"sub\", "
                    "\"arguments\": {\"a\": 1}, \"arguments\": {}}]");
  ASSERT_EQ(twice.calls.size(), 1);
  EXPECT_EQ(twice.calls[0].name, "add");
  EXPECT_EQ(twice.calls[0].arguments, "{\"a\": 1}");
  const ParsedReply cut =
      ParseEveryWay(Options(ToolCallFormat::kGeneric),
                    std::string("{\"tool_calls\": [{\"name\": \"f\", "
                                "\"arguments\": {\"x\x01\": 1}}]}"));
  ASSERT_EQ(cut.calls.size(), 1);
  EXPECT_EQ(cut.calls[0].arguments, "{\"x");
  EXPECT_EQ(ParseEveryWay(Options(ToolCallFormat::kGeneric),
                          "{\"response\": \"a\tb\x01c\\u0\"}")
                .content,
            "a\tb\x01c");
}

// Mistral's calls carry ids its template wants back (nine letters and
// digits): a streamed call waits for its id; one the model did not write
// gets nine characters too.
TEST(ToolCallsTest, MistralCallsKeepTheirIds) {
  ReplyStream stream(Options(ToolCallFormat::kMistral));
  ReplyDelta d =
      stream.Push("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"a\": 1}");
  EXPECT_TRUE(d.calls.empty());  // not before its id
  d = stream.Push(
      ", \"id\": \"abcDEF123\"}, {\"name\": \"g\", "
      "\"arguments\": {}}]");
  ASSERT_EQ(d.calls.size(), 1);
  EXPECT_EQ(d.calls[0].id, "abcDEF123");
  EXPECT_EQ(d.calls[0].arguments, "{\"a\": 1}");
  d = stream.Finish();
  ASSERT_EQ(d.calls.size(), 1);
  EXPECT_EQ(d.calls[0].index, 1);
  EXPECT_EQ(d.calls[0].id.size(), 9) << d.calls[0].id;
}

TEST(ToolCallsTest, IdsAreFresh) {
  const std::string a = NewToolCallId();
  EXPECT_EQ(a.size(), 29);
  EXPECT_EQ(a.substr(0, 5), "call_");
  EXPECT_NE(a, NewToolCallId());
}

}  // namespace
}  // namespace kvserve::constrain
