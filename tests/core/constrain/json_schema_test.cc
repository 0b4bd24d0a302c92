// JSON Schema compiled to a grammar: what the grammar accepts against the
// schema's meaning (written out here, and Python's jsonschema on the real
// schemas of ../shared/jsonschema), the regex subset of `pattern` against
// std::regex, and the refusals, which name the keyword and its pointer.
#include "core/constrain/json_schema.h"

#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "core/constrain/grammar_automaton.h"
#include "core/constrain/regex_gbnf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/jsonschema_reference.h"
#include "tests/testing/paths.h"
#include "tests/testing/random_sentence.h"
#include "tests/testing/sanitizers.h"

namespace kvserve::constrain {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<const Grammar> Compile(const std::string& schema) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(schema);
  EXPECT_TRUE(g.ok()) << g.status() << "\n" << schema;
  return g.ok() ? *g : nullptr;
}

bool Accepts(GrammarAutomaton& a, std::string_view text) {
  const int32_t s = a.Walk(a.start(), text);
  return s >= 0 && a.CanEnd(s);
}

void ExpectLanguage(const std::string& schema,
                    const std::vector<std::string>& yes,
                    const std::vector<std::string>& no) {
  auto g = Compile(schema);
  ASSERT_NE(g, nullptr);
  GrammarAutomaton a(g);
  for (const std::string& t : yes) {
    EXPECT_TRUE(Accepts(a, t)) << schema << "\n  should accept " << t;
  }
  for (const std::string& t : no) {
    EXPECT_FALSE(Accepts(a, t)) << schema << "\n  should refuse " << t;
  }
}

// Refused: INVALID_ARGUMENT whose message holds `message`.
void ExpectRefused(const std::string& schema, const std::string& message) {
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(schema);
  EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << schema;
  EXPECT_THAT(g.status().message(), HasSubstr(message)) << schema;
}

TEST(JsonSchemaTest, ObjectsWriteTheirDeclaredPropertiesInOrder) {
  ExpectLanguage(
      R"({"type": "object", "properties": {"a": {"type": "integer"},
          "b": {"type": "string"}, "c": {"type": "boolean"}},
          "required": ["b"]})",
      {R"({"a": 1, "b": "x", "c": true})", R"({"b":"x"})", R"({"a":-3,"b":""})",
       R"({"b": "x", "c": false})"},
      {R"({"a": 1})", R"({"b": "x", "a": 1})", R"({"b": 1})", R"({})",
       R"({"b": "x", "d": 1})", R"({"a": 1.5, "b": "x"})"});
  // A map: additionalProperties as a schema and no properties declared.
  ExpectLanguage(
      R"({"type": "object", "additionalProperties": {"type": "number"},
          "minProperties": 1})",
      {R"({"k": 1})", R"({"k": 1, "j": -2.5})"}, {R"({})", R"({"k": "x"})"});
  // minProperties promotes the first optional properties to required.
  ExpectLanguage(
      R"({"properties": {"a": {"const": 1}, "b": {"const": 2}},
          "minProperties": 1})",
      {R"({"a": 1})", R"({"a": 1, "b": 2})"}, {R"({})", R"({"b": 2})"});
}

TEST(JsonSchemaTest, IntegerRangesAreExact) {
  std::mt19937 rng(3);
  for (int round = 0; round < 40; ++round) {
    const int64_t lo = static_cast<int64_t>(rng() % 4000) - 2000;
    const int64_t hi = lo + static_cast<int64_t>(rng() % 3000);
    const bool exclusive = round % 2;
    const std::string schema = absl::StrCat(
        R"({"type": "integer", ")", exclusive ? "exclusiveMinimum" : "minimum",
        R"(": )", lo, R"(, "maximum": )", hi, "}");
    auto g = Compile(schema);
    ASSERT_NE(g, nullptr);
    GrammarAutomaton a(g);
    for (int64_t v = lo - 30; v <= hi + 30; ++v) {
      const bool in = (exclusive ? v > lo : v >= lo) && v <= hi;
      ASSERT_EQ(Accepts(a, std::to_string(v)), in) << schema << ": " << v;
    }
    std::string leading_zero = "0";
    leading_zero += std::to_string(std::abs(hi));
    EXPECT_FALSE(Accepts(a, leading_zero)) << schema;
  }
}

