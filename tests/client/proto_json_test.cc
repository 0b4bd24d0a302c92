// kvctl's --json output: scripts read these field names, and every proto3
// scalar must be there even when it is zero.
#include "client/proto_json.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "kvserve/v1/inference.pb.h"

namespace kvserve {
namespace {

std::string Line(const google::protobuf::Message& message) {
  return DumpJson(ProtoToJson(message));
}

TEST(ProtoJsonTest, ModelInfoWritesEveryFieldInProtoOrderEvenWhenZero) {
  EXPECT_EQ(Line(v1::ModelInfo()),
            "{\"name\":\"\",\"architecture\":\"\",\"n_layers\":0,"
            "\"n_heads\":0,\"n_kv_heads\":0,\"head_dim\":0,\"dim\":0,"
            "\"hidden_dim\":0,\"vocab_size\":0,\"context_length\":0,"
            "\"weight_dtype\":\"\",\"kv_dtype\":\"\",\"kv_bytes_per_token\":0,"
            "\"kv_cache_capacity_bytes\":0,\"kv_block_tokens\":0,"
            "\"fingerprint\":\"\",\"bos_token_id\":0,\"eos_token_id\":0,"
            "\"weight_bytes\":0,\"cpu\":\"\",\"isa\":\"\","
            "\"chat_template\":\"\",\"tool_call_format\":\"\","
            "\"reasoning\":false}");
}

TEST(ProtoJsonTest, ModelInfoValues) {
  v1::ModelInfo info;
  info.set_name("llama");
  info.set_n_layers(5);
  info.set_kv_cache_capacity_bytes(int64_t{1} << 40);
  info.set_fingerprint("682241db3aafc089");
  const Json json = ProtoToJson(info);
  EXPECT_EQ(json["name"], "llama");
  EXPECT_EQ(json["n_layers"], 5);
  // 64-bit integers are numbers, not strings.
  ASSERT_TRUE(json["kv_cache_capacity_bytes"].is_number_integer());
  EXPECT_EQ(json["kv_cache_capacity_bytes"].get<int64_t>(), int64_t{1} << 40);
  EXPECT_EQ(json["fingerprint"], "682241db3aafc089");
  EXPECT_EQ(json["bos_token_id"], 0);
}

TEST(ProtoJsonTest, SessionSkipsUnsetPresenceFieldsAndKeepsZeroScalars) {
  v1::Session session;
  EXPECT_EQ(Line(session),
            "{\"session_id\":\"\",\"num_tokens\":0,\"kv_bytes\":0,"
            "\"tier\":\"\",\"owner\":\"\",\"token_ids\":[],\"busy\":false,"
            "\"messages\":[]}");

  session.set_session_id("s\"1");
  session.set_num_tokens(int64_t{1} << 40);
  session.add_token_ids(1);
  session.add_token_ids(42);
  session.mutable_create_time()->set_seconds(0);
  session.set_ttl_seconds(0);  // set, so written although zero
  EXPECT_EQ(Line(session),
            "{\"session_id\":\"s\\\"1\",\"num_tokens\":1099511627776,"
            "\"kv_bytes\":0,\"tier\":\"\","
            "\"create_time\":\"1970-01-01T00:00:00Z\",\"ttl_seconds\":0,"
            "\"owner\":\"\",\"token_ids\":[1,42],\"busy\":false,"
            "\"messages\":[]}");
}

TEST(ProtoJsonTest, NestedMessagesAndRepeatedMessages) {
  v1::AppendResponse append;
  append.mutable_session()->set_session_id("abc");
  append.mutable_usage();  // all zero
  EXPECT_EQ(Line(append),
            "{\"session\":{\"session_id\":\"abc\",\"num_tokens\":0,"
            "\"kv_bytes\":0,\"tier\":\"\",\"owner\":\"\",\"token_ids\":[],"
            "\"busy\":false,\"messages\":[]},\"usage\":{\"prompt_tokens\":0,"
            "\"cached_prompt_tokens\":0,\"generated_tokens\":0}}");

  v1::ListSessionsResponse list;
  list.add_sessions()->set_session_id("a");
  list.add_sessions()->set_session_id("b");
  const Json json = ProtoToJson(list);
  ASSERT_EQ(json["sessions"].size(), 2u);
  EXPECT_EQ(json["sessions"][1]["session_id"], "b");
  EXPECT_EQ(json["sessions"][1]["num_tokens"], 0);
  EXPECT_EQ(json["next_page_token"], "");
}

TEST(ProtoJsonTest, TokenizeAndDetokenize) {
  v1::TokenizeResponse tokenize;
  EXPECT_EQ(Line(tokenize), "{\"token_ids\":[],\"pieces\":[]}");
  tokenize.add_token_ids(0);
  tokenize.add_token_ids(306);
  tokenize.add_pieces("<unk>");
  tokenize.add_pieces("\xe2\x96\x81w");
  EXPECT_EQ(Line(tokenize),
            "{\"token_ids\":[0,306],\"pieces\":[\"<unk>\",\"\xe2\x96\x81w\"]}");
  EXPECT_EQ(Line(v1::DetokenizeResponse()), "{\"text\":\"\"}");
}

TEST(ProtoJsonTest, EnumsByName) {
  v1::GenerateResponse response;
  response.mutable_final()->set_finish_reason(v1::FINISH_REASON_EOS);
  const Json json = ProtoToJson(response);
  EXPECT_EQ(json["final"]["finish_reason"], "FINISH_REASON_EOS");
  // The oneof's other member is unset: absent.
  EXPECT_FALSE(json.contains("token"));
}

TEST(GenerateJsonTest, TokenWithoutLogprobs) {
  v1::GeneratedToken token;
  EXPECT_EQ(DumpJson(TokenToJson(token)), "{\"token_id\":0,\"text\":\"\"}");
  token.set_token_id(383);
  token.set_text(" there");
  EXPECT_EQ(DumpJson(TokenToJson(token)),
            "{\"token_id\":383,\"text\":\" there\"}");
}

TEST(GenerateJsonTest, TokenWithLogprobsAtFloatPrecision) {
  v1::GeneratedToken token;
  token.set_token_id(407);
  token.set_text(" upon");
  token.set_logprob(-0.017512728f);
  v1::TokenLogprob* alt = token.add_top_logprobs();
  alt->set_token_id(383);
  alt->set_text(" there");
  alt->set_logprob(-4.1864343f);
  token.add_top_logprobs();  // all zero
  EXPECT_EQ(DumpJson(TokenToJson(token)),
            "{\"token_id\":407,\"text\":\" upon\",\"logprob\":-0.017512728,"
            "\"top_logprobs\":[{\"token_id\":383,\"text\":\" there\","
            "\"logprob\":-4.1864343},{\"token_id\":0,\"text\":\"\","
            "\"logprob\":0.0}]}");
}

TEST(GenerateJsonTest, FinalWritesUsageAndTimingsEvenWhenZero) {
  v1::GenerateFinal final_message;
  EXPECT_EQ(DumpJson(FinalToJson(final_message)),
            "{\"finish_reason\":\"unspecified\",\"usage\":{\"prompt_tokens\":"
            "0,\"cached_prompt_tokens\":0,\"generated_tokens\":0},"
            "\"timings\":{\"queue_seconds\":0.0,\"prefill_seconds\":0.0,"
            "\"decode_seconds\":0.0}}");
}

TEST(GenerateJsonTest, FinalValues) {
  v1::GenerateFinal final_message;
  final_message.set_finish_reason(v1::FINISH_REASON_CONTEXT_FULL);
  final_message.mutable_usage()->set_prompt_tokens(23);
  final_message.mutable_usage()->set_cached_prompt_tokens(22);
  final_message.mutable_usage()->set_generated_tokens(3);
  final_message.mutable_timings()->set_queue_seconds(5.2306e-05);
  final_message.mutable_timings()->set_prefill_seconds(0.059806404);
  final_message.mutable_timings()->set_decode_seconds(1.5);
  final_message.set_session_id("c45a");
  final_message.set_text("\xc3\xa9");
  EXPECT_EQ(DumpJson(FinalToJson(final_message)),
            "{\"finish_reason\":\"context_full\",\"usage\":{"
            "\"prompt_tokens\":23,\"cached_prompt_tokens\":22,"
            "\"generated_tokens\":3},\"timings\":{\"queue_seconds\":5.2306e-05,"
            "\"prefill_seconds\":0.059806404,\"decode_seconds\":1.5},"
            "\"session_id\":\"c45a\",\"text\":\"\xc3\xa9\"}");
  for (auto [reason, name] : {std::pair{v1::FINISH_REASON_LENGTH, "length"},
                              {v1::FINISH_REASON_STOP, "stop"},
                              {v1::FINISH_REASON_EOS, "eos"},
                              {v1::FINISH_REASON_CANCELLED, "cancelled"}}) {
    final_message.set_finish_reason(reason);
    EXPECT_EQ(FinalToJson(final_message)["finish_reason"], name);
  }
}

TEST(DumpJsonTest, EscapesAndReplacesInvalidUtf8) {
  EXPECT_EQ(DumpJson(Json("a\"b\\c")), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(DumpJson(Json("\n\r\t\b\f")), "\"\\n\\r\\t\\b\\f\"");
  EXPECT_EQ(DumpJson(Json(std::string("\x01\x1f\x00", 3))),
            "\"\\u0001\\u001f\\u0000\"");
  // Valid 2-, 3- and 4-byte sequences stay as they are.
  EXPECT_EQ(DumpJson(Json("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80")),
            "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
  // Invalid bytes become U+FFFD instead of an exception.
  EXPECT_EQ(DumpJson(Json("a\xff")), "\"a\xef\xbf\xbd\"");
  EXPECT_EQ(DumpJson(Json("x\x80y")), "\"x\xef\xbf\xbdy\"");
}

TEST(DumpJsonTest, AppendJsonStringAppendsOneLiteral) {
  std::string out = "{\"k\": ";
  AppendJsonString("v\"\n", &out);
  EXPECT_EQ(out, "{\"k\": \"v\\\"\\n\"");
}

TEST(JsonFloatTest, ShortestFloatTextAndNullForNonFinite) {
  EXPECT_EQ(DumpJson(JsonFloat(-3.0565696f)), "-3.0565696");
  EXPECT_EQ(DumpJson(JsonFloat(0.1f)), "0.1");
  EXPECT_EQ(DumpJson(JsonFloat(1e-30f)), "1e-30");
  EXPECT_EQ(JsonFloat(0.1f), 0.1);
  EXPECT_EQ(DumpJson(JsonFloat(std::numeric_limits<float>::infinity())),
            "null");
  EXPECT_EQ(DumpJson(JsonFloat(-std::numeric_limits<float>::infinity())),
            "null");
  EXPECT_EQ(DumpJson(JsonFloat(std::numeric_limits<float>::quiet_NaN())),
            "null");
}

TEST(ProtoToTextTest, OneLinePerFieldWithDottedNesting) {
  v1::AppendResponse response;
  response.mutable_session()->set_session_id("abc");
  response.mutable_session()->add_token_ids(1);
  response.mutable_session()->add_token_ids(2);
  response.mutable_usage()->set_prompt_tokens(5);
  EXPECT_EQ(ProtoToText(response),
            "session.session_id: abc\n"
            "session.num_tokens: 0\n"
            "session.kv_bytes: 0\n"
            "session.tier: \n"
            "session.owner: \n"
            "session.token_ids: 1 2\n"
            "session.busy: false\n"
            "usage.prompt_tokens: 5\n"
            "usage.cached_prompt_tokens: 0\n"
            "usage.generated_tokens: 0\n");
  v1::Session session;
  session.mutable_last_used_time()->set_seconds(86400);
  EXPECT_NE(ProtoToText(session).find("last_used_time: 1970-01-02T00:00:00Z\n"),
            std::string::npos);
}

}  // namespace
}  // namespace kvserve
