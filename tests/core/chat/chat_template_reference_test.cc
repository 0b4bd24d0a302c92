// The chat templates of ../shared/templates rendered by kvserve::ChatTemplate
// and by Python's jinja2 in transformers' environment
// (tests/testing/jinja_reference.py), byte for byte: plain and multi-turn
// conversations with and without a system message and a generation prompt,
// non-ASCII and template-like content, tool definitions and tool calls for
// the templates that take them, and the conversations a template refuses
// (raise_exception: INVALID_ARGUMENT with exactly the template's message).
//
// The reference gets the variables transformers' apply_chat_template passes
// and ChatTemplate promises (core/chat/chat_template.h): messages as dicts
// with role and content, and name, tool_call_id and tool_calls only when
// set; tools (None when absent); documents None; add_generation_prompt;
// bos_token; eos_token. Each template's cases run in one Python process.
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/chat/chat_template.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/golden_json.h"
#include "tests/testing/jinja_reference.h"
#include "tests/testing/paths.h"

namespace kvserve {
namespace {

using ::kvserve::testing::AgreesWithJinja2;
using ::kvserve::testing::Describe;
using ::kvserve::testing::Jinja2Case;
using ::kvserve::testing::Jinja2Result;
using ::kvserve::testing::Jinja2Unavailable;
using ::kvserve::testing::ReadWholeFile;
using ::kvserve::testing::RenderWithJinja2;
using ::kvserve::testing::SharedDir;

// strftime_now's clock (none of these templates reads it today).
constexpr int64_t kNowUnixSeconds = 1722004245;  // 2024-07-26 14:30:45 UTC

ChatMessage System(std::string content) { return {"system", content}; }
ChatMessage User(std::string content) { return {"user", content}; }
ChatMessage Assistant(std::string content) { return {"assistant", content}; }
ChatMessage NamedUser(std::string content, std::string name) {
  return {"user", content, name};
}
// An assistant turn calling tools (`calls` is a JSON array).
ChatMessage AssistantCalls(std::string content, std::string calls) {
  return {"assistant", content, "", "", calls};
}
ChatMessage ToolReply(std::string content, std::string tool_call_id,
                      std::string name) {
  return {"tool", content, name, tool_call_id};
}

// Two function definitions with nested parameters, a float default and
// non-ASCII text.
constexpr char kTools[] = R"([
  {"type": "function",
   "function": {
     "name": "get_weather",
     "description": "Get the current weather in a city (°C or °F).",
     "parameters": {
       "type": "object",
       "properties": {
         "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
         "days": {"type": "integer", "minimum": 1, "maximum": 7},
         "threshold": {"type": "number", "default": 0.5}
       },
       "required": ["city"]
     }
   }},
  {"type": "function",
   "function": {
     "name": "search",
     "description": "Search the web — returns snippets.",
     "parameters": {
       "type": "object",
       "properties": {
         "query": {"type": "string"},
         "filters": {
           "type": "object",
           "properties": {
             "site": {"type": "string"},
             "max_results": {"type": "integer", "default": 10}
           }
         }
       },
       "required": ["query"]
     }
   }}
])";

// Tool calls as transformers documents them: "function" with "name" and
// "arguments" as an object; ids of 9 alphanumerics (Mistral checks them).
constexpr char kOneCall[] = R"([
  {"id": "call12345", "type": "function",
   "function": {"name": "get_weather",
                "arguments": {"city": "Paris", "unit": "celsius"}}}
])";
constexpr char kTwoCalls[] = R"([
  {"id": "call12345", "type": "function",
   "function": {"name": "get_weather",
                "arguments": {"city": "Paris", "unit": "celsius"}}},
  {"id": "call67890", "type": "function",
   "function": {"name": "search",
                "arguments": {"query": "Paris events",
                              "filters": {"site": "fr", "max_results": 3}}}}
])";
constexpr char kBadIdCall[] = R"([
  {"id": "call_1", "type": "function",
   "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
])";

enum class Outcome { kRenders, kRaises, kFails };

struct ChatCase {
  std::string name;
  ChatTemplateInput input;
  Outcome expect = Outcome::kRenders;
};

ChatCase Case(std::string name, std::vector<ChatMessage> messages,
              bool add_generation_prompt, Outcome expect = Outcome::kRenders,
              std::string tools_json = "") {
  ChatCase c;
  c.name = std::move(name);
  c.input.messages = std::move(messages);
  c.input.add_generation_prompt = add_generation_prompt;
  c.input.tools_json = std::move(tools_json);
  c.input.now = absl::FromUnixSeconds(kNowUnixSeconds);
  c.expect = expect;
  return c;
}

