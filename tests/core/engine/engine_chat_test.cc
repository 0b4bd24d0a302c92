// Chat turns in-process on the built-in model (ChatML, byte vocabulary): a
// session keeps its conversation, renders it whole each turn and keeps the
// longest common token prefix, so a session turn gives the tokens of a
// stateless request carrying the whole conversation; across a restart too.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "core/chat/chat_prompt.h"
#include "core/engine/engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/builtin_model.h"
#include "tests/testing/engine_waiters.h"

namespace kvserve {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;

using testing::CollectingSink;
using testing::Waiter;

// The built-in tokenizer with one more end-of-generation token.
class ExtraEogTokenizer : public testing::ForwardingTokenizer {
 public:
  ExtraEogTokenizer(const Tokenizer* base, int32_t eog)
      : ForwardingTokenizer(base), eog_(eog) {}
  bool IsEndOfGeneration(int32_t id) const override {
    return id == eog_ || base()->IsEndOfGeneration(id);
  }

 private:
  int32_t eog_;
};

ChatMessage Msg(std::string role, std::string content) {
  return ChatMessage{.role = std::move(role), .content = std::move(content)};
}

struct Turn {
  absl::StatusOr<GenerateResult> result;
  std::vector<int32_t> tokens;
  std::string text;
};

class EngineChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kvserve_engine_chat_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }

  void Start(EngineOptions options = {}, const Tokenizer* tokenizer = nullptr) {
    engine_.reset();
    auto engine = Engine::Create(
        options, loaded_->weights.get(),
        tokenizer ? tokenizer : loaded_->tokenizer.get(), nullptr);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }
  EngineOptions Durable() {
    EngineOptions o;
    o.session_dir = dir_.string();
    return o;
  }

  std::string NewSession() {
    Waiter<SessionInfo> w;
    engine_->CreateSession(CreateSessionParams{}, w.callback());
    absl::StatusOr<SessionInfo> info = w.Wait();
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? info->id : "";
  }
  Turn Chat(std::string session_id, std::vector<ChatMessage> messages,
            bool generate = true, bool ignore_eos = true) {
    GenerateParams p;
    p.session_id = std::move(session_id);
    p.prompt = ChatInput{std::move(messages)};
    p.generate = generate;
    p.max_tokens = 6;
    p.ignore_eos = ignore_eos;
    CollectingSink sink;
    engine_->Submit(std::make_shared<GenerateCall>(std::move(p), &sink));
    Turn turn;
    turn.result = sink.Wait();
    turn.tokens = sink.tokens();
    turn.text = sink.text();
    return turn;
  }
  SessionInfo Get(std::string id) {
    Waiter<SessionInfo> w;
    engine_->GetSession(std::move(id), "", true, w.callback());
    absl::StatusOr<SessionInfo> info = w.Wait();
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : SessionInfo();
  }

  const LoadedModel* const loaded_ = &testing::BuiltinModel();
  std::filesystem::path dir_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(EngineChatTest, SessionTurnGivesTheTokensOfTheWholeConversation) {
  Start();
  const std::string id = NewSession();
  Turn first = Chat(id, {Msg("system", "Be brief."), Msg("user", "Hello")});
  ASSERT_TRUE(first.result.ok()) << first.result.status();
  ASSERT_EQ(first.tokens.size(), 6u);
  Turn second = Chat(id, {Msg("user", "And then?")});
  ASSERT_TRUE(second.result.ok()) << second.result.status();

  Turn stateless =
      Chat("", {Msg("system", "Be brief."), Msg("user", "Hello"),
                Msg("assistant", first.text), Msg("user", "And then?")});
  ASSERT_TRUE(stateless.result.ok()) << stateless.result.status();
  EXPECT_EQ(second.tokens, stateless.tokens);
  EXPECT_EQ(second.text, stateless.text);
  EXPECT_EQ(second.result->usage.prompt_tokens,
            stateless.result->usage.prompt_tokens);
  // The session kept the KV of everything the new rendering shares with it:
  // at least the first turn's prompt.
  EXPECT_GE(second.result->usage.cached_prompt_tokens,
            first.result->usage.prompt_tokens);

  const SessionInfo info = Get(id);
  EXPECT_THAT(info.messages,
              ElementsAre(Field(&ChatMessage::role, "system"),
                          Field(&ChatMessage::role, "user"),
                          Field(&ChatMessage::content, first.text),
                          Field(&ChatMessage::content, "And then?"),
                          Field(&ChatMessage::content, second.text)));
  // The history is the conversation's rendering plus the reply's tokens.
  ChatTemplateInput render;
  render.messages = {info.messages.begin(), info.messages.end() - 1};
  auto chatml = ChatTemplate::Create(kChatMlTemplate, "<s>", "</s>");
  ASSERT_TRUE(chatml.ok());
  absl::StatusOr<ChatPrompt> prompt =
      RenderChatPrompt(**chatml, *loaded_->tokenizer, render);
  ASSERT_TRUE(prompt.ok()) << prompt.status();
  std::vector<int32_t> expected = prompt->token_ids;
  expected.insert(expected.end(), second.tokens.begin(), second.tokens.end());
  EXPECT_EQ(info.tokens, expected);
}

