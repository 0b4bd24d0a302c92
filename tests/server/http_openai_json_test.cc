#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "core/constrain/json_grammar.h"
#include "core/util/status_reason.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/openai_json.h"
#include "tests/testing/builtin_model.h"

namespace kvserve::http {
namespace {

using ::testing::HasSubstr;

constexpr int kDefaultMaxTokens = 77;

Json Parse(const char* text) { return Json::parse(text); }

absl::StatusOr<GenerationRequest> Chat(const char* body) {
  return ParseChatRequest(Parse(body), kDefaultMaxTokens);
}
absl::StatusOr<GenerationRequest> Completion(const char* body) {
  return ParseCompletionRequest(Parse(body), kDefaultMaxTokens);
}

const Tokenizer& ByteTokenizer() { return *testing::BuiltinModel().tokenizer; }

// --- Errors ------------------------------------------------------------------

TEST(HttpStatusTest, EveryCodeHasItsStatus) {
  // Spelled out, not computed, so a changed mapping fails here.
  const std::vector<std::pair<absl::StatusCode, int>> expected = {
      {absl::StatusCode::kOk, 200},
      {absl::StatusCode::kCancelled, 499},
      {absl::StatusCode::kUnknown, 500},
      {absl::StatusCode::kInvalidArgument, 400},
      {absl::StatusCode::kDeadlineExceeded, 500},
      {absl::StatusCode::kNotFound, 404},
      {absl::StatusCode::kAlreadyExists, 409},
      {absl::StatusCode::kPermissionDenied, 403},
      {absl::StatusCode::kResourceExhausted, 429},
      {absl::StatusCode::kFailedPrecondition, 409},
      {absl::StatusCode::kAborted, 409},
      {absl::StatusCode::kOutOfRange, 400},
      {absl::StatusCode::kUnimplemented, 500},
      {absl::StatusCode::kInternal, 500},
      {absl::StatusCode::kUnavailable, 503},
      {absl::StatusCode::kDataLoss, 500},
      {absl::StatusCode::kUnauthenticated, 401},
  };
  for (const auto& [code, status] : expected) {
    EXPECT_EQ(HttpStatus(code), status) << absl::StatusCodeToString(code);
  }
}

TEST(ErrorJsonTest, HasOpenAisShapeWithTheCodeInLowerCase) {
  const Json e = ErrorJson(absl::InvalidArgumentError("bad `x`"));
  ASSERT_TRUE(e.contains("error"));
  EXPECT_EQ(e["error"]["message"], "bad `x`");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_EQ(e["error"]["code"], "invalid_argument");
  EXPECT_TRUE(e["error"]["param"].is_null());
}

TEST(ErrorJsonTest, AReasonBecomesTheCode) {
  const Json e = ErrorJson(
      WithReason(absl::ResourceExhaustedError("full"), kReasonQueueFull));
  EXPECT_EQ(e["error"]["code"], "queue_full");
  EXPECT_EQ(e["error"]["type"], "rate_limit_error");
}

TEST(ErrorJsonTest, TypesFollowTheHttpStatus) {
  EXPECT_EQ(ErrorJson(absl::UnauthenticatedError("k"))["error"]["type"],
            "authentication_error");
  EXPECT_EQ(ErrorJson(absl::PermissionDeniedError("k"))["error"]["type"],
            "permission_error");
  EXPECT_EQ(ErrorJson(absl::InternalError("k"))["error"]["type"],
            "server_error");
  EXPECT_EQ(ErrorJson(absl::UnavailableError("k"))["error"]["type"],
            "server_error");
  const Json e = ErrorJson(413, "too big", "payload_too_large");
  EXPECT_EQ(e["error"]["code"], "payload_too_large");
  EXPECT_EQ(e["error"]["message"], "too big");
}

TEST(DumpTest, InvalidUtf8BecomesReplacementCharacters) {
  const std::string dumped = Dump(Json{{"t", std::string("a\xff")}});
  EXPECT_EQ(dumped, "{\"t\":\"a\xEF\xBF\xBD\"}");
}

TEST(ParseBodyTest, MalformedJsonNamesThePosition) {
  absl::StatusOr<Json> body = ParseBody("{\"a\": tru}");
  ASSERT_EQ(body.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(body.status().message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(body.status().message(), HasSubstr("line 1, column"));
  EXPECT_THAT(body.status().message(), HasSubstr("byte"));
}

// 100,000 levels in `tools` or `messages[].tool_calls` overflowed the
// stack in dump() (SIGSEGV); the body is refused before it is parsed.
TEST(ParseBodyTest, DeepNestingIsRefusedNamingTheField) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  absl::StatusOr<Json> body = ParseBody(
      R"({"messages": [{"role": "user", "content": "x"}], "tools": )" + deep +
      "}");
  EXPECT_EQ(body.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(body.status().message(),
              HasSubstr("`tools` nests arrays and objects deeper than 512"));
  body = ParseBody(R"({"messages": [{"role": "assistant", "tool_calls": )" +
                   deep + "}]}");
  EXPECT_THAT(body.status().message(), HasSubstr("`messages` nests"));
  EXPECT_THAT(ParseBody(deep).status().message(),
              HasSubstr("the request body nests"));
  // A long or odd key is quoted, to 64 bytes.
  body = ParseBody("{\"" + std::string(1000, 'k') + "\": " + deep + "}");
  EXPECT_LT(body.status().message().size(), 200u);
  // Within the limit: parsed.
  EXPECT_TRUE(ParseBody("{\"tools\": " + std::string(500, '[') +
                        std::string(500, ']') + "}")
                  .ok());
}

// nlohmann's message quotes what it last read; a 100 KB string gives at
// most kMaxQuotedClientBytes of it.
TEST(ParseBodyTest, AMalformedLongStringIsQuotedBriefly) {
  absl::StatusOr<Json> body =
      ParseBody("{\"model\": \"" + std::string(100000, 'm'));
  EXPECT_EQ(body.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(body.status().message().size(), 300u) << body.status().message();
}

TEST(CheckModelTest, AnUnknownModelIsQuotedBriefly) {
  const absl::Status s = CheckModel(std::string(100000, 'x'), "served");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_LT(s.message().size(), 200u) << s.message();
  EXPECT_THAT(s.message(), HasSubstr("served"));
}

TEST(ParseBodyTest, AnythingButAnObjectIsRefused) {
  EXPECT_THAT(ParseBody("[1]").status().message(),
              HasSubstr("must be a JSON object, got array"));
  EXPECT_EQ(ParseBody("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseBody("{}").ok());
}

// --- Chat requests
// -------------------------------------------------------------

TEST(ParseChatRequestTest, ReadsEveryField) {
  absl::StatusOr<GenerationRequest> r = Chat(R"({
    "model": "m", "messages": [{"role": "user", "content": "hi"}],
    "max_tokens": 12, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
    "seed": 7, "stop": ["a", "bc"], "stream": true,
    "stream_options": {"include_usage": true}, "logprobs": true,
    "top_logprobs": 3, "session_id": "abc", "n": 1, "ignore_eos": true,
    "tools": [{"type": "function", "function": {"name": "f"}}],
    "frequency_penalty": 0, "user": "ignored"})");
  ASSERT_TRUE(r.ok()) << r.status();
  const GenerateParams& p = r->params;
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(p.max_tokens, 12);
  EXPECT_FLOAT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.sampling.top_p, 0.9f);
  EXPECT_EQ(p.sampling.top_k, 40);
  EXPECT_EQ(p.sampling.seed, 7u);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(p.logprobs, 3);
  EXPECT_EQ(p.session_id, "abc");
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_EQ(Json::parse(r->tools_json),
            Parse(R"([{"type": "function", "function": {"name": "f"}}])"));
  const auto* chat = std::get_if<ChatInput>(&p.prompt);
  ASSERT_NE(chat, nullptr);
  ASSERT_EQ(chat->messages.size(), 1u);
  EXPECT_EQ(chat->messages[0].role, "user");
  EXPECT_EQ(chat->messages[0].content, "hi");
}

// Issue 37 item 1: the penalties, bias and min_p reach the sampler (they
// were parsed and dropped).
TEST(ParseChatRequestTest, PenaltiesBiasAndMinPReachTheSampler) {
  absl::StatusOr<GenerationRequest> r = Chat(R"({
    "messages": [{"role": "user", "content": "hi"}],
    "presence_penalty": 0.5, "frequency_penalty": -0.25,
    "repeat_penalty": 1.1, "repeat_last_n": 32, "min_p": 0.05,
    "logit_bias": {"15": -100, "7": 2.5}})");
  ASSERT_TRUE(r.ok()) << r.status();
  const SamplingOptions& s = r->params.sampling;
  EXPECT_FLOAT_EQ(s.penalties.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(s.penalties.frequency_penalty, -0.25f);
  EXPECT_FLOAT_EQ(s.penalties.repeat_penalty, 1.1f);
  EXPECT_EQ(s.penalties.repeat_last_n, 32);
  EXPECT_FLOAT_EQ(s.min_p, 0.05f);
  std::vector<std::pair<int32_t, float>> bias = s.penalties.logit_bias;
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias,
            (std::vector<std::pair<int32_t, float>>{{7, 2.5f}, {15, -100.0f}}));
  // llama-server's list form.
  r = Chat(R"({"messages": [{"role": "user", "content": "hi"}],
               "logit_bias": [[3, 1], [4, -1.5]]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.sampling.penalties.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{3, 1.0f}, {4, -1.5f}}));
  // Unset: off.
  r = Chat(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->params.sampling.penalties.active());
  EXPECT_EQ(r->params.sampling.min_p, 0.0f);
}

// The values of the refused parameters that ask for nothing, and the
// advisory ones, are accepted.
TEST(ParseChatRequestTest, DefaultsOfUnhonouredParametersAreAccepted) {
  absl::StatusOr<GenerationRequest> r = Chat(R"({
    "messages": [{"role": "user", "content": "hi"}],
    "response_format": {"type": "text"}, "tool_choice": "auto",
    "parallel_tool_calls": true, "modalities": ["text"], "store": false,
    "service_tier": "auto", "user": "u", "metadata": {"k": "v"},
    "safety_identifier": "s", "prompt_cache_key": "c", "audio": null,
    "temperature": 2, "n": 1})");
  EXPECT_TRUE(r.ok()) << r.status();
}

// Issue 37 item 5: object keys keep the client's order on the way to the
// template (a tool definition arrived as {"function": ..., "type": ...}).
TEST(ParseChatRequestTest, ToolsKeepTheirKeyOrder) {
  absl::StatusOr<GenerationRequest> r = Chat(R"({
    "messages": [{"role": "user", "content": "hi"}],
    "tools": [{"type": "function", "function": {"name": "f",
               "parameters": {"z": 1, "a": 2}}}]})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tools_json, R"([{"type":"function","function":{"name":"f",)"
                           R"("parameters":{"z":1,"a":2}}}])");
  absl::StatusOr<std::vector<ChatMessage>> m =
      ParseMessages(Parse(R"([{"role": "assistant", "tool_calls": []}])"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)[0].content_null);  // absent is not null
}

