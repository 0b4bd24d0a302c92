#include "server/status.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/util/status_reason.h"
#include "gtest/gtest.h"

namespace kvserve {
namespace {

struct CodePair {
  absl::StatusCode absl_code;
  grpc::StatusCode grpc_code;
  const char* name;
};

// Spelled out, not computed, so a changed mapping fails here.
const std::vector<CodePair>& AllCodes() {
  static const std::vector<CodePair> codes = {
      {absl::StatusCode::kCancelled, grpc::StatusCode::CANCELLED, "CANCELLED"},
      {absl::StatusCode::kUnknown, grpc::StatusCode::UNKNOWN, "UNKNOWN"},
      {absl::StatusCode::kInvalidArgument, grpc::StatusCode::INVALID_ARGUMENT,
       "INVALID_ARGUMENT"},
      {absl::StatusCode::kDeadlineExceeded, grpc::StatusCode::DEADLINE_EXCEEDED,
       "DEADLINE_EXCEEDED"},
      {absl::StatusCode::kNotFound, grpc::StatusCode::NOT_FOUND, "NOT_FOUND"},
      {absl::StatusCode::kAlreadyExists, grpc::StatusCode::ALREADY_EXISTS,
       "ALREADY_EXISTS"},
      {absl::StatusCode::kPermissionDenied, grpc::StatusCode::PERMISSION_DENIED,
       "PERMISSION_DENIED"},
      {absl::StatusCode::kResourceExhausted,
       grpc::StatusCode::RESOURCE_EXHAUSTED, "RESOURCE_EXHAUSTED"},
      {absl::StatusCode::kFailedPrecondition,
       grpc::StatusCode::FAILED_PRECONDITION, "FAILED_PRECONDITION"},
      {absl::StatusCode::kAborted, grpc::StatusCode::ABORTED, "ABORTED"},
      {absl::StatusCode::kOutOfRange, grpc::StatusCode::OUT_OF_RANGE,
       "OUT_OF_RANGE"},
      {absl::StatusCode::kUnimplemented, grpc::StatusCode::UNIMPLEMENTED,
       "UNIMPLEMENTED"},
      {absl::StatusCode::kInternal, grpc::StatusCode::INTERNAL, "INTERNAL"},
      {absl::StatusCode::kUnavailable, grpc::StatusCode::UNAVAILABLE,
       "UNAVAILABLE"},
      {absl::StatusCode::kDataLoss, grpc::StatusCode::DATA_LOSS, "DATA_LOSS"},
      {absl::StatusCode::kUnauthenticated, grpc::StatusCode::UNAUTHENTICATED,
       "UNAUTHENTICATED"},
  };
  return codes;
}

TEST(ToGrpcStatusTest, OkIsOk) {
  const grpc::Status s = ToGrpcStatus(absl::OkStatus());
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OK);
  EXPECT_EQ(s.error_message(), "");
}

TEST(ToGrpcStatusTest, EveryCodeMapsToItsGrpcCodeAndKeepsTheMessage) {
  for (const CodePair& c : AllCodes()) {
    const std::string message = std::string("session 7f: ") + c.name;
    const grpc::Status s = ToGrpcStatus(absl::Status(c.absl_code, message));
    EXPECT_FALSE(s.ok()) << c.name;
    EXPECT_EQ(s.error_code(), c.grpc_code) << c.name;
    EXPECT_EQ(s.error_message(), message) << c.name;
    EXPECT_EQ(s.error_details(), "") << c.name;
  }
}

TEST(ToGrpcStatusTest, KeepsAnEmptyOrNonAsciiMessage) {
  EXPECT_EQ(ToGrpcStatus(absl::InternalError("")).error_message(), "");
  const std::string text = "stop string \"\xc3\xa9\" too long\nsecond line";
  const grpc::Status s = ToGrpcStatus(absl::InvalidArgumentError(text));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), text);
}

TEST(ToGrpcStatusTest, PayloadsStayOnTheServer) {
  const grpc::Status s = ToGrpcStatus(
      WithReason(absl::ResourceExhaustedError("queue full"), kReasonQueueFull));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(s.error_message(), "queue full");
  EXPECT_EQ(s.error_details(), "");
}

TEST(GrpcCodeNameTest, EveryCodeByItsName) {
  EXPECT_EQ(GrpcCodeName(grpc::StatusCode::OK), "OK");
  for (const CodePair& c : AllCodes()) {
    EXPECT_EQ(GrpcCodeName(c.grpc_code), c.name);
  }
}

TEST(QuoteClientTextTest, ShortTextIsQuotedAndEscaped) {
  EXPECT_EQ(QuoteClientText(""), "\"\"");
  EXPECT_EQ(QuoteClientText("abc"), "\"abc\"");
  EXPECT_EQ(QuoteClientText("a\"b\n\xff"), "\"a\\\"b\\n\\xff\"");
}

TEST(QuoteClientTextTest, LongTextKeepsSixtyFourBytes) {
  const std::string id(1 << 20, 'x');
  const std::string quoted = QuoteClientText(id);
  EXPECT_EQ(quoted, "\"" + std::string(kMaxQuotedClientBytes, 'x') + "…\"");
  // Exactly the limit is not truncated.
  EXPECT_EQ(QuoteClientText(std::string(kMaxQuotedClientBytes, 'y')),
            "\"" + std::string(kMaxQuotedClientBytes, 'y') + "\"");
  // Escaping comes after the cut: 64 bytes of binary are 256 characters.
  EXPECT_EQ(QuoteClientText(std::string(100, '\x01')).size(),
            2 + 4 * kMaxQuotedClientBytes + std::string("…").size());
}

}  // namespace
}  // namespace kvserve
