#include "client/json_writer.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "kvserve/v1/inference.pb.h"

namespace kvserve {
namespace {

TEST(JsonStringTest, EscapesQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\"");
  EXPECT_EQ(JsonString(std::string("\x01\x1f\x00", 3)),
            "\"\\u0001\\u001f\\u0000\"");
  EXPECT_EQ(JsonString("\x7f/"), "\"\x7f/\"");
}

TEST(JsonStringTest, KeepsValidUtf8) {
  // 2-, 3- and 4-byte sequences: é, €, 😀.
  EXPECT_EQ(JsonString("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"),
            "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
}

TEST(JsonStringTest, ReplacesInvalidUtf8) {
  EXPECT_EQ(JsonString("a\xff"), "\"a\\ufffd\"");
  // A truncated 3-byte sequence: each byte becomes U+FFFD.
  EXPECT_EQ(JsonString("\xe2\x82"), "\"\\ufffd\\ufffd\"");
  // Overlong encoding of '/', a UTF-16 surrogate, and beyond U+10FFFF.
  EXPECT_EQ(JsonString("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(JsonString("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
  EXPECT_EQ(JsonString("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
  // A lone continuation byte between valid characters.
  EXPECT_EQ(JsonString("x\x80y"), "\"x\\ufffdy\"");
}

TEST(JsonNumberTest, ShortestRoundTripAndNullForNonFinite) {
  EXPECT_EQ(JsonNumber(0.5), "0.5");
  EXPECT_EQ(JsonNumber(0.1), "0.1");
  EXPECT_EQ(JsonNumber(0.0), "0");
  EXPECT_EQ(JsonNumber(1.0 / 3), "0.3333333333333333");
  // Floats print with their own precision, not the double's.
  EXPECT_EQ(JsonNumber(-3.0565696f), "-3.0565696");
  EXPECT_EQ(JsonNumber(0.1f), "0.1");
  EXPECT_EQ(JsonNumber(std::numeric_limits<float>::infinity()), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonNumber(std::numeric_limits<double>::quiet_NaN()), "null");
}

TEST(JsonObjectTest, KeepsInsertionOrderAndNests) {
  JsonObject usage;
  usage.AddInt("prompt_tokens", 3).AddInt("generated_tokens", -1);
  JsonObject object;
  object.AddString("finish_reason", "length")
      .AddObject("usage", usage)
      .AddDouble("x", 0.25)
      .AddBool("ok", true)
      .AddUint("big", 18446744073709551615ull)
      .AddRaw("ids", "[1, 2]");
  EXPECT_EQ(object.str(),
            "{\"finish_reason\": \"length\", \"usage\": {\"prompt_tokens\": "
            "3, \"generated_tokens\": -1}, \"x\": 0.25, \"ok\": true, "
            "\"big\": 18446744073709551615, \"ids\": [1, 2]}");
  EXPECT_EQ(JsonObject().str(), "{}");
}

TEST(ProtoToJsonTest, WritesIntegersAsNumbersAndSkipsUnsetOptionals) {
  v1::Session session;
  session.set_session_id("s\"1");
  session.set_num_tokens(int64_t{1} << 40);
  session.add_token_ids(1);
  session.add_token_ids(42);
  session.mutable_create_time()->set_seconds(0);
  const std::string json = ProtoToJson(session);
  EXPECT_NE(json.find("\"session_id\": \"s\\\"1\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"num_tokens\": 1099511627776"), std::string::npos)
      << json;
  EXPECT_NE(json.find("\"token_ids\": [1, 42]"), std::string::npos) << json;
  EXPECT_NE(json.find("\"create_time\": \"1970-01-01T00:00:00Z\""),
            std::string::npos)
      << json;
  // last_used_time and ttl_seconds are unset: absent, not null.
  EXPECT_EQ(json.find("last_used_time"), std::string::npos) << json;
  EXPECT_EQ(json.find("ttl_seconds"), std::string::npos) << json;
  session.set_ttl_seconds(0);
  EXPECT_NE(ProtoToJson(session).find("\"ttl_seconds\": 0"), std::string::npos);
}

TEST(ProtoToJsonTest, WritesEnumsByNameAndNestedMessages) {
  v1::GenerateResponse response;
  response.mutable_final()->set_finish_reason(v1::FINISH_REASON_EOS);
  response.mutable_final()->mutable_usage()->set_generated_tokens(7);
  const std::string json = ProtoToJson(response);
  EXPECT_NE(json.find("\"finish_reason\": \"FINISH_REASON_EOS\""),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"generated_tokens\": 7"), std::string::npos) << json;
  EXPECT_EQ(json.find("\"token\""), std::string::npos) << json;
}

TEST(ProtoToTextTest, OneLinePerFieldWithDottedNesting) {
  v1::AppendResponse response;
  response.mutable_session()->set_session_id("abc");
  response.mutable_usage()->set_prompt_tokens(5);
  const std::string text = ProtoToText(response);
  EXPECT_NE(text.find("session.session_id: abc\n"), std::string::npos) << text;
  EXPECT_NE(text.find("usage.prompt_tokens: 5\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace kvserve