TEST(ParseChatRequestTest, DefaultsAreOpenAis) {
  absl::StatusOr<GenerationRequest> r =
      Chat(R"({"messages": [{"role": "user", "content": "hi"}],
               "temperature": null, "stop": null})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.max_tokens, kDefaultMaxTokens);
  EXPECT_FLOAT_EQ(r->params.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r->params.sampling.top_p, 1.0f);
  EXPECT_TRUE(r->params.stop.empty());
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->logprobs);
  EXPECT_EQ(r->params.logprobs, -1);
  EXPECT_TRUE(r->model.empty());
  EXPECT_TRUE(r->tools_json.empty());
  EXPECT_TRUE(r->params.session_id.empty());
}

TEST(ParseChatRequestTest, MaxCompletionTokensWinsAndAStopStringIsOne) {
  absl::StatusOr<GenerationRequest> r =
      Chat(R"({"messages": [{"role": "user", "content": "x"}],
               "max_tokens": 5, "max_completion_tokens": 9, "stop": "END"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->params.max_tokens, 9);
  EXPECT_EQ(r->params.stop, std::vector<std::string>{"END"});
}

TEST(ParseChatRequestTest, AWrongTypeNamesTheField) {
  struct Case {
    const char* body;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"({"messages": [], "max_tokens": "5"})",
       "`max_tokens` must be an integer, got string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})",
       "`temperature` must be a number, got string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": 1})",
       "`stream` must be a boolean, got number"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": 3})",
       "`stop` must be a string or a list of strings, got number"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", 1]})",
       "`stop` must be a string or a list of strings"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "stream_options": {"include_usage": "yes"}})",
       "`stream_options.include_usage` must be a boolean"},
      {R"({"messages": {"role": "user"}})",
       "`messages` must be an array, got object"},
      {R"({"messages": [{"role": "user"}, {"role": 5}]})",
       "`messages[1].role` must be a string, got number"},
      {R"({"messages": [{"role": "user", "content": 5}]})",
       "`messages[0].content` must be a string, null or a list of parts"},
      {R"({"messages": [{"content": "x"}]})", "`messages[0].role` is required"},
      {R"({"messages": [{"role": "assistant", "tool_calls": {}}]})",
       "`messages[0].tool_calls` must be an array, got object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": {}})",
       "`tools` must be an array, got object"},
      {R"({"model": 3, "messages": []})", "`model` must be a string"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "presence_penalty": "x"})",
       "`presence_penalty` must be a number, got string"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "logit_bias": {"abc": 1}})",
       "`logit_bias` keys must be token ids, got \"abc\""},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "logit_bias": {"5": "high"}})",
       "`logit_bias` values must be numbers, got string"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "logit_bias": [[5]]})",
       "`logit_bias` as a list must hold [token id, bias] pairs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logit_bias": 3})",
       "`logit_bias` must be an object of token ids to biases, got number"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<GenerationRequest> r = Chat(c.body);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.body;
  }
}