// Template-like text, quotes, backslashes, newlines and edge spaces.
constexpr char kSpecialContent[] =
    "  {{ not a tag }} {% if %} {# nor a comment #} 'single' \"double\" "
    "\\back\\slash\n\nsecond line\t tab  ";

// The conversations every template is given. `system_ok`: the template
// accepts a system message (Gemma 2 raises).
std::vector<ChatCase> CommonCases(bool system_ok) {
  const Outcome with_system = system_ok ? Outcome::kRenders : Outcome::kRaises;
  std::vector<ChatCase> cases;
  for (const bool gen : {true, false}) {
    const std::string suffix = gen ? "/generation_prompt" : "/no_prompt";
    cases.push_back(Case("user_only" + suffix, {User("Hello!")}, gen));
    cases.push_back(
        Case("system_user" + suffix,
             {System("You are a helpful assistant."), User("What is 2+2?")},
             gen, with_system));
    cases.push_back(
        Case("multi_turn" + suffix,
             {User("Hi there."), Assistant("Hello! How can I help?"),
              User("Tell me a joke.")},
             gen));
    cases.push_back(Case("system_multi_turn" + suffix,
                         {System("Answer briefly."), User("Capital of France?"),
                          Assistant("Paris."), User("And of Italy?")},
                         gen, with_system));
    cases.push_back(Case("special_characters" + suffix,
                         {User(kSpecialContent), Assistant(kSpecialContent),
                          User(kSpecialContent)},
                         gen));
  }
  cases.push_back(
      Case("ends_with_assistant", {User("Say hi."), Assistant("Hi!")}, false));
  cases.push_back(
      Case("non_ascii",
           {User("Café crème, s'il vous plaît — 中文 😀"),
            Assistant("Voilà ! 你好 🎉 ü ß Ω"), User("Merci 🙏 — ещё раз?")},
           true));
  cases.push_back(Case("non_ascii_system",
                       {System("Réponds en français 🇫🇷."), User("Où ?")}, true,
                       with_system));
  cases.push_back(Case(
      "three_rounds",
      {User("1"), Assistant("one"), User("2"), Assistant("two"), User("3")},
      true));
  cases.push_back(Case("named_user", {NamedUser("Hi, I'm Ann.", "ann")}, true));
  cases.push_back(Case("empty_content", {User("")}, true));
  cases.push_back(
      Case("whitespace_content",
           {User("\n  padded  \n"), Assistant("  ok  "), User("\t")}, true));
  return cases;
}

// A tool round trip: the user asks, the assistant calls `calls`, each call
// gets a tool reply, the assistant answers, the user follows up.
std::vector<ChatMessage> ToolConversation(bool with_system, bool two_calls) {
  std::vector<ChatMessage> m;
  if (with_system) m.push_back(System("You are a weather bot."));
  m.push_back(User("What's the weather in Paris, and any events?"));
  m.push_back(AssistantCalls("", two_calls ? kTwoCalls : kOneCall));
  m.push_back(ToolReply(R"({"temperature": 21, "condition": "sunny"})",
                        "call12345", "get_weather"));
  if (two_calls) {
    m.push_back(
        ToolReply("Jazz festival — Saturday 20:00", "call67890", "search"));
  }
  m.push_back(Assistant("It's 21°C and sunny in Paris."));
  m.push_back(User("Thanks!"));
  return m;
}

struct Family {
  const char* name;  // test name
  const char* file;  // in ../shared/templates
  const char* bos_token;
  const char* eos_token;
  std::vector<ChatCase> (*cases)();
};

std::vector<ChatCase> Llama31Cases() {
  std::vector<ChatCase> c = CommonCases(true);
  c.push_back(Case("tools_one_call", ToolConversation(true, false), true,
                   Outcome::kRenders, kTools));
  c.push_back(Case("tools_one_call_no_system", ToolConversation(false, false),
                   false, Outcome::kRenders, kTools));
  c.push_back(Case("tools_offered_not_called", {User("Weather in Oslo?")}, true,
                   Outcome::kRenders, kTools));
  c.push_back(
      Case("tool_reply_without_tools", ToolConversation(false, false), true));
  c.push_back(Case("tools_two_calls_refused", ToolConversation(false, true),
                   true, Outcome::kRaises, kTools));
  c.push_back(Case("tools_without_user_message_refused",
                   {System("Only a system message.")}, true, Outcome::kRaises,
                   kTools));
  c.push_back(Case("no_messages", {}, true, Outcome::kFails));
  return c;
}

