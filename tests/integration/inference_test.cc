// The real kvserve on loopback, driven through kvserve::Client: model info,
// health, deterministic generation, sessions, cancellation and status codes.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "tests/integration/integration_util.h"

namespace kvserve::testing {
namespace {

class InferenceTest : public SharedServerTest {
 protected:
  std::vector<int32_t> Tokenize(const std::string& text) {
    v1::TokenizeRequest request;
    request.set_text(text);
    absl::StatusOr<v1::TokenizeResponse> response = client().Tokenize(request);
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return {};
    return {response->token_ids().begin(), response->token_ids().end()};
  }

  absl::StatusOr<v1::Session> GetSession(const std::string& id) {
    v1::GetSessionRequest request;
    request.set_session_id(id);
    request.set_include_tokens(true);
    return client().GetSession(request);
  }

  // The session once no Generate runs on it any more (a cancelled stream
  // releases it asynchronously), within 10 s.
  absl::StatusOr<v1::Session> GetIdleSession(const std::string& id) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (true) {
      absl::StatusOr<v1::Session> session = GetSession(id);
      if (!session.ok() || !session->busy() || absl::Now() > deadline) {
        return session;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  std::string CreateSession(const std::string& initial_text = "") {
    v1::CreateSessionRequest request;
    if (!initial_text.empty())
      request.mutable_initial()->set_text(initial_text);
    absl::StatusOr<v1::Session> session = client().CreateSession(request);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? session->session_id() : "";
  }
};

std::vector<int32_t> Concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& part : parts)
    out.insert(out.end(), part.begin(), part.end());
  return out;
}

std::vector<int32_t> History(const v1::Session& session) {
  return {session.token_ids().begin(), session.token_ids().end()};
}

TEST_F(InferenceTest, ModelInfoDescribesAGqaLlama) {
  absl::StatusOr<v1::ModelInfo> info = client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->architecture(), "llama");
  EXPECT_GT(info->n_layers(), 0);
  EXPECT_GT(info->n_kv_heads(), 0);
  EXPECT_LT(info->n_kv_heads(), info->n_heads());
  EXPECT_EQ(info->n_heads() % info->n_kv_heads(), 0);
  EXPECT_GT(info->head_dim(), 0);
  EXPECT_EQ(info->dim(), info->n_heads() * info->head_dim());
  EXPECT_GT(info->hidden_dim(), 0);
  EXPECT_GT(info->vocab_size(), 0);
  EXPECT_GT(info->context_length(), 0);
  EXPECT_GE(info->bos_token_id(), 0);
  EXPECT_LT(info->bos_token_id(), info->vocab_size());
  EXPECT_GE(info->eos_token_id(), 0);
  EXPECT_LT(info->eos_token_id(), info->vocab_size());
  // The default KV dtype is f32: 2 (K and V) * layers * kv heads * head_dim.
  EXPECT_EQ(info->kv_dtype(), "f32");
  EXPECT_EQ(info->kv_bytes_per_token(), int64_t{2} * info->n_layers() *
                                            info->n_kv_heads() *
                                            info->head_dim() * 4);
  EXPECT_GT(info->kv_block_tokens(), 0);
  // The default budget holds several full contexts.
  EXPECT_GE(info->kv_cache_capacity_bytes(),
            2 * info->kv_bytes_per_token() * info->context_length());
  EXPECT_GT(info->weight_bytes(), 0);
}

TEST_F(InferenceTest, HealthIsServing) {
  absl::StatusOr<ServingStatus> status = client().Health();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
}

TEST_F(InferenceTest, GreedyGenerationIsDeterministic) {
  v1::GenerateRequest request = GreedyRequest(16);
  request.mutable_prompt()->set_text("Once upon a time");
  absl::StatusOr<Generated> first = GenerateAll(client(), request);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<Generated> second = GenerateAll(client(), request);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(first->ids.size(), 16u);
  EXPECT_EQ(first->ids, second->ids);
  EXPECT_EQ(first->text, second->text);
  const v1::GenerateFinal& final_message = first->final_message;
  EXPECT_EQ(final_message.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(final_message.usage().generated_tokens(), 16);
  // BOS plus the prompt's tokens.
  EXPECT_EQ(final_message.usage().prompt_tokens(),
            1 + static_cast<int64_t>(Tokenize("Once upon a time").size()));
  EXPECT_EQ(final_message.session_id(), "");  // ephemeral
  EXPECT_GE(final_message.timings().prefill_seconds(), 0);
  EXPECT_GE(final_message.timings().decode_seconds(), 0);
}

TEST_F(InferenceTest, SeededSamplingIsReproducible) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("The little dog");
  request.set_max_tokens(12);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_sampling()->set_seed(1234);
  absl::StatusOr<Generated> first = GenerateAll(client(), request);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<Generated> second = GenerateAll(client(), request);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(first->ids, second->ids);
  EXPECT_EQ(first->ids.size(), 12u);
}

// Issue 37 item 3 over gRPC: n choices in one stream, each response naming
// its choice; choice 0 is the one-choice answer, the set reproducible with
// the seed; each choice's final counts the prompt its choices share.
TEST_F(InferenceTest, SeveralChoicesInOneStream) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("The little cat");
  request.set_max_tokens(6);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(1.2f);
  request.mutable_sampling()->set_seed(77);
  request.set_n(4);
  std::vector<std::vector<int32_t>> ids(4);
  absl::StatusOr<std::vector<v1::GenerateFinal>> finals =
      client().GenerateChoices(request,
                               [&](int index, const v1::GeneratedToken& token) {
                                 ids.at(index).push_back(token.token_id());
                                 return true;
                               });
  ASSERT_TRUE(finals.ok()) << finals.status();
  ASSERT_EQ(finals->size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(ids[i].size(), 6u) << "choice " << i;
    EXPECT_EQ((*finals)[i].usage().generated_tokens(), 6);
    EXPECT_EQ((*finals)[i].usage().prompt_tokens(),
              (*finals)[0].usage().prompt_tokens());
  }
  EXPECT_TRUE(ids[1] != ids[0] || ids[2] != ids[0] || ids[3] != ids[0]);