TEST(ParseChatRequestTest, RefusesWhatCannotBeServed) {
  struct Case {
    const char* body;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})",
       "`n` must be in [1, 128], got 0"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})",
       "`max_tokens` must be at least 1"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})",
       "`top_logprobs` needs `logprobs`: true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true,
           "top_logprobs": 21})",
       "`top_logprobs` must be in [0, 20]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": [""]})",
       "`stop` strings must have 1 to 256 bytes"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "stop": ["1","2","3","4","5","6","7","8","9","10","11","12","13",
                    "14","15","16","17"]})",
       "at most 16"},
      {R"({"messages": []})", "`messages` must not be empty"},
      {R"({"max_tokens": 3})", "`messages` is required"},
      {R"({"messages": [{"role": "user", "content": [
             {"type": "image_url", "image_url": {"url": "x"}}]}]})",
       "only text is supported"},
      // Issue 37 item 2: OpenAI's ranges, and what is not honoured refused
      // by name (these were accepted and ignored).
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 5})",
       "`temperature` must be in [0, 2], got 5"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 200})",
       "`n` must be in [1, 128], got 200"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "xml"}})",
       "`response_format` has an unknown type \"xml\""},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"json_schema": {}}})",
       "`response_format` needs a `type`"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "grammar": "root ::= \"a\" missing"})",
       "`grammar` does not compile: grammar line 1 column 14: rule `missing` "
       "is used but never defined"},
      {R"({"messages": [{"role": "user", "content": "x"}], "grammar": 5})",
       "`grammar` must be a string, got number"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_schema", "json_schema":
           {"name": "t", "schema": {"type": "array", "uniqueItems": true,
           "minItems": 2}}}})",
       "`response_format.json_schema.schema` cannot be honoured: "
       "`uniqueItems` at #: with minItems above 1"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_schema", "json_schema":
           {"name": "t"}}})",
       "needs `json_schema.schema`, an object"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "json_schema": {"not": {}}})",
       "`json_schema` cannot be honoured: `not` at #"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "response_format": {"type": "json_object"},
           "grammar": "root ::= \"a\""})",
       "`grammar` cannot be given with `response_format`"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tool_choice": "required"})",
       "`tool_choice` \"required\" needs `tools`"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "f"}},
                     {"type": "function", "function": {"name": "f"}}]})",
       "`tools[1].function.name` \"f\" names a tool twice"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "function", "function": {"name": "f"}}],
           "tool_choice": {"type": "function"}})",
       "`tool_choice` as an object must be"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "tools": [{"type": "retrieval"}]})",
       "`tools[0].type` must be \"function\""},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "reasoning_format": "verbose"})",
       "`reasoning_format` must be"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "audio": {"voice": "alloy"}})",
       "`audio` is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "modalities": ["text", "audio"]})",
       "`modalities` must be [\"text\"]"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "functions": [{"name": "f"}]})",
       "`functions` is deprecated"},
      {R"({"messages": [{"role": "user", "content": "x"}], "store": true})",
       "`store` is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "service_tier": "flex"})",
       "`service_tier` must be"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "prediction": {"type": "content", "content": "x"}})",
       "`prediction` is not supported"},
      {R"({"messages": [{"role": "user", "content": "x"}],
           "reasoning_effort": "low"})",
       "`reasoning_effort` is not supported"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<GenerationRequest> r = Chat(c.body);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.body;
  }
}

