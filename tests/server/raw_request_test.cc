#include "server/raw_request.h"

#include <string>
#include <string_view>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/support/slice.h"
#include "gtest/gtest.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve {
namespace {

using ::testing::HasSubstr;

// The C++ protobuf API will not serialize a string field that is not UTF-8,
// so the tests serialize a placeholder and swap in bytes of the same length.
constexpr std::string_view kPlaceholder = "PLACEHOLDER";
constexpr std::string_view kInvalid = "bad\xff\xfe-bytes";  // as long

std::string Corrupt(const google::protobuf::Message& message) {
  std::string wire = message.SerializeAsString();
  const size_t at = wire.find(kPlaceholder);
  EXPECT_NE(at, std::string::npos);
  static_assert(kPlaceholder.size() == kInvalid.size());
  wire.replace(at, kInvalid.size(), kInvalid);
  return wire;
}

TEST(ParseRequestTest, ValidRequestParses) {
  v1::GenerateRequest request;
  request.set_session_id("0123456789abcdef0123456789abcdef");
  request.mutable_prompt()->set_text("héllo");
  request.add_stop("\n");
  request.set_max_tokens(7);
  v1::GenerateRequest parsed;
  ASSERT_TRUE(ParseRequest(request.SerializeAsString(), &parsed).ok());
  EXPECT_EQ(parsed.prompt().text(), "héllo");
  EXPECT_EQ(parsed.max_tokens(), 7);
}

TEST(ParseRequestTest, NamesNestedRepeatedField) {
  v1::GenerateRequest request;
  v1::ChatMessages* chat = request.mutable_prompt()->mutable_messages();
  chat->add_messages()->set_content("fine");
  v1::ChatMessage* bad = chat->add_messages();
  bad->set_role("user");
  bad->set_content(std::string(kPlaceholder));
  v1::GenerateRequest parsed;
  absl::Status s = ParseRequest(Corrupt(request), &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "prompt.messages.messages[1].content is not valid UTF-8");
}

TEST(ParseRequestTest, NamesTopLevelAndRepeatedStrings) {
  v1::GenerateRequest request;
  request.add_stop("a");
  request.add_stop("b");
  request.add_stop(std::string(kPlaceholder));
  v1::GenerateRequest parsed;
  EXPECT_EQ(ParseRequest(Corrupt(request), &parsed).message(),
            "stop[2] is not valid UTF-8");

  v1::GetSessionRequest get;
  get.set_session_id(std::string(kPlaceholder));
  v1::GetSessionRequest parsed_get;
  EXPECT_EQ(ParseRequest(Corrupt(get), &parsed_get).message(),
            "session_id is not valid UTF-8");

  v1::TokenizeRequest tokenize;
  tokenize.set_text(std::string(kPlaceholder));
  v1::TokenizeRequest parsed_tokenize;
  EXPECT_EQ(ParseRequest(Corrupt(tokenize), &parsed_tokenize).message(),
            "text is not valid UTF-8");

  v1::ApplyChatTemplateRequest chat;
  chat.add_messages()->set_name(std::string(kPlaceholder));
  v1::ApplyChatTemplateRequest parsed_chat;
  EXPECT_EQ(ParseRequest(Corrupt(chat), &parsed_chat).message(),
            "messages[0].name is not valid UTF-8");
}

TEST(ParseRequestTest, GarbageIsMalformed) {
  v1::GenerateRequest parsed;
  // Field 1 (session_id) says 100 bytes follow; 3 do.
  absl::Status s = ParseRequest(std::string_view("\x0a\x64"
                                                 "abc",
                                                 5),
                                &parsed);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("malformed request"));
  EXPECT_THAT(s.message(), HasSubstr("kvserve.v1.GenerateRequest"));
  // Wire type 7 does not exist.
  s = ParseRequest(std::string_view("\x0f\x01", 2), &parsed);
  EXPECT_THAT(s.message(), HasSubstr("malformed request"));
}

TEST(ParseRequestTest, ByteBufferOfManySlices) {
  v1::AppendRequest request;
  request.mutable_input()->set_text(std::string(kPlaceholder));
  const std::string wire = Corrupt(request);
  std::vector<grpc::Slice> slices;
  for (char c : wire) slices.emplace_back(&c, 1);
  grpc::ByteBuffer buffer(slices.data(), slices.size());
  v1::AppendRequest parsed;
  EXPECT_EQ(ParseRequest(buffer, &parsed).message(),
            "input.text is not valid UTF-8");

  request.mutable_input()->set_text("ok");
  const std::string good = request.SerializeAsString();
  grpc::Slice a(good.data(), 3), b(good.data() + 3, good.size() - 3);
  grpc::Slice both[] = {a, b};
  grpc::ByteBuffer two(both, 2);
  ASSERT_TRUE(ParseRequest(two, &parsed).ok());
  EXPECT_EQ(parsed.input().text(), "ok");
}

TEST(SerializeResponseTest, RoundTrips) {
  v1::Session session;
  session.set_session_id("abc");
  session.set_num_tokens(42);
  absl::StatusOr<grpc::ByteBuffer> bytes = SerializeResponse(session);
  ASSERT_TRUE(bytes.ok());
  v1::Session parsed;
  ASSERT_TRUE(ParseRequest(*bytes, &parsed).ok());
  EXPECT_EQ(parsed.session_id(), "abc");
  EXPECT_EQ(parsed.num_tokens(), 42);
}

}  // namespace
}  // namespace kvserve