std::vector<ChatCase> Qwen25Cases() {
  std::vector<ChatCase> c = CommonCases(true);
  c.push_back(Case("tools_parallel_calls", ToolConversation(true, true), true,
                   Outcome::kRenders, kTools));
  c.push_back(Case("tools_default_system", ToolConversation(false, true), false,
                   Outcome::kRenders, kTools));
  c.push_back(Case("tools_one_call", ToolConversation(false, false), true,
                   Outcome::kRenders, kTools));
  c.push_back(Case("tool_call_with_content",
                   {User("Weather?"), AssistantCalls("Let me check.", kOneCall),
                    ToolReply("sunny", "call12345", "get_weather")},
                   true, Outcome::kRenders, kTools));
  c.push_back(
      Case("tool_reply_without_tools", ToolConversation(false, true), true));
  c.push_back(Case("late_system_message",
                   {User("a"), System("Now be terse."), User("b")}, true));
  c.push_back(Case("no_messages", {}, true, Outcome::kFails));
  return c;
}

std::vector<ChatCase> MistralNemoCases() {
  std::vector<ChatCase> c = CommonCases(true);
  c.push_back(Case("tools_one_call", ToolConversation(false, false), true,
                   Outcome::kRenders, kTools));
  c.push_back(Case("tools_two_calls_with_system", ToolConversation(true, true),
                   true, Outcome::kRenders, kTools));
  c.push_back(Case("tools_offered_not_called", {User("Weather in Oslo?")}, true,
                   Outcome::kRenders, kTools));
  c.push_back(Case("bad_tool_call_id_refused",
                   {User("Weather?"), AssistantCalls("", kBadIdCall)}, true,
                   Outcome::kRaises, kTools));
  c.push_back(Case("bad_tool_reply_id_refused",
                   {User("Weather?"), AssistantCalls("", kOneCall),
                    ToolReply("sunny", "call_1", "get_weather")},
                   true, Outcome::kRaises, kTools));
  c.push_back(Case("two_users_refused", {User("a"), User("b")}, true,
                   Outcome::kRaises));
  c.push_back(Case("assistant_first_refused",
                   {System("s"), Assistant("a"), User("b")}, true,
                   Outcome::kRaises));
  c.push_back(Case("unknown_role_refused", {User("a"), {"developer", "b"}},
                   true, Outcome::kRaises));
  c.push_back(Case("no_messages", {}, true, Outcome::kFails));
  return c;
}

std::vector<ChatCase> Gemma2Cases() {
  std::vector<ChatCase> c = CommonCases(false);
  c.push_back(Case("two_users_refused", {User("a"), User("b")}, true,
                   Outcome::kRaises));
  c.push_back(Case("assistant_first_refused", {Assistant("a"), User("b")}, true,
                   Outcome::kRaises));
  c.push_back(Case("tool_reply_refused", ToolConversation(false, false), true,
                   Outcome::kRaises));
  c.push_back(Case("no_messages", {}, true, Outcome::kFails));
  return c;
}

std::vector<ChatCase> Phi35Cases() {
  std::vector<ChatCase> c = CommonCases(true);
  c.push_back(Case("empty_system_skipped",
                   {System(""), User("Hi"), Assistant("Hello")}, false));
  c.push_back(Case("other_roles_skipped", ToolConversation(true, true), true,
                   Outcome::kRenders, kTools));
  c.push_back(Case("no_messages", {}, true));
  c.push_back(Case("no_messages_no_prompt", {}, false));
  return c;
}

std::vector<ChatCase> DeepSeekR1Cases() {
  std::vector<ChatCase> c = CommonCases(true);
  c.push_back(
      Case("thinking_removed",
           {User("2+2?"), Assistant("<think>\nTwo and two.\n</think>\n\n4"),
            User("3+3?")},
           true));
  c.push_back(Case("tool_outputs", ToolConversation(true, true), true));
  c.push_back(Case("tool_output_last",
                   {User("Weather?"), AssistantCalls("", kOneCall),
                    ToolReply("sunny", "call12345", "get_weather")},
                   true));
  c.push_back(Case("system_after_user",
                   {User("a"), System("late system"), User("b")}, true));
  c.push_back(Case("no_messages", {}, true));
  return c;
}