TEST(JsonSchemaTest, BoundedNumbersStayWithinTheirBounds) {
  ExpectLanguage(R"({"type": "number", "minimum": 0, "exclusiveMaximum": 10})",
                 {"0", "9", "9.99", "0.5", "3"},
                 {"10", "10.0", "-1", "-0.5", "11", "1e2"});
  ExpectLanguage(R"({"type": "number", "minimum": -2.5, "maximum": 1})",
                 {"-2", "-1.5", "1", "0.25", "-0.75"},
                 {"-3", "1.5", "2", "-2.75"});
  // Draft-04's boolean exclusiveMinimum.
  ExpectLanguage(
      R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true})",
      {"1", "20"}, {"0", "-1"});
}

TEST(JsonSchemaTest, StringsCountCharactersNotBytes) {
  ExpectLanguage(R"({"type": "string", "minLength": 2, "maxLength": 3})",
                 {R"("ab")", R"("abc")", R"("\n\"")",
                  "\"\xC3\xA9\xE2\x82\xAC\"", R"("\ud83d\ude00x")"},
                 {R"("a")", R"("abcd")", R"("\ud83d")", R"(ab)"});
  ExpectLanguage(R"({"enum": ["red", "green", 3, null]})",
                 {R"("red")", R"("green")", "3", "null"},
                 {R"("blue")", "4", R"(red)"});
  ExpectLanguage(R"({"type": "string", "enum": ["a", 1]})", {R"("a")"}, {"1"});
  ExpectLanguage(R"({"const": {"x": [1, "y"]}})", {R"({"x":[1,"y"]})"},
                 {R"({"x":[1]})"});
  ExpectLanguage(R"({"type": "string", "format": "date"})",
                 {R"("2024-02-28")", R"("1999-12-01")"},
                 {R"("2024-2-28")", R"("2024-13-01")", R"("x")"});
  ExpectLanguage(R"({"type": "string", "format": "uuid"})",
                 {R"("123e4567-e89b-12d3-a456-426614174000")"},
                 {R"("123e4567")"});
}

TEST(JsonSchemaTest, ArraysHonourTheirItemsAndCounts) {
  ExpectLanguage(R"({"type": "array", "items": {"type": "integer"},
                     "minItems": 1, "maxItems": 3})",
                 {"[1]", "[1, 2, 3]", "[ 1,2 ]"},
                 {"[]", "[1,2,3,4]", "[\"a\"]"});
  ExpectLanguage(R"({"type": "array", "prefixItems": [{"type": "string"},
                     {"type": "boolean"}], "items": false})",
                 {"[]", R"(["a"])", R"(["a", true])"},
                 {R"([true])", R"(["a", true, 1])"});
  ExpectLanguage(R"({"type": "array", "items": [{"type": "string"}],
                     "additionalItems": {"type": "null"}, "minItems": 2})",
                 {R"(["a", null])", R"(["a", null, null])"},
                 {R"(["a"])", R"(["a", 1])"});
  // uniqueItems: at most one item, which is always unique.
  ExpectLanguage(R"({"type": "array", "uniqueItems": true})", {"[]", "[1]"},
                 {"[1, 2]"});
}