  std::vector<std::vector<int32_t>> again(4);
  ASSERT_TRUE(client()
                  .GenerateChoices(request,
                                   [&](int index, const v1::GeneratedToken& t) {
                                     again.at(index).push_back(t.token_id());
                                     return true;
                                   })
                  .ok());
  EXPECT_EQ(again, ids);

  // One choice through Generate; Generate refuses several.
  EXPECT_TRUE(
      absl::IsInvalidArgument(client().Generate(request, nullptr).status()));
  request.set_n(1);
  absl::StatusOr<Generated> one = GenerateAll(client(), request);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->ids, ids[0]);

  request.set_n(129);
  absl::StatusOr<std::vector<v1::GenerateFinal>> too_many =
      client().GenerateChoices(request, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(too_many.status())) << too_many.status();
  EXPECT_TRUE(absl::StrContains(too_many.status().message(), "n must be in"));
}

// Issue 38 item 2 over gRPC: a GBNF constraint, JSON objects, and the
// errors of a constraint that cannot be honoured.
TEST_F(InferenceTest, ConstraintsShapeTheOutput) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("The answer is");
  request.set_max_tokens(16);
  request.mutable_sampling()->set_temperature(1.0f);
  request.mutable_constraint()->set_grammar(R"(root ::= [0-9]{1,3} "!")");
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    request.mutable_sampling()->set_seed(seed);
    absl::StatusOr<Generated> out = GenerateAll(client(), request);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_FALSE(out->text.empty());
    EXPECT_EQ(out->text.back(), '!') << out->text;
    EXPECT_EQ(out->text.find_first_not_of("0123456789!"), std::string::npos)
        << out->text;
    EXPECT_EQ(out->final_message.finish_reason(), v1::FINISH_REASON_STOP);
  }
  request.mutable_constraint()->set_json_object(true);
  request.set_max_tokens(200);
  absl::StatusOr<Generated> json = GenerateAll(client(), request);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->text.substr(0, 1), "{") << json->text;

  request.mutable_constraint()->set_json_schema(
      R"({"type": "array", "items": {"type": "integer", "minimum": 1,
          "maximum": 9}, "minItems": 2, "maxItems": 4})");
  request.set_max_tokens(64);
  absl::StatusOr<Generated> list = GenerateAll(client(), request);
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->final_message.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(list->text.front(), '[') << list->text;
  EXPECT_EQ(list->text.back(), ']') << list->text;
  EXPECT_EQ(list->text.find_first_not_of("[]123456789, \n\t"),
            std::string::npos)
      << list->text;
  request.mutable_constraint()->set_json_schema(R"({"not": {}})");
  absl::StatusOr<Generated> refused = GenerateAll(client(), request);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status()));
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "constraint.json_schema cannot be honoured: "
                                "`not` at #"))
      << refused.status();

  request.mutable_constraint()->set_grammar("root ::= (");
  absl::StatusOr<Generated> bad = GenerateAll(client(), request);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(),
                                "constraint.grammar does not compile"))
      << bad.status();
}