void PrintTo(const Family& family, std::ostream* os) { *os << family.name; }

const Family kFamilies[] = {
    {"Llama31", "meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>",
     "<|eot_id|>", Llama31Cases},
    {"Qwen25", "Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>", Qwen25Cases},
    {"MistralNemo", "mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>",
     MistralNemoCases},
    {"Gemma2", "google-gemma-2-2b-it.jinja", "<bos>", "<eos>", Gemma2Cases},
    {"Phi35", "microsoft-Phi-3.5-mini-instruct.jinja", "<s>", "<|endoftext|>",
     Phi35Cases},
    {"DeepSeekR1DistillQwen", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
     "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", DeepSeekR1Cases},
};

// The variables transformers' apply_chat_template renders with, as
// ChatTemplate promises to build them; nullopt for malformed case JSON.
std::optional<nlohmann::ordered_json> TransformersContext(
    const ChatTemplateInput& input, const Family& family) {
  using Json = nlohmann::ordered_json;
  Json messages = Json::array();
  for (const ChatMessage& m : input.messages) {
    Json message = Json::object();
    message["role"] = m.role;
    message["content"] = m.content;
    if (!m.name.empty()) message["name"] = m.name;
    if (!m.tool_call_id.empty()) message["tool_call_id"] = m.tool_call_id;
    if (!m.tool_calls_json.empty()) {
      message["tool_calls"] = Json::parse(m.tool_calls_json, nullptr, false);
      if (message["tool_calls"].is_discarded()) return std::nullopt;
    }
    messages.push_back(std::move(message));
  }
  Json context = Json::object();
  context["messages"] = std::move(messages);
  if (input.tools_json.empty()) {
    context["tools"] = nullptr;
  } else {
    context["tools"] = Json::parse(input.tools_json, nullptr, false);
    if (context["tools"].is_discarded()) return std::nullopt;
  }
  context["documents"] = nullptr;
  context["add_generation_prompt"] = input.add_generation_prompt;
  context["bos_token"] = family.bos_token;
  context["eos_token"] = family.eos_token;
  return context;
}

class ChatTemplateReferenceTest : public ::testing::TestWithParam<Family> {};

TEST_P(ChatTemplateReferenceTest, RendersLikeTransformers) {
  const Family& family = GetParam();
  if (const std::optional<std::string> reason = Jinja2Unavailable()) {
    GTEST_SKIP() << "no reference renderer: " << *reason;
  }
  const std::string path = SharedDir() + "/templates/" + family.file;
  const std::optional<std::string> source = ReadWholeFile(path);
  if (!source) GTEST_SKIP() << path << " is missing (../shared/templates)";

  const std::vector<ChatCase> cases = family.cases();
  std::vector<Jinja2Case> reference_cases;
  for (const ChatCase& c : cases) {
    std::optional<nlohmann::ordered_json> context =
        TransformersContext(c.input, family);
    ASSERT_TRUE(context.has_value()) << c.name << ": malformed case JSON";
    reference_cases.push_back({*source, *std::move(context), kNowUnixSeconds});
  }
  absl::StatusOr<std::vector<Jinja2Result>> reference =
      RenderWithJinja2(reference_cases);
  ASSERT_TRUE(reference.ok()) << "reference renderer: " << reference.status();

  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat_template =
      ChatTemplate::Create(*source, family.bos_token, family.eos_token);
  ASSERT_TRUE(chat_template.ok()) << path << ": " << chat_template.status();

  for (size_t i = 0; i < cases.size(); ++i) {
    const ChatCase& c = cases[i];
    const Jinja2Result& ref = (*reference)[i];
    SCOPED_TRACE(c.name);
    // The case must do in the reference what it is meant to test.
    const Outcome got = ref.ok       ? Outcome::kRenders
                        : ref.raised ? Outcome::kRaises
                                     : Outcome::kFails;
    if (got != c.expect) {
      ADD_FAILURE() << "the case is broken: jinja2 gave " << Describe(ref);
      continue;
    }
    const absl::StatusOr<std::string> ours = (*chat_template)->Render(c.input);
    EXPECT_TRUE(AgreesWithJinja2(ref, ours));
    if (!ref.ok && !ours.ok()) {
      EXPECT_EQ(ours.status().code(), absl::StatusCode::kInvalidArgument)
          << ours.status();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SharedTemplates, ChatTemplateReferenceTest,
                         ::testing::ValuesIn(kFamilies),
                         [](const ::testing::TestParamInfo<Family>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace kvserve