TEST(JsonSchemaTest, CombinatorsAndReferences) {
  // anyOf with sibling keywords: each branch gets them.
  ExpectLanguage(R"({"type": "object", "properties": {"a": {"type": "integer"},
                     "b": {"type": "integer"}},
                     "anyOf": [{"required": ["a"]}, {"required": ["b"]}]})",
                 {R"({"a": 1})", R"({"b": 2})", R"({"a": 1, "b": 2})"},
                 {R"({})"});
  // oneOf told apart by a required const.
  ExpectLanguage(R"({"oneOf": [
      {"type": "object", "properties": {"kind": {"const": "cat"},
       "lives": {"type": "integer"}}, "required": ["kind"]},
      {"type": "object", "properties": {"kind": {"const": "dog"},
       "good": {"type": "boolean"}}, "required": ["kind"]}]})",
                 {R"({"kind": "cat", "lives": 9})", R"({"kind": "dog"})"},
                 {R"({"kind": "cow"})", R"({"kind": "cat", "good": true})"});
  // Recursion through $defs.
  ExpectLanguage(R"({"$ref": "#/$defs/node", "$defs": {"node": {
      "type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"]}}})",
                 {R"({"v": 1})", R"({"v": 1, "kids": [{"v": 2, "kids": []}]})"},
                 {R"({"kids": []})", R"({"v": 1, "kids": [{}]})"});
  // allOf merges objects.
  ExpectLanguage(R"({"allOf": [{"$ref": "#/definitions/base"},
      {"properties": {"b": {"type": "string"}}, "required": ["b"]}],
      "definitions": {"base": {"type": "object", "properties":
      {"a": {"type": "integer"}}, "required": ["a"]}}})",
                 {R"({"a": 1, "b": "x"})"}, {R"({"a": 1})", R"({"b": "x"})"});
}

// What nothing validates is left out where that changes nothing: an
// optional property (never written), an anyOf / oneOf branch. Required,
// it leaves the schema unsatisfiable: refused.
TEST(JsonSchemaTest, WhatNothingValidatesIsLeftOut) {
  ExpectLanguage(
      R"({"type": "object", "properties": {"a": {"type": "integer"},
          "b": {"type": "object", "enum": ["x"]}, "c": false},
          "required": ["a"]})",
      {R"({"a": 1})"}, {R"({"a": 1, "b": "x"})", R"({"a": 1, "c": 1})"});
  // Left with no property, the object is {} (not a map that could hold
  // the one left out).
  ExpectLanguage(R"({"type": "object", "properties": {"b": false}})", {R"({})"},
                 {R"({"b": 1})"});
  ExpectLanguage(R"({"anyOf": [false, {"type": "integer"},
                              {"type": "string", "minLength": 3,
                               "maxLength": 2}]})",
                 {"1"}, {R"("abc")", R"("")"});
  ExpectLanguage(R"({"oneOf": [{"type": "integer", "enum": ["a"]},
                              {"type": "string"}]})",
                 {R"("a")", R"("b")"}, {"1"});
  ExpectRefused(R"({"type": "object", "properties": {"b": false},
               "required": ["b"]})",
                "`false` at #/properties/b: nothing validates");
  ExpectRefused(R"({"anyOf": [false, {"type": "integer", "enum": ["x"]}]})",
                "`enum` at #/anyOf/1: no value of it has the schema's type");
}

// dependencies / dependentRequired / dependentSchemas as written: a
// required property brings what it depends on always; an optional one is
// never written.
TEST(JsonSchemaTest, DependenciesHoldAsWritten) {
  ExpectLanguage(
      R"({"type": "object", "properties": {"card": {"type": "integer"},
          "billing": {"type": "string"}, "name": {"type": "string"}},
          "required": ["name"],
          "dependencies": {"card": ["billing"]}})",
      {R"({"name": "x"})", R"({"billing": "y", "name": "x"})"},
      {R"({"name": "x", "card": 1})",
       R"({"name": "x", "card": 1, "billing": "y"})"});
  ExpectLanguage(
      R"({"type": "object", "properties": {"card": {"type": "integer"},
          "billing": {"type": "string"}},
          "required": ["card"], "dependentRequired": {"card": ["billing"]}})",
      {R"({"card": 1, "billing": "y"})"}, {R"({"card": 1})"});
  ExpectLanguage(
      R"({"type": "object", "properties": {"kind": {"type": "string"}},
          "required": ["kind"],
          "dependentSchemas": {"kind": {"properties": {"n": {"type": "integer"}},
                                        "required": ["n"]}}})",
      {R"({"kind": "a", "n": 1})"}, {R"({"kind": "a"})"});
  // Schema-form dependencies (draft-07) of an optional property.
  ExpectLanguage(
      R"({"type": "object", "properties": {"a": {"type": "integer"},
          "b": {"type": "integer"}},
          "dependencies": {"a": {"required": ["c"]}}})",
      {R"({})", R"({"b": 2})"}, {R"({"a": 1})", R"({"a": 1, "b": 2})"});
  ExpectRefused(
      R"({"type": "object", "dependentRequired": {"a": {"type": "string"}}})",
      "`dependentRequired` at #: its entry \"a\" must be a list of names");
}