TEST_F(EngineChatTest, AppendAddsMessagesWithoutAGenerationPrompt) {
  Start();
  const std::string id = NewSession();
  Turn append = Chat(id, {Msg("user", "Remember this.")}, /*generate=*/false);
  ASSERT_TRUE(append.result.ok()) << append.result.status();
  EXPECT_TRUE(append.tokens.empty());
  const SessionInfo info = Get(id);
  ASSERT_EQ(info.messages.size(), 1u);
  const std::string expected =
      "<|im_start|>user\nRemember this.<|im_end|>\n";  // no assistant header
  EXPECT_EQ(static_cast<size_t>(info.num_tokens), 1 + expected.size());
}

TEST_F(EngineChatTest, ConversationSurvivesARestart) {
  Start(Durable());
  const std::string id = NewSession();
  Turn first = Chat(id, {Msg("user", "Hi there")});
  ASSERT_TRUE(first.result.ok()) << first.result.status();

  Start(Durable());
  Turn second = Chat(id, {Msg("user", "Go on")});
  ASSERT_TRUE(second.result.ok()) << second.result.status();
  Turn stateless =
      Chat("", {Msg("user", "Hi there"), Msg("assistant", first.text),
                Msg("user", "Go on")});
  ASSERT_TRUE(stateless.result.ok()) << stateless.result.status();
  EXPECT_EQ(second.tokens, stateless.tokens);
  EXPECT_EQ(Get(id).messages.size(), 4u);

  // And again: the second turn's messages were logged as well.
  Start(Durable());
  EXPECT_EQ(Get(id).messages.size(), 4u);
}

TEST_F(EngineChatTest, ATemplateRefusalLeavesTheSessionAsItWas) {
  auto refusing = ChatTemplate::Create(
      "{% if messages[-1].role != 'user' %}{{ raise_exception('the last "
      "message must be the user\\'s') }}{% endif %}"
      "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
      "", "");
  ASSERT_TRUE(refusing.ok()) << refusing.status();
  EngineOptions options;
  options.chat_template = refusing->get();
  Start(options);
  const std::string id = NewSession();
  ASSERT_TRUE(Chat(id, {Msg("user", "one")}).result.ok());
  const SessionInfo before = Get(id);

  Turn refused = Chat(id, {Msg("assistant", "not allowed last")});
  ASSERT_FALSE(refused.result.ok());
  EXPECT_EQ(refused.result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.result.status().message(),
            "the last message must be the user's");
  const SessionInfo after = Get(id);
  EXPECT_EQ(after.tokens, before.tokens);
  EXPECT_EQ(after.messages, before.messages);
  EXPECT_FALSE(after.busy);
}

TEST_F(EngineChatTest, TruncateClearsTheConversationAndForkCopiesIt) {
  Start();
  const std::string id = NewSession();
  ASSERT_TRUE(Chat(id, {Msg("user", "one")}).result.ok());
  Waiter<SessionInfo> fork;
  engine_->ForkSession(id, "", std::nullopt, fork.callback());
  absl::StatusOr<SessionInfo> child = fork.Wait();
  ASSERT_TRUE(child.ok()) << child.status();
  EXPECT_EQ(Get(child->id).messages, Get(id).messages);

  Waiter<SessionInfo> truncate;
  engine_->TruncateSession(id, "", 1, truncate.callback());
  ASSERT_TRUE(truncate.Wait().ok());
  EXPECT_TRUE(Get(id).messages.empty());
  EXPECT_EQ(Get(child->id).messages.size(), 2u);
}

TEST_F(EngineChatTest, GenerationStopsAtAnyEndOfGenerationToken) {
  Start();
  Turn free = Chat("", {Msg("user", "Hello")});
  ASSERT_TRUE(free.result.ok()) << free.result.status();
  ASSERT_GE(free.tokens.size(), 3u);
  // The third token generated ends the turn once it counts as an end of
  // generation (an "<|im_end|>"-style token of the vocabulary).
  ExtraEogTokenizer eog(loaded_->tokenizer.get(), free.tokens[2]);
  Start({}, &eog);
  Turn stopped = Chat("", {Msg("user", "Hello")}, true, /*ignore_eos=*/false);
  ASSERT_TRUE(stopped.result.ok()) << stopped.result.status();
  EXPECT_EQ(stopped.result->finish_reason, FinishReason::kEos);
  const size_t end =
      std::find(free.tokens.begin(), free.tokens.end(), free.tokens[2]) -
      free.tokens.begin();
  EXPECT_EQ(stopped.tokens.size(), end + 1);
  // ignore_eos generates past it.
  Turn past = Chat("", {Msg("user", "Hello")}, true, /*ignore_eos=*/true);
  ASSERT_TRUE(past.result.ok());
  EXPECT_EQ(past.tokens, free.tokens);
}

}  // namespace
}  // namespace kvserve
