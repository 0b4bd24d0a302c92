#include "core/util/json_depth.h"

#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kvserve {
namespace {

using Json = nlohmann::json;

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(static_cast<size_t>(depth), open) +
         std::string(static_cast<size_t>(depth), close);
}

// Whether parsing `text` passes `max_depth`; the top-level key it names.
struct Parsed {
  bool exceeded;
  std::string top_key;
  Json json;
};
Parsed Parse(const std::string& text, int max_depth = kMaxJsonDepth) {
  JsonDepthLimit<Json> limit(max_depth);
  Json json = Json::parse(text, limit.callback(), /*allow_exceptions=*/false);
  EXPECT_FALSE(json.is_discarded()) << text.substr(0, 100);
  return {limit.exceeded(), limit.top_key(), std::move(json)};
}

TEST(JsonDepthTest, CountsArraysAndObjectsUpToTheLimit) {
  EXPECT_FALSE(Parse(Nested(512)).exceeded);
  EXPECT_TRUE(Parse(Nested(513)).exceeded);
  EXPECT_FALSE(Parse(Nested(3), 3).exceeded);
  EXPECT_TRUE(Parse(Nested(4), 3).exceeded);
  // Objects and arrays mixed count alike.
  EXPECT_TRUE(Parse(R"({"a":[{"b":[1]}]})", 3).exceeded);
  EXPECT_FALSE(Parse(R"({"a":[{"b":1}]})", 3).exceeded);
  // Siblings do not add up; brackets in strings are text.
  EXPECT_FALSE(Parse("[[1],[2],[3],[[4]]]", 3).exceeded);
  EXPECT_FALSE(Parse("[\"" + Nested(1000) + "\"]", 2).exceeded);
}

// A million levels: the parse does not recurse, and what is past the limit
// is not kept, so the value can be dumped and destroyed.
TEST(JsonDepthTest, AMillionLevelsAreReadWithoutRecursion) {
  const Parsed p = Parse(Nested(1000000));
  EXPECT_TRUE(p.exceeded);
  EXPECT_LT(p.json.dump().size(), 2u * 600);
}

TEST(JsonDepthTest, NamesTheTopLevelKey) {
  Parsed p = Parse(R"({"model": "m", "messages": [], "tools": )" +
                   Nested(100000) + R"(, "stream": true})");
  EXPECT_TRUE(p.exceeded);
  EXPECT_EQ(p.top_key, "tools");
  // A key inside a value is not a top-level key.
  p = Parse(R"({"messages": [{"tool_calls": [[[1]]]}]})", 4);
  EXPECT_TRUE(p.exceeded);
  EXPECT_EQ(p.top_key, "messages");
  p = Parse(Nested(10), 5);
  EXPECT_TRUE(p.exceeded);
  EXPECT_EQ(p.top_key, "");
}

TEST(JsonDepthTest, TheErrorNamesWhatAndTheLimit) {
  const absl::Status s = JsonDepthLimit<Json>(7).Error("`tools`");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "`tools` nests arrays and objects deeper than 7 levels");
}

}  // namespace
}  // namespace kvserve