// `not` naming properties that may not all be present holds as written:
// one of them is never written (and only objects are: `required` holds
// for anything else); `not: {}` leaves nothing; other forms are refused.
TEST(JsonSchemaTest, NotRequiredHoldsAsWritten) {
  ExpectLanguage(
      R"({"properties": {"image": {"type": "string"},
          "dockerfile": {"type": "string"}},
          "not": {"required": ["image", "dockerfile"]}})",
      {R"({})", R"({"dockerfile": "x"})"},
      {R"({"image": "a", "dockerfile": "x"})", R"({"image": "a"})", R"("s")"});
  ExpectLanguage(
      R"({"type": "object", "properties": {"a": {"type": "integer"},
          "b": {"type": "integer"}, "c": {"type": "integer"}},
          "required": ["a"],
          "not": {"anyOf": [{"required": ["a", "b"]},
                            {"required": ["c"], "description": "no c"}]}})",
      {R"({"a": 1})"}, {R"({"a": 1, "b": 2})", R"({"a": 1, "c": 3})"});
  // An optional property whose schema is `not: {}`: never written.
  ExpectLanguage(
      R"({"type": "object", "properties": {"a": {"type": "integer"},
          "gone": {"not": {}}}})",
      {R"({"a": 1})"}, {R"({"gone": 1})"});
  ExpectRefused(R"({"type": "object", "required": ["a"],
               "not": {"required": ["a"]}})",
                "`not` at #: excludes properties the schema requires");
  ExpectRefused(R"({"type": "string", "not": {"enum": ["x"]}})",
                "`not` at #: cannot be enforced by a grammar");
  ExpectRefused(R"({"type": "string", "not": {"required": ["x"]}})",
                "`not` at #: holds only for objects");
}

// oneOf branches told apart only by which properties their objects have:
// honoured as written (a branch's objects hold only the names it declares
// or requires), each text matching exactly one branch.
TEST(JsonSchemaTest, OneOfObjectsToldApartByTheirProperties) {
  ExpectLanguage(
      R"({"oneOf": [
          {"type": "object", "properties": {"a": {"type": "integer"}},
           "required": ["a"]},
          {"type": "object", "properties": {"b": {"type": "string"},
           "c": {"type": "boolean"}}, "required": ["b"]}]})",
      {R"({"a": 1})", R"({"b": "x"})", R"({"b": "x", "c": true})"},
      {R"({"a": 1, "b": "x"})", R"({"c": true})", R"({})"});
  // One branch's objects forbid what the other always writes.
  ExpectLanguage(
      R"({"oneOf": [
          {"type": "object", "properties": {"a": {"type": "integer"}},
           "required": ["a"], "additionalProperties": false},
          {"type": "object", "properties": {"a": {"type": "integer"},
           "b": {"type": "integer"}}, "required": ["a", "b"]}]})",
      {R"({"a": 1})", R"({"a": 1, "b": 2})"}, {R"({"b": 2})"});
  // A discriminator whose values the branches give beside the base's
  // property (merged as allOf).
  ExpectLanguage(
      R"({"type": "object", "additionalProperties": false,
          "properties": {"grant": {"type": "string"}, "n": {"type": "integer"}},
          "oneOf": [{"properties": {"grant": {"enum": ["code"]}},
                     "required": ["grant"]},
                    {"properties": {"grant": {"enum": ["token"]}},
                     "required": ["grant"]}]})",
      {R"({"grant": "code"})", R"({"grant": "token", "n": 1})"},
      {R"({"grant": "other"})", R"({"n": 1})"});
  // Still refused: objects of either may be the same (no required name
  // the other lacks).
  ExpectRefused(R"({
      "oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                {"type": "object", "properties": {"b": {"type": "integer"}}}]})",
                "may both match");
  ExpectRefused(R"({
      "oneOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                 "required": ["a"]},
                {"type": "object", "properties": {"a": {"type": "integer"},
                 "b": {"type": "integer"}}, "required": ["a"]}]})",
                "may both match");
}