TEST(ParseMessagesTest, ContentPartsNullAndToolFields) {
  absl::StatusOr<std::vector<ChatMessage>> m = ParseMessages(Parse(R"([
    {"role": "system", "content": [{"type": "text", "text": "a"},
                                   {"type": "text", "text": "b"}]},
    {"role": "assistant", "content": null,
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
    {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"}])"));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].content, "a\nb");
  EXPECT_EQ((*m)[1].content, "");
  // Issue 37 item 5: null stays null (the template sees None); the calls
  // are kept as sent, keys in order (ChatTemplate parses argument strings).
  EXPECT_FALSE((*m)[0].content_null);
  EXPECT_TRUE((*m)[1].content_null);
  EXPECT_EQ((*m)[1].tool_calls_json,
            R"([{"id":"c1","type":"function","function":{"name":"f",)"
            R"("arguments":"{\"x\":1}"}}])");
  EXPECT_TRUE((*m)[0].tool_calls_json.empty());
  EXPECT_EQ((*m)[2].tool_call_id, "c1");
  EXPECT_EQ((*m)[2].name, "f");
  EXPECT_EQ((*m)[2].content, "42");
}

// Issue 38 item 2: response_format json_object and llama-server's GBNF
// `grammar` constrain the output; text asks for nothing.
TEST(ParseChatRequestTest, ConstraintsCompileToAGrammar) {
  absl::StatusOr<GenerationRequest> json = Chat(R"({"messages": [{"role":
      "user", "content": "x"}], "response_format": {"type": "json_object"}})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->params.grammar, constrain::JsonObjectGrammar());
  absl::StatusOr<GenerationRequest> text = Chat(R"({"messages": [{"role":
      "user", "content": "x"}], "response_format": {"type": "text"}})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->params.grammar, nullptr);
  absl::StatusOr<GenerationRequest> gbnf =
      Completion(R"({"prompt": "x", "grammar": "root ::= \"yes\" | \"no\""})");
  ASSERT_TRUE(gbnf.ok()) << gbnf.status();
  ASSERT_NE(gbnf->params.grammar, nullptr);
  EXPECT_EQ(gbnf->params.grammar->rule_names[gbnf->params.grammar->root],
            "root");
}

