// Inputs tests/fuzz/http_request_fuzzer.cc found; each test names what broke.
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/openai_json.h"

namespace kvserve::http {
namespace {

using ::testing::HasSubstr;

// A number too large for a double is nlohmann's out_of_range (406), not a
// parse_error: it escaped ParseBody's catch, and std::terminate took the
// whole server down on one request body.
TEST(ParseBodyFuzzRegressionTest, NumberOverflowIsInvalidArgument) {
  for (const char* body :
       {R"({"max_tokens": 1e999})", R"({"prompt": [1e6666666666666]})",
        R"({"temperature": -1e400, "messages": []})"}) {
    absl::StatusOr<Json> json = ParseBody(body);
    ASSERT_FALSE(json.ok()) << body;
    EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_THAT(json.status().message(), HasSubstr("not valid JSON")) << body;
  }
}

// The fuzzer's input as found (a truncated body whose first number
// overflows).
TEST(ParseBodyFuzzRegressionTest, FuzzerInput) {
  const std::string body(
      "{\"prompt\":[1e6666666666666\x8c\x00\x00\x00@\x00\":null,\"tool_kenca{"
      "\"promA",
      57);
  EXPECT_EQ(ParseBody(body).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::http