TEST(JsonSchemaTest, RefusalsNameTheKeywordAndItsPointer) {
  struct Case {
    const char* schema;
    const char* message;
  };
  const std::vector<Case> cases = {
      {R"({"properties": {"x": {"not": {"type": "null"}}}})",
       "`not` at #/properties/x: cannot be enforced"},
      {R"({"type": "array", "uniqueItems": true, "minItems": 2})",
       "`uniqueItems` at #: with minItems above 1"},
      {R"({"$ref": "https://example.com/s.json"})",
       "`$ref` at #: only local references"},
      {R"({"$ref": "#/$defs/missing"})", "is not found"},
      {R"({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]})",
       "`oneOf` at #: branches 0 and 1 may both match"},
      {R"({"type": "string", "pattern": "^(?=a)b$"})",
       "`pattern` at #: the pattern \"^(?=a)b$\" at character 3: lookaround"},
      {R"({"type": "number", "multipleOf": 0.01})", "`multipleOf` at #"},
      {R"({"properties": {"a": {"type": "integer"}},
           "patternProperties": {"^a": {"type": "string"}}})",
       "`patternProperties` at #: the property \"a\" matches"},
      {R"({"allOf": [{"type": "string"}, {"type": "integer"}]})",
       "its branches' types do not overlap"},
      {R"({"type": "object", "properties": {"a": false}, "required": ["a"]})",
       "`false` at #/properties/a: nothing validates"},
      {R"({"if": {"type": "string"}, "then": {"minLength": 1}})",
       "`if` at #: conditional"},
      {"[1, 2", "the schema is not JSON"},
  };
  JsonSchemaLimits instant;
  instant.max_time = absl::ZeroDuration();
  EXPECT_THAT(
      CompileJsonSchema(R"({"type": "object"})", instant).status().message(),
      HasSubstr("took more than 0 to compile"));
  JsonSchemaLimits shallow;
  shallow.max_depth = 3;
  EXPECT_THAT(CompileJsonSchema(R"({"items": {"items": {"items": {"items":
                  {"items": {}}}}}})",
                                shallow)
                  .status()
                  .message(),
              HasSubstr("nests deeper than 3 levels"));
  for (const Case& c : cases) {
    ExpectRefused(c.schema, c.message);
  }
}