// Turn 1 and turn 2 on a session produce exactly the tokens that one
// ephemeral Generate over the concatenated ids produces, and turn 2 reuses
// the KV of turn 1 instead of recomputing it.
TEST_F(InferenceTest, TwoTurnSessionMatchesOneShotGeneration) {
  absl::StatusOr<v1::ModelInfo> info = client().GetModelInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  const std::vector<int32_t> prompt1 = Tokenize("Once upon a time");
  const std::vector<int32_t> prompt2 = Tokenize(" there was a cat");
  ASSERT_FALSE(prompt1.empty());
  ASSERT_FALSE(prompt2.empty());
  const std::string id = CreateSession();
  ASSERT_FALSE(id.empty());

  v1::GenerateRequest turn = GreedyRequest(8);
  turn.set_session_id(id);
  SetTokens(prompt1, turn.mutable_prompt());
  absl::StatusOr<Generated> out1 = GenerateAll(client(), turn);
  ASSERT_TRUE(out1.ok()) << out1.status();
  ASSERT_EQ(out1->ids.size(), 8u);
  EXPECT_EQ(out1->final_message.session_id(), id);

  SetTokens(prompt2, turn.mutable_prompt());
  absl::StatusOr<Generated> out2 = GenerateAll(client(), turn);
  ASSERT_TRUE(out2.ok()) << out2.status();
  ASSERT_EQ(out2->ids.size(), 8u);
  // The history before turn 2 is BOS + prompt1 + out1; all but the last
  // generated token already have their KV.
  const v1::Usage& usage2 = out2->final_message.usage();
  EXPECT_EQ(usage2.prompt_tokens(),
            static_cast<int64_t>(1 + prompt1.size() + 8 + prompt2.size()));
  EXPECT_GE(usage2.cached_prompt_tokens(),
            static_cast<int64_t>(1 + prompt1.size()));
  EXPECT_LT(usage2.cached_prompt_tokens(), usage2.prompt_tokens());

  // The history is BOS-included and every generated token joined it.
  absl::StatusOr<v1::Session> session = GetIdleSession(id);
  ASSERT_TRUE(session.ok()) << session.status();
  std::vector<int32_t> expected_history =
      Concat({{info->bos_token_id()}, prompt1, out1->ids, prompt2, out2->ids});
  EXPECT_EQ(History(*session), expected_history);
  EXPECT_EQ(session->num_tokens(),
            static_cast<int64_t>(expected_history.size()));

  v1::GenerateRequest one_shot = GreedyRequest(8);
  SetTokens(Concat({prompt1, out1->ids, prompt2}), one_shot.mutable_prompt());
  absl::StatusOr<Generated> reference = GenerateAll(client(), one_shot);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(reference->ids, out2->ids);
}