// --- Completion requests
// ---------------------------------------------------------

TEST(ParseCompletionRequestTest, PromptForms) {
  absl::StatusOr<GenerationRequest> text = Completion(R"({"prompt": "Once"})");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(std::get<std::string>(text->params.prompt), "Once");

  absl::StatusOr<GenerationRequest> one = Completion(R"({"prompt": ["Once"]})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(std::get<std::string>(one->params.prompt), "Once");

  absl::StatusOr<GenerationRequest> ids =
      Completion(R"({"prompt": [1, 2, 3]})");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids->params.prompt),
            (std::vector<int32_t>{1, 2, 3}));

  absl::StatusOr<GenerationRequest> nested =
      Completion(R"({"prompt": [[4, 5]]})");
  ASSERT_TRUE(nested.ok()) << nested.status();
  EXPECT_EQ(std::get<std::vector<int32_t>>(nested->params.prompt),
            (std::vector<int32_t>{4, 5}));
}

// Issue 37 item 4: a list of prompts, of strings or of token-id lists,
// one choice per prompt times n.
TEST(ParseCompletionRequestTest, ListsOfPrompts) {
  absl::StatusOr<GenerationRequest> strings =
      Completion(R"({"prompt": ["a", "b", "c"], "n": 2})");
  ASSERT_TRUE(strings.ok()) << strings.status();
  EXPECT_EQ(std::get<std::string>(strings->params.prompt), "a");
  ASSERT_EQ(strings->more_prompts.size(), 2u);
  EXPECT_EQ(std::get<std::string>(strings->more_prompts[1]), "c");
  EXPECT_EQ(strings->n, 2);

  absl::StatusOr<GenerationRequest> lists =
      Completion(R"({"prompt": [[1, 2], "x", [3]]})");
  ASSERT_TRUE(lists.ok()) << lists.status();
  EXPECT_EQ(std::get<std::vector<int32_t>>(lists->params.prompt),
            (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(std::get<std::string>(lists->more_prompts[0]), "x");
  EXPECT_EQ(std::get<std::vector<int32_t>>(lists->more_prompts[1]),
            (std::vector<int32_t>{3}));
  EXPECT_EQ(lists->n, 1);
}

TEST(ParseCompletionRequestTest, RefusedPrompts) {
  struct Case {
    const char* body;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"({})", "`prompt` is required"},
      {R"({"prompt": []})", "got an empty list"},
      {R"({"prompt": [1, -2]})", "`prompt[0]` must be a string"},
      {R"({"prompt": [1, "a"]})", "`prompt[0]` must be a string"},
      {R"({"prompt": ["a", [1, 2.5]]})", "`prompt[1]` must be a string"},
      {R"({"prompt": ["a", []]})", "`prompt[1]` must be a string"},
      {R"({"prompt": 5})", "got number"},
      {R"({"prompt": ["a", "b", "c"], "n": 43})",
       "3 prompts and `n` is 43: 129 choices, more than the 128"},
      {R"({"prompt": "a", "n": 2, "best_of": 1})",
       "`best_of` must be at least n (2), got 1"},
      {R"({"prompt": "a", "best_of": 3})",
       "`best_of` above `n` is not supported"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<GenerationRequest> r = Completion(c.body);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_THAT(r.status().message(), HasSubstr(c.message)) << c.body;
  }
  absl::StatusOr<GenerationRequest> best = Completion(R"({"prompt": "a",
      "n": 3, "best_of": 3})");
  ASSERT_TRUE(best.ok()) << best.status();
  EXPECT_EQ(best->n, 3);
}

TEST(ParseCompletionRequestTest, LogprobsAndParseSpecial) {
  absl::StatusOr<GenerationRequest> r =
      Completion(R"({"prompt": "x", "logprobs": 2, "parse_special": true})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->logprobs);
  EXPECT_EQ(r->params.logprobs, 2);
  EXPECT_TRUE(r->params.parse_special);

  absl::StatusOr<GenerationRequest> d = Completion(R"({"prompt": "x"})");
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->params.parse_special);
  EXPECT_EQ(d->params.logprobs, -1);

  EXPECT_THAT(
      Completion(R"({"prompt": "x", "logprobs": true})").status().message(),
      HasSubstr("`logprobs` must be an integer, got boolean"));
  // echo is honoured (issue 37 item 4), but not with logprobs.
  absl::StatusOr<GenerationRequest> echo =
      Completion(R"({"prompt": "x", "echo": true})");
  ASSERT_TRUE(echo.ok()) << echo.status();
  EXPECT_TRUE(echo->echo);
  EXPECT_FALSE(d->echo);
  EXPECT_THAT(Completion(R"({"prompt": "x", "echo": true, "logprobs": 1})")
                  .status()
                  .message(),
              HasSubstr("`echo` with `logprobs` is not supported"));
}

TEST(CheckModelTest, EmptyOrTheServedNameOnly) {
  EXPECT_TRUE(CheckModel("", "m").ok());
  EXPECT_TRUE(CheckModel("m", "m").ok());
  const absl::Status s = CheckModel("gpt-4", "m");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReasonOf(s), kReasonModelNotFound);
  EXPECT_THAT(s.message(), HasSubstr("gpt-4"));
  EXPECT_EQ(ErrorJson(s)["error"]["code"], "model_not_found");
}