// A pattern's grammar accepts a JSON string exactly when std::regex (the
// ECMAScript flavour) finds the pattern in its value.
TEST(JsonSchemaTest, PatternsMatchAsEcmaScriptRegexesDo) {
  // Each pattern with strings it matches (random strings rarely do).
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"^[a-z]+$", {"abc"}},
      {"^\\d{3}-\\d{4}$", {"555-1234"}},
      {"ab", {"xaby", "ab"}},
      {"^(cat|dog)s?$", {"cats", "dog"}},
      {"x$", {"abx", "x"}},
      {"^[^a\"]*$", {"", "bcd\\"}},
      {"^a.c$", {"abc", "a\"c"}},
      {"^(?:ab){1,2}c?$", {"ab", "ababc"}},
      {"^\\w+@\\w+\\.com$", {"a_1@b.com"}},
      {"^[\\s\\S]{2}$", {"\n\"", "ab"}},
      {"^\\\\\\d$", {"\\5"}},
      {"^[-+]?[0-9]*\\.?[0-9]+$", {"-1.5", "+.5", "42"}},
      {"^(a*)*b$", {"b", "aab"}},
      {"^(a?b?)+$", {"", "abba"}}};
  const std::string alphabet = "abcdx0159-+.@ \"\\\n";
  std::mt19937 rng(11);
  for (const auto& [p, matching] : cases) {
    absl::StatusOr<std::string> body = RegexToGbnf(p);
    ASSERT_TRUE(body.ok()) << p << ": " << body.status();
    absl::StatusOr<Grammar> g =
        ParseGbnf("root ::= \"\\\"\" " + *body + " \"\\\"\"\n" +
                  "json-char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( "
                  "[\"\\\\/bfnrt] | \"u\" "
                  "[0-9a-fA-F]{4} )\n");
    ASSERT_TRUE(g.ok()) << p << ": " << g.status() << "\n" << *body;
    GrammarAutomaton a(std::make_shared<const Grammar>(*std::move(g)));
    const std::regex re(p, std::regex::ECMAScript);
    for (const std::string& value : matching) {
      ASSERT_TRUE(std::regex_search(value, re)) << p << " on " << value;
      EXPECT_TRUE(Accepts(a, nlohmann::json(value).dump()))
          << p << " on " << value;
    }
    for (int i = 0; i < 3000; ++i) {
      std::string value;
      const int n = rng() % 9;
      for (int j = 0; j < n; ++j) value += alphabet[rng() % alphabet.size()];
      const bool want = std::regex_search(value, re);
      const std::string json = nlohmann::json(value).dump();
      ASSERT_EQ(Accepts(a, json), want) << p << " on " << json;
    }
  }
  ExpectLanguage(R"({"type": "string", "pattern": "^\\d{3}-\\d{4}$"})",
                 {R"("555-1234")"}, {R"("5551234")", R"("555-12345")"});
}