TEST_F(InferenceTest, EmptyPromptContinuesTheSession) {
  const std::string id = CreateSession("One day");
  ASSERT_FALSE(id.empty());
  v1::GenerateRequest request = GreedyRequest(5);
  request.set_session_id(id);
  absl::StatusOr<Generated> first = GenerateAll(client(), request);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<Generated> second = GenerateAll(client(), request);
  ASSERT_TRUE(second.ok()) << second.status();

  // The same ten tokens in one go, from the same starting text.
  v1::GenerateRequest whole = GreedyRequest(10);
  whole.mutable_prompt()->set_text("One day");
  absl::StatusOr<Generated> reference = GenerateAll(client(), whole);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(Concat({first->ids, second->ids}), reference->ids);
}

TEST_F(InferenceTest, CancelFromCallbackReturnsCancelledAndKeepsSession) {
  const std::string id = CreateSession("The cat sat");
  ASSERT_FALSE(id.empty());
  absl::StatusOr<v1::Session> before = GetIdleSession(id);
  ASSERT_TRUE(before.ok()) << before.status();
  const std::vector<int32_t> prompt = Tokenize(" on the mat");

  v1::GenerateRequest request = GreedyRequest(1000);
  request.set_session_id(id);
  SetTokens(prompt, request.mutable_prompt());
  std::vector<int32_t> received;
  absl::StatusOr<v1::GenerateFinal> result =
      client().Generate(request, [&](const v1::GeneratedToken& token) {
        received.push_back(token.token_id());
        return received.size() < 3;
      });
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled)
      << result.status();
  ASSERT_EQ(received.size(), 3u);

  // The streamed tokens stay in the session, right after the prompt; the
  // server may have generated a few more before it saw the cancellation.
  absl::StatusOr<v1::Session> after = GetIdleSession(id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->busy());
  const std::vector<int32_t> history = History(*after);
  const std::vector<int32_t> expected_prefix =
      Concat({History(*before), prompt, received});
  ASSERT_GE(history.size(), expected_prefix.size());
  EXPECT_LT(history.size(), expected_prefix.size() + 1000 - 3);
  EXPECT_EQ(std::vector<int32_t>(history.begin(),
                                 history.begin() + expected_prefix.size()),
            expected_prefix);

  // The session is usable, and its KV is consistent with its history: the
  // continuation equals a fresh greedy run over the same ids.
  v1::GenerateRequest next = GreedyRequest(4);
  next.set_session_id(id);
  absl::StatusOr<Generated> continued = GenerateAll(client(), next);
  ASSERT_TRUE(continued.ok()) << continued.status();
  EXPECT_EQ(continued->ids.size(), 4u);
  EXPECT_EQ(continued->final_message.finish_reason(), v1::FINISH_REASON_LENGTH);
  v1::GenerateRequest fresh = GreedyRequest(4);
  SetTokens(std::vector<int32_t>(history.begin() + 1, history.end()),
            fresh.mutable_prompt());
  absl::StatusOr<Generated> reference = GenerateAll(client(), fresh);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ(continued->ids, reference->ids);
}