TEST(OpenAiFinishReasonTest, MapsEveryReason) {
  EXPECT_EQ(OpenAiFinishReason(FinishReason::kStop), "stop");
  EXPECT_EQ(OpenAiFinishReason(FinishReason::kEos), "stop");
  EXPECT_EQ(OpenAiFinishReason(FinishReason::kLength), "length");
  EXPECT_EQ(OpenAiFinishReason(FinishReason::kContextFull), "length");
  EXPECT_EQ(OpenAiFinishReason(FinishReason::kCancelled), "stop");
}

// --- Responses
// -------------------------------------------------------------------

GenerateResult Result(FinishReason reason) {
  GenerateResult r;
  r.finish_reason = reason;
  r.usage = Usage{
      .prompt_tokens = 10, .cached_prompt_tokens = 4, .generated_tokens = 3};
  return r;
}

ResponseMeta Meta(Endpoint endpoint) {
  return ResponseMeta{
      .endpoint = endpoint, .id = "id-1", .created = 1700000000, .model = "m"};
}

TEST(UsageJsonTest, CountsAndCachedTokens) {
  EXPECT_EQ(UsageJson(Result(FinishReason::kStop).usage), Parse(R"({
    "prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
    "prompt_tokens_details": {"cached_tokens": 4}})"));
}

TEST(CompletionJsonTest, ToolCallsAndReasoning) {
  constrain::ParsedReply reply;
  reply.reasoning = "think";
  reply.calls.push_back({"call_1", "f", R"({"a": 1})"});
  ChoiceOutput out;
  out.reply = reply;
  out.finish_reason = FinishReason::kEos;
  const Json j = CompletionJson(Meta(Endpoint::kChatCompletions), {out},
                                Result(FinishReason::kEos).usage);
  EXPECT_EQ(j["choices"][0]["message"], Parse(R"({"role": "assistant",
      "content": null, "reasoning_content": "think", "tool_calls": [{"id":
      "call_1", "type": "function", "function": {"name": "f", "arguments":
      "{\"a\": 1}"}}]})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  // Cut by max_tokens: "length" still.
  out.finish_reason = FinishReason::kLength;
  EXPECT_EQ(
      CompletionJson(
          Meta(Endpoint::kChatCompletions), {out},
          Result(FinishReason::kLength).usage)["choices"][0]["finish_reason"],
      "length");
  // No calls: content as text, "stop".
  out.reply = constrain::ParsedReply{"hi", "", {}};
  out.finish_reason = FinishReason::kStop;
  const Json plain = CompletionJson(Meta(Endpoint::kChatCompletions), {out},
                                    Result(FinishReason::kStop).usage);
  EXPECT_EQ(plain["choices"][0]["message"],
            Parse(R"({"role": "assistant", "content": "hi"})"));
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
}

TEST(ReplyDeltaJsonTest, NameFirstThenArgumentFragments) {
  constrain::ReplyDelta first;
  first.calls.push_back({0, "call_1", "f", "{\"a\""});
  EXPECT_EQ(ReplyDeltaJson(first), Parse(R"({"tool_calls": [{"index": 0,
      "id": "call_1", "type": "function", "function": {"name": "f",
      "arguments": "{\"a\""}}]})"));
  constrain::ReplyDelta more;
  more.content = "x";
  more.reasoning = "y";
  more.calls.push_back({0, "", "", ": 1}"});
  EXPECT_EQ(ReplyDeltaJson(more), Parse(R"({"reasoning_content": "y",
      "content": "x", "tool_calls": [{"index": 0, "function": {"arguments":
      ": 1}"}}]})"));
}

TEST(CompletionJsonTest, ChatCompletion) {
  const Json j = CompletionJson(Meta(Endpoint::kChatCompletions),
                                {{.text = "hello",
                                  .finish_reason = FinishReason::kLength,
                                  .logprobs = std::nullopt}},
                                Result(FinishReason::kLength).usage);
  EXPECT_EQ(j["id"], "id-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "m");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"],
            Parse(R"({"role": "assistant", "content": "hello"})"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["usage"]["total_tokens"], 13);
}