// A pattern with minLength / maxLength: every string written matches the
// pattern and has a length within the bounds (narrowed: an unanchored
// pattern is written as its match and a tail, repetitions re-counted);
// bounds no narrowing meets are refused naming the pattern.
TEST(JsonSchemaTest, PatternsWithLengthBoundsMeetBoth) {
  struct Case {
    std::string pattern;
    int min, max;  // max -1: none
    std::vector<std::string> yes;
  };
  const std::vector<Case> cases = {
      {"^[a-z]+$", 0, 8, {"abc", "abcdefgh"}},
      {"^[a-z0-9_-]+$", 3, 5, {"ab_", "a-1b2"}},
      {"^x-[0-9]*$", 4, 6, {"x-12", "x-1234"}},
      {"^[a-z]+-[0-9]+$", 0, 7, {"ab-12", "a-1"}},
      {"^(ab)*c?$", 3, 5, {"abab", "ababc"}},
      {"[0-9]", 2, 4, {"5a", "1234"}},
      {"b+$", 3, -1, {"xab", "abbbbb"}},
      {"^(cat|dog)s?$", 0, 4, {"cat", "dogs"}},
      {"^\\d{3}$", 3, 3, {"123"}},
      {"^.{2,}$", 0, 3, {"ab", "a\"c"}},
      // Groups split into their alternatives, each narrowed alone.
      {"^(\\d+\\.\\d+.*)$", 0, 6, {"1.5", "10.5a"}},
      {"^([a-c]|[a-c][a-c0-9-]*[a-c])$", 0, 5, {"a", "ab", "a-1-b"}},
      {"^(x|(ab)+)-?$", 2, 4, {"x-", "ab", "ab-"}},
      // Optional groups split too (x? is ( | x )); repetitions of
      // variable-length atoms kept to their fewest as a last resort.
      {"^([a-z0-9-]+):([a-z0-9\\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$",
       0,
       40,
       {"a:b::c", "ab:c.d:e:f"}},
      {"^([A-Za-z0-9][A-Za-z0-9-._]*)?$", 0, 20, {"", "a-b.c"}},
      {"^(?:\\S+\\s+){0,9}\\S+$", 0, 30, {"word"}}};
  const std::string alphabet = "abcx0159-_\"";
  std::mt19937 rng(17);
  for (const Case& c : cases) {
    nlohmann::json schema = {{"type", "string"}, {"pattern", c.pattern}};
    if (c.min > 0) schema["minLength"] = c.min;
    if (c.max >= 0) schema["maxLength"] = c.max;
    auto g = Compile(schema.dump());
    ASSERT_NE(g, nullptr) << schema.dump();
    GrammarAutomaton a(g);
    const std::regex re(c.pattern, std::regex::ECMAScript);
    for (const std::string& v : c.yes) {
      ASSERT_TRUE(std::regex_search(v, re)) << c.pattern << " on " << v;
      EXPECT_TRUE(Accepts(a, nlohmann::json(v).dump()))
          << schema.dump() << " on " << v;
    }
    for (int i = 0; i < 20000; ++i) {
      std::string v;
      const int n = rng() % 10;
      for (int j = 0; j < n; ++j) v += alphabet[rng() % alphabet.size()];
      if (!Accepts(a, nlohmann::json(v).dump())) continue;
      EXPECT_TRUE(std::regex_search(v, re)) << schema.dump() << " on " << v;
      EXPECT_GE(static_cast<int>(v.size()), c.min) << schema.dump() << v;
      if (c.max >= 0) {
        EXPECT_LE(static_cast<int>(v.size()), c.max) << schema.dump() << v;
      }
    }
  }
  ExpectRefused(
      R"({"type": "string", "pattern": "^a+b+$", "maxLength": 1})",
      "`pattern` at #: the pattern \"^a+b+$\" cannot be written within "
      "the length bounds [0, 1]");
  ExpectRefused(R"({"type": "string", "pattern": "^(a+b)+$", "maxLength": 9})",
                "cannot be written within the length bounds [0, 9]");
  ExpectRefused(
      R"({"type": "string", "pattern": "^a+$", "minLength": 5, "maxLength": 2})",
      "`minLength` at #: is more than maxLength");
  ExpectRefused(R"({"type": "string", "pattern": "^abc$", "minLength": 4})",
                "[4, unbounded]");
}

// Formats, alone and with minLength / maxLength (narrowed to fit as a
// pattern is): random texts of each grammar validate under Python's
// jsonschema, its format checker included (a uri once had two '@' or a
// bare '%').
TEST(JsonSchemaTest, FormatsValidateWithAndWithoutLengthBounds) {
  if (const std::string why = testing::JsonschemaUnavailable(); !why.empty()) {
    GTEST_SKIP() << why;
  }
  std::vector<std::string> schemas;
  for (const char* f : {"date", "time", "date-time", "uuid", "email",
                        "hostname", "ipv4", "uri"}) {
    schemas.push_back(
        absl::StrCat(R"({"type": "string", "format": ")", f, R"("})"));
  }
  schemas.insert(
      schemas.end(),
      {R"({"type": "string", "format": "email", "maxLength": 24})",
       R"({"type": "string", "format": "email", "minLength": 30,
          "maxLength": 40})",
       R"({"type": "string", "format": "date-time", "maxLength": 25})",
       R"({"type": "string", "format": "uuid", "minLength": 36,
          "maxLength": 36})",
       R"({"type": "string", "format": "hostname", "maxLength": 12})",
       R"({"type": "string", "format": "uri", "maxLength": 20})",
       R"({"type": "string", "format": "ipv4", "minLength": 12})",
       R"({"type": "string", "format": "date", "maxLength": 10})"});
  std::vector<testing::SchemaCheck> checks;
  std::mt19937 rng(5);
  for (const std::string& schema : schemas) {
    auto g = Compile(schema);
    ASSERT_NE(g, nullptr) << schema;
    GrammarAutomaton a(g);
    for (int r : {0, 10, 30, 60, 100, 150}) {
      std::optional<std::string> text = testing::RandomSentence(a, rng, r);
      ASSERT_TRUE(text.has_value()) << schema;
      checks.push_back({schema, *text});
    }
  }
  absl::StatusOr<std::vector<std::string>> results =
      testing::ValidateWithJsonschema(checks);
  ASSERT_TRUE(results.ok()) << results.status();
  for (size_t i = 0; i < checks.size(); ++i) {
    EXPECT_EQ((*results)[i], "")
        << checks[i].schema << " on " << checks[i].instance;
  }
  // Bounds no narrowing meets are refused naming the format.
  ExpectRefused(R"({"type": "string", "format": "uuid", "maxLength": 30})",
                "`format` at #: the pattern");
}

