#include "core/util/json_depth.h"

#include <string>

#include "gtest/gtest.h"

namespace kvserve {
namespace {

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(static_cast<size_t>(depth), open) +
         std::string(static_cast<size_t>(depth), close);
}

TEST(JsonDepthTest, CountsArraysAndObjectsUpToTheLimit) {
  EXPECT_FALSE(CheckJsonDepth(Nested(512)).has_value());
  EXPECT_TRUE(CheckJsonDepth(Nested(513)).has_value());
  EXPECT_FALSE(CheckJsonDepth(Nested(3), 3).has_value());
  EXPECT_TRUE(CheckJsonDepth(Nested(4), 3).has_value());
  // Objects and arrays mixed count alike.
  EXPECT_TRUE(CheckJsonDepth(R"({"a":[{"b":[1]}]})", 3).has_value());
  EXPECT_FALSE(CheckJsonDepth(R"({"a":[{"b":1}]})", 3).has_value());
  // Siblings do not add up.
  EXPECT_FALSE(CheckJsonDepth("[[1],[2],[3],[[4]]]", 3).has_value());
}

TEST(JsonDepthTest, BracketsInStringsDoNotCount) {
  const std::string in_string =
      "[\"" + Nested(1000) + "\\\"" + Nested(1000, '{', '}') + "\"]";
  EXPECT_FALSE(CheckJsonDepth(in_string, 2).has_value());
  // An escaped backslash ends before the quote, which closes the string.
  EXPECT_TRUE(CheckJsonDepth(R"(["\\", [[1]]])", 2).has_value());
}

TEST(JsonDepthTest, NamesTheTopLevelKey) {
  const std::string body =
      R"({"model": "m", "messages": [], "tools": )" + Nested(100000) + "}";
  std::optional<JsonTooDeep> deep = CheckJsonDepth(body);
  ASSERT_TRUE(deep.has_value());
  EXPECT_EQ(deep->top_key, "tools");
  // A key inside a value is not a top-level key.
  deep = CheckJsonDepth(R"({"messages": [{"tool_calls": [[[1]]]}]})", 4);
  ASSERT_TRUE(deep.has_value());
  EXPECT_EQ(deep->top_key, "messages");
  deep = CheckJsonDepth(Nested(10), 5);
  ASSERT_TRUE(deep.has_value());
  EXPECT_EQ(deep->top_key, "");
}

TEST(JsonDepthTest, MalformedTextNeverFails) {
  EXPECT_FALSE(CheckJsonDepth("]]]]}}}").has_value());
  EXPECT_FALSE(CheckJsonDepth("\"unterminated [[[[").has_value());
  EXPECT_TRUE(CheckJsonDepth(std::string(1000000, '[')).has_value());
}

}  // namespace
}  // namespace kvserve