TEST_F(InferenceTest, CancelFromAnotherThread) {
  v1::GenerateRequest request = GreedyRequest(1000);
  request.mutable_prompt()->set_text("A long story");
  Cancellation cancellation;
  std::atomic<int> tokens{0};
  std::thread canceller([&] {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (tokens.load() < 2 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
    cancellation.Cancel();
  });
  CallOptions options;
  options.cancellation = &cancellation;
  options.timeout = absl::Seconds(30);
  absl::StatusOr<v1::GenerateFinal> result = client().Generate(
      request,
      [&](const v1::GeneratedToken&) {
        tokens.fetch_add(1);
        return true;
      },
      options);
  canceller.join();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled)
      << result.status();
  EXPECT_GE(tokens.load(), 2);
  EXPECT_LT(tokens.load(), 1000);
  // A fired Cancellation also stops later calls before they start.
  EXPECT_EQ(client().GetModelInfo(options).status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(InferenceTest, DeadlineExceededStopsAStream) {
  v1::GenerateRequest request = GreedyRequest(1000);
  request.mutable_prompt()->set_text("Tick tock");
  CallOptions options;
  options.timeout = absl::Milliseconds(200);
  const absl::Time start = absl::Now();
  absl::StatusOr<Generated> result = GenerateAll(client(), request, options);
  // Either the deadline hit, or the model finished 1000 tokens in 200 ms.
  if (!result.ok()) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << result.status();
  }
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST_F(InferenceTest, UnknownSessionIsNotFound) {
  const std::string unknown = "0123456789abcdef0123456789abcdef";
  v1::GetSessionRequest get;
  get.set_session_id(unknown);
  EXPECT_EQ(client().GetSession(get).status().code(),
            absl::StatusCode::kNotFound);
  v1::DeleteSessionRequest del;
  del.set_session_id(unknown);
  EXPECT_EQ(client().DeleteSession(del).code(), absl::StatusCode::kNotFound);
  v1::GenerateRequest generate = GreedyRequest(4);
  generate.set_session_id(unknown);
  generate.mutable_prompt()->set_text("hello");
  EXPECT_EQ(GenerateAll(client(), generate).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(InferenceTest, DeletedSessionIsGone) {
  const std::string id = CreateSession("Hello there");
  ASSERT_FALSE(id.empty());
  v1::GetSessionRequest get;
  get.set_session_id(id);
  absl::StatusOr<v1::Session> session = client().GetSession(get);
  ASSERT_TRUE(session.ok()) << session.status();
  EXPECT_GT(session->num_tokens(), 1);        // BOS and the initial text
  EXPECT_TRUE(session->token_ids().empty());  // not asked for
  v1::DeleteSessionRequest del;
  del.set_session_id(id);
  ASSERT_TRUE(client().DeleteSession(del).ok());
  EXPECT_EQ(client().GetSession(get).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client().DeleteSession(del).code(), absl::StatusCode::kNotFound);
}

TEST_F(InferenceTest, InvalidGenerateArgumentsAreRejected) {
  for (int32_t max_tokens : {0, -1}) {
    v1::GenerateRequest request = GreedyRequest(max_tokens);
    request.mutable_prompt()->set_text("hi");
    absl::StatusOr<Generated> result = GenerateAll(client(), request);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
        << "max_tokens=" << max_tokens << ": " << result.status();
    EXPECT_FALSE(result.status().message().empty());
  }
  v1::GenerateRequest request = GreedyRequest(4);
  request.mutable_prompt()->set_text("hi");
  request.mutable_sampling()->set_temperature(-0.5f);
  absl::StatusOr<Generated> result = GenerateAll(client(), request);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
      << result.status();

  // Rejected on a session too, and the session is untouched.
  const std::string id = CreateSession("Hi");
  ASSERT_FALSE(id.empty());
  absl::StatusOr<v1::Session> before = GetIdleSession(id);
  ASSERT_TRUE(before.ok()) << before.status();
  request.set_session_id(id);
  EXPECT_EQ(GenerateAll(client(), request).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<v1::Session> after = GetIdleSession(id);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(History(*after), History(*before));
}

TEST_F(InferenceTest, MaxTokensUnsetUsesTheServerDefault) {
  v1::GenerateRequest request;
  request.mutable_prompt()->set_text("Go");
  request.set_ignore_eos(true);
  absl::StatusOr<Generated> result = GenerateAll(client(), request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->ids.size(), 0u);
  EXPECT_EQ(result->final_message.usage().generated_tokens(),
            static_cast<int64_t>(result->ids.size()));
}

}  // namespace
}  // namespace kvserve::testing
