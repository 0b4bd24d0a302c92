#include "core/chat/chat_template.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<ChatTemplate> MustCreate(std::string source,
                                         std::string bos = "<s>",
                                         std::string eos = "</s>") {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> t =
      ChatTemplate::Create(std::move(source), std::move(bos), std::move(eos));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

ChatTemplateInput Conversation() {
  ChatTemplateInput input;
  input.messages = {{.role = "system", .content = "Be brief."},
                    {.role = "user", .content = "Hi"},
                    {.role = "assistant", .content = "Hello!"}};
  return input;
}

TEST(ChatTemplateTest, ChatMl) {
  std::unique_ptr<ChatTemplate> t = MustCreate(kChatMlTemplate);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->source(), kChatMlTemplate);
  ChatTemplateInput input = Conversation();
  absl::StatusOr<std::string> text = t->Render(input);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>assistant\n");
  input.add_generation_prompt = false;
  text = t->Render(input);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text,
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n");
}

TEST(ChatTemplateTest, VariablesOfTransformers) {
  std::unique_ptr<ChatTemplate> t = MustCreate(
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|"
      "{{ tools }}|{{ documents }}|{{ messages|length }}");
  ASSERT_NE(t, nullptr);
  absl::StatusOr<std::string> text = t->Render(Conversation());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "<s>|</s>|True|None|None|3");
}

TEST(ChatTemplateTest, OptionalMessageFieldsAreAbsentUnlessSet) {
  std::unique_ptr<ChatTemplate> t = MustCreate(
      "{% for m in messages %}{{ m.keys()|list }} {{ m.name is defined }} "
      "{{ m.tool_calls is defined }}\n{% endfor %}"
      "{{ messages[1].tool_calls[0].function.arguments.city }} "
      "{{ messages[1].tool_calls|tojson }}");
  ASSERT_NE(t, nullptr);
  ChatTemplateInput input;
  input.messages = {
      {.role = "user", .content = "Weather?", .name = "ann"},
      {.role = "assistant",
       .content = "",
       .tool_calls_json =
           R"([{"id": "c1", "type": "function", "function": {"name": "w", "arguments": {"city": "Oslo", "days": 2}}}])"},
      {.role = "tool", .content = "sunny", .tool_call_id = "c1"}};
  absl::StatusOr<std::string> text = t->Render(input);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(
      *text,
      "['role', 'content', 'name'] True False\n"
      "['role', 'content', 'tool_calls'] False True\n"
      "['role', 'content', 'tool_call_id'] False False\n"
      "Oslo "
      R"([{"id": "c1", "type": "function", "function": {"name": "w", "arguments": {"city": "Oslo", "days": 2}}}])");
}

// A value nested 100,000 deep overflowed the stack in the copies and the
// conversion to template values (SIGSEGV); it is refused before parsing.
TEST(ChatTemplateTest, DeeplyNestedToolsAndToolCallsAreRefused) {
  std::unique_ptr<ChatTemplate> t =
      MustCreate("{{ tools | tojson }}{{ messages | tojson }}");
  ASSERT_NE(t, nullptr);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ChatTemplateInput input = Conversation();
  input.tools_json = deep;
  absl::StatusOr<std::string> text = t->Render(input);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("tools nests"));
  EXPECT_THAT(text.status().message(), HasSubstr("512 levels"));

  input = Conversation();
  input.messages[2].tool_calls_json = deep;
  text = t->Render(input);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("messages[2].tool_calls"));

  // 500 levels are fine.
  input = Conversation();
  input.tools_json = std::string(500, '[') + std::string(500, ']');
  EXPECT_TRUE(t->Render(input).ok());
}