// The real-world schemas: every one compiles or is refused naming the
// keyword and its pointer, and every text the grammar of one that compiles
// makes validates under Python's jsonschema (0 invalid of all tried).
TEST(JsonSchemaTest, SharedSchemasCompileOrAreRefusedAndTheirTextsValidate) {
  const std::string unavailable = testing::JsonschemaUnavailable();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  const std::vector<std::filesystem::path> files = testing::SharedJsonSchemas();
  ASSERT_GE(files.size(), 100u);
  std::vector<testing::SchemaCheck> checks;
  std::vector<std::string> names;
  std::map<std::string, int> refusals;
  int compiled = 0, no_text = 0;
  std::mt19937 rng(5);
  for (const auto& path : files) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<std::shared_ptr<const Grammar>> g =
        CompileJsonSchema(text.str());
    const std::string name =
        path.parent_path().filename().string() + "/" + path.filename().string();
    if (!g.ok()) {
      EXPECT_TRUE(absl::IsInvalidArgument(g.status())) << name;
      const std::string m(g.status().message());
      EXPECT_EQ(m[0], '`') << name << ": " << m;
      EXPECT_THAT(m, HasSubstr(" at #")) << name;
      ++refusals[m.substr(0, m.find('`', 1) + 1)];
      std::printf("refused %s: %s\n", name.c_str(), m.c_str());
      continue;
    }
    ++compiled;
    GrammarAutomaton a(*g);
    // Under a sanitizer (ten times slower) one walk per schema.
    const std::vector<int> walks = testing::kSanitizer
                                       ? std::vector<int>{20}
                                       : std::vector<int>{0, 20, 80, 200};
    for (int r : walks) {
      std::optional<std::string> sentence = testing::RandomSentence(a, rng, r);
      if (!sentence.has_value()) {
        ++no_text;
        continue;
      }
      checks.push_back({text.str(), *sentence});
      names.push_back(name);
    }
  }
  absl::StatusOr<std::vector<std::string>> results =
      testing::ValidateWithJsonschema(checks);
  ASSERT_TRUE(results.ok()) << results.status();
  int invalid = 0;
  for (size_t i = 0; i < checks.size(); ++i) {
    if ((*results)[i].empty()) continue;
    ++invalid;
    ADD_FAILURE() << names[i] << ": " << (*results)[i] << "\n  "
                  << checks[i].instance.substr(0, 400);
  }
  std::string refused;
  for (const auto& [k, n] : refusals) absl::StrAppend(&refused, " ", k, " ", n);
  std::printf(
      "%zu schemas: %d compiled, %zu refused (%s ); %zu texts validated, %d "
      "invalid, %d walks without a text\n",
      files.size(), compiled, files.size() - compiled, refused.c_str(),
      checks.size(), invalid, no_text);
  EXPECT_EQ(invalid, 0);
}

}  // namespace
}  // namespace kvserve::constrain