TEST(CompletionJsonTest, TextCompletion) {
  const Json j = CompletionJson(Meta(Endpoint::kCompletions),
                                {{.text = "hello",
                                  .finish_reason = FinishReason::kEos,
                                  .logprobs = std::nullopt}},
                                Result(FinishReason::kEos).usage);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "hello");
  EXPECT_FALSE(j["choices"][0].contains("message"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

std::vector<TokenLogprobEntry> Entries() {
  TokenLogprobEntry a;
  a.bytes = "Hi";
  a.logprob = -0.5f;
  a.top = {{.bytes = "Hi", .logprob = -0.5f},
           {.bytes = "\xE2\x82",
            .logprob = -std::numeric_limits<float>::infinity()}};
  a.text_offset = 0;
  TokenLogprobEntry b;
  b.bytes = "!";
  b.logprob = -1.0f;
  b.text_offset = 2;
  return {a, b};
}

TEST(CompletionJsonTest, EachChoiceHasItsIndex) {
  const Json j = CompletionJson(
      Meta(Endpoint::kCompletions),
      {{.text = "a", .finish_reason = FinishReason::kEos, .logprobs = {}},
       {.text = "b", .finish_reason = FinishReason::kLength, .logprobs = {}}},
      Result(FinishReason::kEos).usage);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["choices"][1]["text"], "b");
  EXPECT_EQ(j["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
}

TEST(CompletionJsonTest, ChatLogprobsCarryBytesAndAlternatives) {
  const Json j = CompletionJson(Meta(Endpoint::kChatCompletions),
                                {{.text = "Hi!",
                                  .finish_reason = FinishReason::kStop,
                                  .logprobs = Entries()}},
                                Result(FinishReason::kStop).usage);
  const Json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["token"], "Hi");
  EXPECT_FLOAT_EQ(content[0]["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(content[0]["bytes"], Parse("[72, 105]"));
  ASSERT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_EQ(content[0]["top_logprobs"][1]["bytes"], Parse("[226, 130]"));
  // -inf, which JSON cannot carry, is reported as OpenAI does.
  EXPECT_FLOAT_EQ(content[0]["top_logprobs"][1]["logprob"].get<float>(),
                  -9999.0f);
  EXPECT_TRUE(content[1]["top_logprobs"].empty());
}

TEST(CompletionJsonTest, CompletionLogprobsAreParallelLists) {
  const Json j = CompletionJson(Meta(Endpoint::kCompletions),
                                {{.text = "Hi!",
                                  .finish_reason = FinishReason::kStop,
                                  .logprobs = Entries()}},
                                Result(FinishReason::kStop).usage);
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Parse(R"(["Hi", "!"])"));
  EXPECT_EQ(lp["text_offset"], Parse("[0, 2]"));
  ASSERT_EQ(lp["token_logprobs"].size(), 2u);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -1.0f);
  EXPECT_TRUE(lp["top_logprobs"][0].contains("Hi"));
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
}

TEST(ChunkJsonTest, ChatChunks) {
  const ResponseMeta meta = Meta(Endpoint::kChatCompletions);
  const Json first =
      ChunkJson(meta, 0, {{"role", "assistant"}, {"content", ""}}, std::nullopt,
                "", false);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));

  const Json last =
      ChunkJson(meta, 3, Json::object(), std::nullopt, "stop", true);
  EXPECT_EQ(last["choices"][0]["index"], 3);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(last["choices"][0]["delta"].empty());
  EXPECT_TRUE(last.contains("usage"));
  EXPECT_TRUE(last["usage"].is_null());

  const Json usage = UsageChunkJson(meta, Result(FinishReason::kStop).usage);
  EXPECT_TRUE(usage["choices"].is_array());
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
}

TEST(ChunkJsonTest, CompletionChunksCarryText) {
  const Json c = ChunkJson(Meta(Endpoint::kCompletions), 0, {{"content", "ab"}},
                           std::nullopt, "", false);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "ab");
  EXPECT_FALSE(c["choices"][0].contains("delta"));
}

TEST(NewResponseIdTest, PrefixAndRandomHex) {
  const std::string a = NewResponseId("chatcmpl-");
  const std::string b = NewResponseId("chatcmpl-");
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 9u + 32u);
  EXPECT_NE(a, b);
}

TEST(ModelJsonTest, ListOfTheServedModel) {
  const Json j = ModelListJson("kvserve-builtin", 5, 256);
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "kvserve-builtin");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_EQ(j["data"][0]["created"], 5);
  EXPECT_EQ(j["data"][0]["owned_by"], "kvserve");
}

TEST(MakeLogprobEntryTest, TextsOfTheTokenAndItsAlternatives) {
  const Tokenizer& t = ByteTokenizer();
  const std::vector<int32_t> ids = t.Encode(
      "ab", EncodeOptions{.add_bos = false, .add_dummy_prefix = false});
  ASSERT_EQ(ids.size(), 2u);
  GeneratedToken token{
      .token_id = ids[0],
      .text = "a",
      .logprobs = Logprobs{.chosen = -0.25f,
                           .top = {{ids[0], -0.25f}, {ids[1], -2.0f}}}};
  const TokenLogprobEntry e = MakeLogprobEntry(t, -1, token, 7);
  EXPECT_EQ(e.bytes, "a");
  EXPECT_FLOAT_EQ(e.logprob, -0.25f);
  EXPECT_EQ(e.text_offset, 7);
  ASSERT_EQ(e.top.size(), 2u);
  EXPECT_EQ(e.top[1].bytes, "b");
  EXPECT_FLOAT_EQ(e.top[1].logprob, -2.0f);
}