TEST(ChatTemplateTest, ToolsAreObjects) {
  std::unique_ptr<ChatTemplate> t = MustCreate(
      "{% for tool in tools %}{{ tool.function.name }}:{{ tool | tojson }}"
      "{% endfor %}");
  ASSERT_NE(t, nullptr);
  ChatTemplateInput input = Conversation();
  input.tools_json =
      R"([{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": "é"}}}])";
  absl::StatusOr<std::string> text = t->Render(input);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(
      *text,
      R"(f:{"type": "function", "function": {"name": "f", "parameters": {"b": 1, "a": "é"}}})");
}

// A call's arguments sent as a JSON string (OpenAI's shape) reach the
// template as the value they encode, from every front end (HTTP, gRPC,
// kvctl, a session's log); one that is not JSON stays a string.
TEST(ChatTemplateTest, ArgumentStringsReachTheTemplateAsValues) {
  std::unique_ptr<ChatTemplate> t = MustCreate(
      "{% for m in messages %}{% for c in m.tool_calls or [] %}"
      "{{ c.function.arguments | tojson }};{% endfor %}{% endfor %}");
  ASSERT_NE(t, nullptr);
  ChatTemplateInput input = Conversation();
  input.messages[2].tool_calls_json =
      R"([{"function": {"name": "f", "arguments": "{\"z\": 1, \"a\": [2]}"}},)"
      R"( {"function": {"name": "g", "arguments": "not {json"}},)"
      R"( {"function": {"name": "h", "arguments": {"k": "v"}}}])";
  absl::StatusOr<std::string> text = t->Render(input);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, R"({"z": 1, "a": [2]};"not {json";{"k": "v"};)");
}

TEST(ChatTemplateTest, MalformedJsonNamesTheField) {
  std::unique_ptr<ChatTemplate> t = MustCreate(kChatMlTemplate);
  ASSERT_NE(t, nullptr);
  ChatTemplateInput input = Conversation();
  input.messages[2].tool_calls_json = "[{\"id\": ";
  absl::StatusOr<std::string> text = t->Render(input);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("messages[2].tool_calls"));

  input = Conversation();
  input.tools_json = "not json";
  text = t->Render(input);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("tools"));
}

TEST(ChatTemplateTest, RaiseExceptionMessageIsExact) {
  std::unique_ptr<ChatTemplate> t = MustCreate(
      "{% if messages[0].role == 'system' %}"
      "{{ raise_exception('System role not supported') }}{% endif %}");
  ASSERT_NE(t, nullptr);
  absl::StatusOr<std::string> text = t->Render(Conversation());
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(text.status().message(), "System role not supported");
}

TEST(ChatTemplateTest, ErrorsNameTheLine) {
  absl::StatusOr<std::unique_ptr<ChatTemplate>> bad =
      ChatTemplate::Create("ok\n{% for m in messages %}", "", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("line 2:"));

  std::unique_ptr<ChatTemplate> t =
      MustCreate("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}");
  ASSERT_NE(t, nullptr);
  absl::StatusOr<std::string> text = t->Render(Conversation());
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(text.status().message(), HasSubstr("line 2:"));
}

TEST(ChatTemplateTest, StrftimeNowUsesTheInputClock) {
  std::unique_ptr<ChatTemplate> t =
      MustCreate("{{ strftime_now('%d %b %Y') }}");
  ASSERT_NE(t, nullptr);
  ChatTemplateInput input = Conversation();
  // Noon UTC on 26 Jul 2024: that date in every time zone within 12 hours.
  input.now = absl::FromUnixSeconds(1721995200);
  absl::StatusOr<std::string> text = t->Render(input);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "26 Jul 2024");
}

TEST(ChatTemplateTest, GenerationTagRendersItsBody) {
  std::unique_ptr<ChatTemplate> t = MustCreate(
      "{% for m in messages %}{% if m.role == 'assistant' %}"
      "{% generation %}[{{ m.content }}]{% endgeneration %}"
      "{% else %}{{ m.content }}{% endif %}{% endfor %}");
  ASSERT_NE(t, nullptr);
  absl::StatusOr<std::string> text = t->Render(Conversation());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "Be brief.Hi[Hello!]");
}

}  // namespace
}  // namespace kvserve