// --- Tokenizer routes
// ---------------------------------------------------------------

TEST(ParseTokenizeRequestTest, DefaultsAddAndParseNothingSpecial) {
  absl::StatusOr<TokenizeRequest> r =
      ParseTokenizeRequest(Parse(R"({"content": "hi"})"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->content, "hi");
  EXPECT_FALSE(r->options.add_bos);
  EXPECT_FALSE(r->options.add_dummy_prefix);
  EXPECT_FALSE(r->options.parse_special);
  EXPECT_FALSE(r->with_pieces);

  r = ParseTokenizeRequest(Parse(
      R"({"content": "x", "add_special": true, "parse_special": true,
          "with_pieces": true})"));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->options.add_bos);
  EXPECT_TRUE(r->options.parse_special);
  EXPECT_TRUE(r->with_pieces);

  EXPECT_THAT(
      ParseTokenizeRequest(Parse(R"({"content": 1})")).status().message(),
      HasSubstr("`content` must be a string"));
}

TEST(TokenizeJsonTest, IdsOrPiecesWithBytesForPartialUtf8) {
  const Tokenizer& t = ByteTokenizer();
  // "é" is two byte tokens in a byte vocabulary: neither alone is UTF-8.
  const std::vector<int32_t> ids = t.Encode(
      "a\xC3\xA9", EncodeOptions{.add_bos = false, .add_dummy_prefix = false});
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(TokenizeJson(t, ids, false)["tokens"],
            Json(std::vector<int32_t>(ids)));
  const Json pieces = TokenizeJson(t, ids, true)["tokens"];
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0]["id"], ids[0]);
  EXPECT_EQ(pieces[0]["piece"], "a");
  EXPECT_EQ(pieces[1]["piece"], Parse("[195]"));
  EXPECT_EQ(pieces[2]["piece"], Parse("[169]"));
}

TEST(DetokenizeTest, TextAndVocabularyRange) {
  const Tokenizer& t = ByteTokenizer();
  const std::vector<int32_t> ids = t.Encode(
      "a\xC3\xA9", EncodeOptions{.add_bos = false, .add_dummy_prefix = false});
  Json body = {{"tokens", ids}};
  absl::StatusOr<std::vector<int32_t>> parsed =
      ParseDetokenizeRequest(body, t.vocab_size());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(Detokenize(t, *parsed), "a\xC3\xA9");

  body = {{"tokens", {t.vocab_size()}}};
  EXPECT_THAT(ParseDetokenizeRequest(body, t.vocab_size()).status().message(),
              HasSubstr("outside the vocabulary"));
  EXPECT_THAT(
      ParseDetokenizeRequest(Parse(R"({"tokens": ["a"]})"), t.vocab_size())
          .status()
          .message(),
      HasSubstr("`tokens` must be a list of integers"));
}

TEST(ParseApplyTemplateRequestTest, GenerationPromptByDefault) {
  absl::StatusOr<ChatTemplateInput> in = ParseApplyTemplateRequest(
      Parse(R"({"messages": [{"role": "user", "content": "x"}]})"));
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_TRUE(in->add_generation_prompt);
  EXPECT_TRUE(in->tools_json.empty());
  ASSERT_EQ(in->messages.size(), 1u);

  in = ParseApplyTemplateRequest(
      Parse(R"({"messages": [{"role": "user", "content": "x"}],
                "add_generation_prompt": false, "tools": []})"));
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_FALSE(in->add_generation_prompt);
  EXPECT_EQ(in->tools_json, "[]");
}

TEST(ParseCreateSessionRequestTest, OptionalPositiveTtl) {
  absl::StatusOr<std::optional<absl::Duration>> ttl =
      ParseCreateSessionRequest(Json::object());
  ASSERT_TRUE(ttl.ok());
  EXPECT_FALSE(ttl->has_value());
  ttl = ParseCreateSessionRequest(Parse(R"({"ttl_seconds": 60})"));
  ASSERT_TRUE(ttl.ok());
  EXPECT_EQ(**ttl, absl::Seconds(60));
  EXPECT_EQ(
      ParseCreateSessionRequest(Parse(R"({"ttl_seconds": 0})")).status().code(),
      absl::StatusCode::kInvalidArgument);
  // As over gRPC: at most 100 years, so the TTL survives a restart.
  EXPECT_EQ(ParseCreateSessionRequest(
                Parse(R"({"ttl_seconds": 9223372036854775807})"))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCreateSessionRequest(Parse(R"({"ttl_seconds": "1"})"))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::http
