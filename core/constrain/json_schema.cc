#include "core/constrain/json_schema.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/constrain/gbnf_builder.h"
#include "core/constrain/json_grammar.h"
#include "core/constrain/regex_gbnf.h"
#include "core/util/json_depth.h"
#include "core/util/quote.h"
#include "nlohmann/json.hpp"

namespace kvserve::constrain {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kSep[] = "ws \",\" ws";

// Keywords that only annotate: ignored when combining schemas.
bool IsAnnotation(std::string_view key) {
  static const auto* const kKeys =
      new std::set<std::string_view>{"title",
                                     "description",
                                     "default",
                                     "examples",
                                     "example",
                                     "$schema",
                                     "$id",
                                     "id",
                                     "$comment",
                                     "deprecated",
                                     "readOnly",
                                     "writeOnly",
                                     "$anchor",
                                     "$vocabulary",
                                     "contentEncoding",
                                     "contentMediaType",
                                     "$defs",
                                     "definitions",
                                     "nullable",
                                     "$dynamicAnchor"};
  return kKeys->count(key) > 0;
}

// A JSON pointer's segment, escaped.
std::string Segment(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// A double as an int64 for bounds, clamped to what a 16-digit integer
// holds.
constexpr int64_t kMaxInt = 9999999999999999;

// The GBNF alternatives of the decimal strings of [lo, hi], both with the
// same number of digits (leading zeros kept: they are inner digits).
void SameLength(const std::string& lo, const std::string& hi,
                std::vector<std::string>& out, const std::string& prefix) {
  if (lo == hi) {
    out.push_back(prefix + GbnfLiteral(lo));
    return;
  }
  size_t i = 0;
  while (lo[i] == hi[i]) ++i;
  const std::string common =
      prefix + (i > 0 ? GbnfLiteral(lo.substr(0, i)) + " " : "");
  const size_t rest = lo.size() - i - 1;
  const bool lo_zeros = lo.find_first_not_of('0', i + 1) == std::string::npos;
  const bool hi_nines = hi.find_first_not_of('9', i + 1) == std::string::npos;
  auto digits = [&](char a, char b) {
    return a == b ? GbnfLiteral(std::string(1, a))
                  : absl::StrFormat("[%c-%c]", a, b);
  };
  auto tail = [&](size_t n) {
    return n == 0 ? std::string() : absl::StrFormat(" [0-9]{%d}", n);
  };
  if (lo_zeros && hi_nines) {
    out.push_back(common + digits(lo[i], hi[i]) + tail(rest));
    return;
  }
  char from = lo[i], to = hi[i];
  if (!lo_zeros) {
    SameLength(lo.substr(i + 1), std::string(rest, '9'), out,
               common + GbnfLiteral(std::string(1, lo[i])) + " ");
    ++from;
  }
  if (!hi_nines) --to;
  if (from <= to) out.push_back(common + digits(from, to) + tail(rest));
  if (!hi_nines) {
    SameLength(std::string(rest, '0'), hi.substr(i + 1), out,
               common + GbnfLiteral(std::string(1, hi[i])) + " ");
  }
}

// The decimal integers in [lo, hi], 0 <= lo <= hi, without leading zeros.
std::vector<std::string> NonNegativeRange(int64_t lo, int64_t hi) {
  std::vector<std::string> out;
  int64_t start = 0, end = 9;
  for (int digits = 1; digits <= 16 && start <= hi; ++digits) {
    const int64_t a = std::max(lo, start), b = std::min(hi, end);
    if (a <= b) SameLength(std::to_string(a), std::to_string(b), out, "");
    start = end + 1;
    end = end * 10 + 9;
  }
  return out;
}

// The integers in [lo, hi] as a GBNF expression. REQUIRES: lo <= hi.
std::string IntegerRange(int64_t lo, int64_t hi) {
  std::vector<std::string> alternatives;
  if (lo < 0) {
    const int64_t neg_hi = std::min<int64_t>(hi, -1);
    for (const std::string& a : NonNegativeRange(-neg_hi, -lo)) {
      alternatives.push_back("\"-\" " + a);
    }
  }
  if (hi >= 0) {
    for (std::string& a : NonNegativeRange(std::max<int64_t>(lo, 0), hi)) {
      alternatives.push_back(std::move(a));
    }
  }
  return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
}

class SchemaCompiler {
 public:
  // `prefix`: see JsonSchemaRules.
  SchemaCompiler(const Json& root, const JsonSchemaLimits& limits,
                 std::string prefix = "")
      : root_(root),
        limits_(limits),
        deadline_(absl::Now() + limits.max_time),
        prefix_(prefix),
        builder_(std::move(prefix)) {}

  absl::StatusOr<std::string> Compile() {
    const std::string root_name = builder_.Reserve("root");
    absl::StatusOr<std::string> expr = Visit(root_, "", 0);
    if (!expr.ok()) return expr.status();
    std::string text = absl::StrCat(root_name, " ::= ", *expr, "\n");
    absl::StrAppend(&text,
                    builder_.Text(prefix_.empty() ? JsonGbnfRules() : ""));
    if (static_cast<int64_t>(text.size()) > limits_.max_grammar_bytes) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the schema's grammar is %d bytes, more than the %d allowed",
          text.size(), limits_.max_grammar_bytes));
    }
    return text;
  }

 private:
  static absl::Status Refuse(std::string_view keyword, const std::string& ptr,
                             std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "`", absl::string_view(keyword.data(), keyword.size()), "` at #", ptr,
        ": ", absl::string_view(why.data(), why.size())));
  }
  // A refusal because no value validates there (not because kvserve cannot
  // write what does): an anyOf / oneOf branch or an optional property so
  // refused is left out, which changes nothing that validates.
  static constexpr char kUnsatisfiable[] = "kvserve/json-schema/unsatisfiable";
  static absl::Status Unsatisfiable(std::string_view keyword,
                                    const std::string& ptr,
                                    std::string_view why) {
    absl::Status s = Refuse(keyword, ptr, why);
    s.SetPayload(kUnsatisfiable, absl::Cord());
    return s;
  }
  static bool IsUnsatisfiable(const absl::Status& s) {
    return s.GetPayload(kUnsatisfiable).has_value();
  }

  // The target of a local $ref, or an error naming it.
  absl::StatusOr<const Json*> Resolve(const std::string& ref,
                                      const std::string& ptr) const {
    if (ref.empty() || ref[0] != '#') {
      return Refuse("$ref", ptr,
                    absl::StrCat("only local references (#/...) are "
                                 "supported, got ",
                                 QuoteClientText(ref)));
    }
    std::string pointer;
    for (size_t i = 1; i < ref.size(); ++i) {
      if (ref[i] == '%' && i + 2 < ref.size()) {
        int v = 0;
        if (sscanf(ref.c_str() + i + 1, "%2x", &v) == 1) {
          pointer.push_back(static_cast<char>(v));
          i += 2;
          continue;
        }
      }
      pointer.push_back(ref[i]);
    }
    const Json* at = &root_;
    if (!pointer.empty()) {
      if (pointer[0] != '/') {
        return Refuse(
            "$ref", ptr,
            absl::StrCat("not a JSON pointer: ", QuoteClientText(ref)));
      }
      size_t start = 1;
      while (true) {
        const size_t slash = pointer.find('/', start);
        std::string seg =
            pointer.substr(start, slash == std::string::npos ? std::string::npos
                                                             : slash - start);
        std::string key;
        for (size_t i = 0; i < seg.size(); ++i) {
          if (seg[i] == '~' && i + 1 < seg.size()) {
            key.push_back(seg[i + 1] == '1' ? '/' : '~');
            ++i;
          } else {
            key.push_back(seg[i]);
          }
        }
        if (at->is_object() && at->contains(key)) {
          at = &(*at)[key];
        } else if (at->is_array() && !key.empty() &&
                   key.find_first_not_of("0123456789") == std::string::npos &&
                   std::stoul(key.substr(0, 9)) < at->size()) {
          at = &(*at)[std::stoul(key.substr(0, 9))];
        } else {
          return Refuse("$ref", ptr,
                        absl::StrCat(QuoteClientText(ref), " is not found"));
        }
        if (slash == std::string::npos) break;
        start = slash + 1;
      }
    }
    return at;
  }

  // A branch of allOf / anyOf / oneOf as a schema object: a pure $ref
  // resolved (one level), true as {}.
  absl::StatusOr<Json> Inline(const Json& s, const std::string& ptr,
                              int depth) const {
    if (depth > limits_.max_depth) {
      return Refuse("$ref", ptr, "references nest too deep to combine");
    }
    if (s.is_boolean()) {
      if (!s.get<bool>())
        return Unsatisfiable("false", ptr, "nothing validates");
      return Json::object();
    }
    if (!s.is_object()) {
      return Refuse("schema", ptr, "must be an object or a boolean");
    }
    if (s.contains("$ref") && s["$ref"].is_string()) {
      absl::StatusOr<const Json*> target =
          Resolve(s["$ref"].get<std::string>(), ptr);
      if (!target.ok()) return target.status();
      absl::StatusOr<Json> inner = Inline(**target, ptr, depth + 1);
      if (!inner.ok()) return inner.status();
      Json rest = s;
      rest.erase("$ref");
      return Merge(*inner, rest, ptr);
    }
    return s;
  }

  // allOf's combination of two schema objects, for the keywords kvserve
  // can combine; others must agree.
  absl::StatusOr<Json> Merge(Json a, const Json& b,
                             const std::string& ptr) const {
    for (const auto& [key, value] : b.items()) {
      if (!a.contains(key)) {
        a[key] = value;
        continue;
      }
      Json& mine = a[key];
      if (mine == value || IsAnnotation(key)) continue;
      if (key == "properties" && mine.is_object() && value.is_object()) {
        for (const auto& [name, schema] : value.items()) {
          if (mine.contains(name) && mine[name] != schema) {
            mine[name] = Json{{"allOf", Json::array({mine[name], schema})}};
          } else {
            mine[name] = schema;
          }
        }
      } else if (key == "required" && mine.is_array() && value.is_array()) {
        for (const Json& r : value) {
          if (std::find(mine.begin(), mine.end(), r) == mine.end()) {
            mine.push_back(r);
          }
        }
      } else if (key == "type") {
        auto list = [](const Json& t) {
          std::set<std::string> out;
          if (t.is_string()) out.insert(t.get<std::string>());
          if (t.is_array()) {
            for (const Json& x : t) {
              if (x.is_string()) out.insert(x.get<std::string>());
            }
          }
          return out;
        };
        std::set<std::string> x = list(mine), y = list(value), both;
        for (const std::string& t : x) {
          if (y.count(t) || (t == "integer" && y.count("number"))) {
            both.insert(t);
          } else if (t == "number" && y.count("integer")) {
            both.insert("integer");
          }
        }
        if (both.empty()) {
          return Unsatisfiable("allOf", ptr,
                               "its branches' types do not overlap");
        }
        mine = Json(std::vector<std::string>(both.begin(), both.end()));
      } else if ((key == "minimum" || key == "minLength" || key == "minItems" ||
                  key == "minProperties" || key == "exclusiveMinimum") &&
                 mine.is_number() && value.is_number()) {
        mine = std::max(mine.get<double>(), value.get<double>());
      } else if ((key == "maximum" || key == "maxLength" || key == "maxItems" ||
                  key == "maxProperties" || key == "exclusiveMaximum") &&
                 mine.is_number() && value.is_number()) {
        mine = std::min(mine.get<double>(), value.get<double>());
      } else if (key == "enum" && mine.is_array() && value.is_array()) {
        Json kept = Json::array();
        for (const Json& v : mine) {
          if (std::find(value.begin(), value.end(), v) != value.end()) {
            kept.push_back(v);
          }
        }
        if (kept.empty()) {
          return Unsatisfiable("allOf", ptr,
                               "its branches' enums share no value");
        }
        mine = kept;
      } else if (key == "allOf" && mine.is_array() && value.is_array()) {
        for (const Json& x : value) mine.push_back(x);
      } else if (key == "additionalProperties") {
        if (mine == false || value == false) {
          mine = false;
        } else if (value != true) {
          mine = mine == true ? value : Json{{"allOf", {mine, value}}};
        }
      } else if (key == "items" && mine.is_object() && value.is_object()) {
        mine = Json{{"allOf", {mine, value}}};
      } else {
        return Refuse(key, ptr,
                      "allOf branches give it different values, which "
                      "kvserve cannot combine");
      }
    }
    return a;
  }

  // dependencies (draft-04/07), dependentRequired and dependentSchemas: a
  // property that brings other required names or a schema with it. As
  // written: a required one brings them always (its names join
  // `required`, its schema is combined as allOf is); an optional one is
  // never written (its schema becomes `false`, which Object() leaves out),
  // so what it would bring never applies.
  static absl::StatusOr<Json> WithoutDependencies(const Json& s,
                                                  const std::string& ptr) {
    Json out = s;
    std::set<std::string> required;
    if (s.contains("required") && s["required"].is_array()) {
      for (const Json& r : s["required"]) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    Json all_of = Json::array();
    for (const char* key :
         {"dependencies", "dependentRequired", "dependentSchemas"}) {
      if (!s.contains(key)) continue;
      out.erase(key);
      if (!s[key].is_object()) return Refuse(key, ptr, "must be an object");
      for (const auto& [name, what] : s[key].items()) {
        const bool names = what.is_array();
        const std::string_view k(key);
        if ((k != "dependencies" && names != (k == "dependentRequired")) ||
            (!names && !what.is_object() && !what.is_boolean())) {
          return Refuse(key, ptr,
                        absl::StrCat("its entry ", QuoteClientText(name),
                                     names ? " must be a schema"
                                           : " must be a list of names"));
        }
        if (!required.count(name)) {
          if (!out.contains("properties") || !out["properties"].is_object()) {
            out["properties"] = Json::object();
          }
          out["properties"][name] = false;
        } else if (names) {
          for (const Json& r : what) {
            if (!r.is_string()) {
              return Refuse(key, ptr, "must list names as strings");
            }
            out["required"].push_back(r);
          }
        } else {
          all_of.push_back(what);
        }
      }
    }
    if (all_of.empty()) return out;
    all_of.insert(all_of.begin(), out);
    return Json{{"allOf", all_of}};
  }

  // `not` in the forms that say which properties may not all be present
  // ({required: [a, b]}, and anyOf / allOf of such), as written: of each
  // such set, the first name the schema does not require is never written
  // (its schema becomes `false`), and only objects are (`required` holds
  // for any other value, so `not` refuses them). `not: {}` (or true):
  // nothing validates. Any other `not` is refused.
  static absl::StatusOr<Json> WithoutNot(const Json& s,
                                         const std::string& ptr) {
    auto plain = [](const Json& n) {  // n without its annotations
      Json out = n;
      if (!n.is_object()) return out;
      for (const auto& [key, value] : n.items()) {
        if (IsAnnotation(key)) out.erase(key);
      }
      return out;
    };
    const Json n = plain(s["not"]);
    if (n == true || n == Json::object()) {
      return Unsatisfiable("not", ptr,
                           "nothing validates: it negates a schema "
                           "everything validates");
    }
    // A set of names that may not all be present, when `x` says so.
    auto names = [&](const Json& x) -> std::optional<std::vector<std::string>> {
      const Json p = plain(x);
      if (!p.is_object() || !p.contains("required") ||
          !p["required"].is_array()) {
        return std::nullopt;
      }
      std::vector<std::string> out;
      for (const auto& [key, value] : p.items()) {
        if (key == "required") continue;
        if (key != "properties" || !value.is_object()) return std::nullopt;
        for (const auto& [name, schema] : value.items()) {
          if (!(schema == true || schema == Json::object())) {
            return std::nullopt;
          }
        }
      }
      for (const Json& r : p["required"]) {
        if (!r.is_string()) return std::nullopt;
        out.push_back(r.get<std::string>());
      }
      return out;
    };
    std::vector<std::vector<std::string>> sets;
    if (std::optional<std::vector<std::string>> one = names(n)) {
      sets.push_back(*std::move(one));
    } else if (n.is_object() && n.size() == 1 &&
               (n.contains("anyOf") || n.contains("allOf")) &&
               n.begin().value().is_array()) {
      // not anyOf: none of them; not allOf: not all of them together.
      const bool any = n.contains("anyOf");
      std::vector<std::string> together;
      for (const Json& b : n.begin().value()) {
        std::optional<std::vector<std::string>> set = names(b);
        if (!set.has_value()) {
          return Refuse("not", ptr, "cannot be enforced by a grammar");
        }
        if (any) {
          sets.push_back(*std::move(set));
        } else {
          together.insert(together.end(), set->begin(), set->end());
        }
      }
      if (!any) sets.push_back(std::move(together));
    } else {
      return Refuse("not", ptr, "cannot be enforced by a grammar");
    }
    std::set<std::string> required;
    if (s.contains("required") && s["required"].is_array()) {
      for (const Json& r : s["required"]) {
        if (r.is_string()) required.insert(r.get<std::string>());
      }
    }
    Json out = s;
    out.erase("not");
    if (s.contains("type") && !Types(s).count("object")) {
      return Unsatisfiable("not", ptr,
                           "holds only for objects, which `type` excludes");
    }
    out["type"] = "object";
    for (const std::vector<std::string>& set : sets) {
      if (set.empty()) {
        return Unsatisfiable("not", ptr, "nothing validates");
      }
      const auto free =
          std::find_if(set.begin(), set.end(),
                       [&](const auto& n) { return !required.count(n); });
      if (free == set.end()) {
        return Unsatisfiable("not", ptr,
                             "excludes properties the schema requires");
      }
      if (!out.contains("properties") || !out["properties"].is_object()) {
        out["properties"] = Json::object();
      }
      out["properties"][*free] = false;
    }
    return out;
  }

  absl::StatusOr<std::string> Visit(const Json& s, const std::string& ptr,
                                    int depth) {
    if (depth > limits_.max_depth) {
      return Refuse(
          "schema", ptr,
          absl::StrFormat("nests deeper than %d levels", limits_.max_depth));
    }
    if (builder_.bytes() > limits_.max_grammar_bytes) {
      return Refuse("schema", ptr, "makes too large a grammar");
    }
    if (absl::Now() > deadline_) {
      return Refuse(
          "schema", ptr,
          absl::StrCat("took more than ",
                       absl::FormatDuration(limits_.max_time), " to compile"));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("json-value");
      return Unsatisfiable("false", ptr, "nothing validates against it");
    }
    if (!s.is_object()) {
      return Refuse("schema", ptr, "must be an object or a boolean");
    }
    if (s.contains("not")) {
      absl::StatusOr<Json> plain = WithoutNot(s, ptr);
      if (!plain.ok()) return plain.status();
      return Visit(*plain, ptr, depth + 1);
    }
    if (s.contains("dependencies") || s.contains("dependentRequired") ||
        s.contains("dependentSchemas")) {
      absl::StatusOr<Json> plain = WithoutDependencies(s, ptr);
      if (!plain.ok()) return plain.status();
      return Visit(*plain, ptr, depth + 1);
    }
    for (const char* key :
         {"contains", "propertyNames", "minContains", "maxContains"}) {
      if (s.contains(key)) {
        return Refuse(key, ptr, "cannot be enforced by a grammar");
      }
    }
    if (s.contains("if") && (s.contains("then") || s.contains("else"))) {
      return Refuse("if", ptr, "conditional schemas are not supported");
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string())
        return Refuse("$ref", ptr, "must be a string");
      const std::string ref = s["$ref"].get<std::string>();
      bool siblings = false;
      for (const auto& [key, value] : s.items()) {
        siblings = siblings || (key != "$ref" && !IsAnnotation(key));
      }
      if (siblings) {
        absl::StatusOr<Json> merged = Inline(s, ptr, depth);
        if (!merged.ok()) return merged.status();
        return Visit(*merged, ptr, depth + 1);
      }
      if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) {
        return it->second;
      }
      absl::StatusOr<const Json*> target = Resolve(ref, ptr);
      if (!target.ok()) return target.status();
      const std::string name =
          builder_.Reserve(absl::StrCat("ref", ref.substr(ref.rfind('/') + 1)));
      ref_rules_.emplace(ref, name);
      absl::StatusOr<std::string> body =
          Visit(**target, ref.substr(1), depth + 1);
      if (!body.ok()) return body.status();
      builder_.Define(name, *body);
      return name;
    }
    if (s.contains("allOf")) {
      const Json& all = s["allOf"];
      if (!all.is_array() || all.empty()) {
        return Refuse("allOf", ptr, "must be a non-empty array");
      }
      Json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < all.size(); ++i) {
        const std::string p = absl::StrCat(ptr, "/allOf/", i);
        absl::StatusOr<Json> branch = Inline(all[i], p, depth + 1);
        if (!branch.ok()) return branch.status();
        absl::StatusOr<Json> m = Merge(merged, *branch, p);
        if (!m.ok()) return m.status();
        merged = *std::move(m);
      }
      return Visit(merged, ptr, depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const Json& branches = s[key];
      if (!branches.is_array() || branches.empty()) {
        return Refuse(key, ptr, "must be a non-empty array");
      }
      Json base = s;
      base.erase(key);
      std::vector<Json> merged;
      std::vector<std::string> alternatives;
      absl::Status unsatisfiable;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string p = absl::StrCat(ptr, "/", key, "/", i);
        absl::StatusOr<Json> m = Inline(branches[i], p, depth + 1);
        if (m.ok()) m = Merge(base, *m, p);
        absl::StatusOr<std::string> expr =
            m.ok() ? Visit(*m, p, depth + 1) : m.status();
        // A branch nothing validates is left out.
        if (!expr.ok() && IsUnsatisfiable(expr.status())) {
          unsatisfiable = expr.status();
          continue;
        }
        if (!expr.ok()) return expr.status();
        merged.push_back(*std::move(m));
        alternatives.push_back(*std::move(expr));
      }
      if (alternatives.empty()) return unsatisfiable;
      if (std::string_view(key) == "oneOf") {
        if (absl::Status d = CheckDisjoint(merged, ptr, depth); !d.ok()) {
          return d;
        }
      }
      return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
    }
    if (s.contains("const")) return GbnfLiteral(s["const"].dump());
    const std::set<std::string> types = Types(s);
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) return Refuse("enum", ptr, "must be an array");
      std::vector<std::string> alternatives;
      for (const Json& v : s["enum"]) {
        if (s.contains("type") && !types.count(TypeOf(v)) &&
            !(TypeOf(v) == "integer" && types.count("number"))) {
          continue;
        }
        alternatives.push_back(GbnfLiteral(v.dump()));
      }
      if (alternatives.empty()) {
        return Unsatisfiable("enum", ptr,
                             "no value of it has the schema's type");
      }
      return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
    }
    std::vector<std::string> alternatives;
    for (const std::string& t : types) {
      absl::StatusOr<std::string> expr;
      if (t == "object") {
        expr = Object(s, ptr, depth);
      } else if (t == "array") {
        expr = Array(s, ptr, depth);
      } else if (t == "string") {
        expr = String(s, ptr);
      } else if (t == "number" || t == "integer") {
        if (t == "integer" && types.count("number")) continue;
        expr = Number(s, ptr, t == "integer");
      } else if (t == "boolean") {
        expr = std::string("json-boolean");
      } else if (t == "null") {
        expr = std::string("json-null");
      } else {
        return Refuse("type", ptr,
                      absl::StrCat("unknown type ", QuoteClientText(t)));
      }
      if (!expr.ok()) return expr.status();
      alternatives.push_back(*std::move(expr));
    }
    if (alternatives.size() == 1) return alternatives[0];
    return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
  }

  static std::string TypeOf(const Json& v) {
    if (v.is_object()) return "object";
    if (v.is_array()) return "array";
    if (v.is_string()) return "string";
    if (v.is_boolean()) return "boolean";
    if (v.is_null()) return "null";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    const double d = v.get<double>();
    return d == std::floor(d) && std::abs(d) < 1e15 ? "integer" : "number";
  }

  // The types a schema object may produce: its `type`, else those its
  // keywords imply, else all.
  static std::set<std::string> Types(const Json& s) {
    std::set<std::string> out;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) out.insert(t.get<std::string>());
      if (t.is_array()) {
        for (const Json& x : t) {
          if (x.is_string()) out.insert(x.get<std::string>());
        }
      }
      return out;
    }
    auto has = [&](std::initializer_list<const char*> keys) {
      for (const char* k : keys) {
        if (s.contains(k)) return true;
      }
      return false;
    };
    if (has({"properties", "required", "additionalProperties",
             "patternProperties", "minProperties", "maxProperties"})) {
      out.insert("object");
    }
    if (has({"items", "prefixItems", "minItems", "maxItems", "uniqueItems",
             "additionalItems"})) {
      out.insert("array");
    }
    if (has({"minLength", "maxLength", "pattern", "format"})) {
      out.insert("string");
    }
    if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
             "multipleOf"})) {
      out.insert("number");
    }
    if (out.empty()) {
      out = {"object", "array", "string", "number", "boolean", "null"};
    }
    return out;
  }

  // The values a oneOf branch may take when it names them (const, enum;
  // through allOf, as merged properties are, those all its branches allow).
  static std::optional<std::vector<Json>> Values(const Json& s) {
    std::optional<std::vector<Json>> out;
    auto restrict = [&out](std::vector<Json> v) {
      if (out.has_value()) {
        std::vector<Json> both;
        for (const Json& x : *out) {
          if (std::find(v.begin(), v.end(), x) != v.end()) both.push_back(x);
        }
        v = std::move(both);
      }
      out = std::move(v);
    };
    if (!s.is_object()) return out;
    if (s.contains("const")) restrict({s["const"]});
    if (s.contains("enum") && s["enum"].is_array()) {
      restrict(std::vector<Json>(s["enum"].begin(), s["enum"].end()));
    }
    if (s.contains("allOf") && s["allOf"].is_array()) {
      for (const Json& b : s["allOf"]) {
        if (std::optional<std::vector<Json>> v = Values(b)) restrict(*v);
      }
    }
    return out;
  }

  // oneOf needs exactly one branch to match: branches must be told apart
  // by type, by their values, or (objects) by a required property whose
  // values differ.
  absl::Status CheckDisjoint(const std::vector<Json>& branches,
                             const std::string& ptr, int depth) const {
    std::vector<std::set<std::string>> types;
    for (const Json& b : branches) types.push_back(Types(b));
    auto normalized = [](std::set<std::string> t) {
      if (t.count("integer")) t.insert("number");
      return t;
    };
    for (size_t i = 0; i < branches.size(); ++i) {
      for (size_t j = i + 1; j < branches.size(); ++j) {
        const auto ti = normalized(types[i]), tj = normalized(types[j]);
        bool overlap = false;
        for (const std::string& t : ti) overlap = overlap || tj.count(t);
        if (!overlap) continue;
        const auto vi = Values(branches[i]), vj = Values(branches[j]);
        if (vi && vj) {
          bool shared = false;
          for (const Json& v : *vi) {
            shared =
                shared || std::find(vj->begin(), vj->end(), v) != vj->end();
          }
          if (!shared) continue;
        }
        if (ti == std::set<std::string>{"object"} && ti == tj &&
            (Discriminated(branches[i], branches[j], ptr, depth) ||
             (WrittenFails(branches[i], branches[j]) &&
              WrittenFails(branches[j], branches[i])))) {
          continue;
        }
        return Refuse("oneOf", ptr,
                      absl::StrFormat("branches %d and %d may both match, and "
                                      "oneOf needs exactly one to",
                                      i, j));
      }
    }
    return absl::OkStatus();
  }

  // The objects Object() writes for plain object schema `a` (no
  // combinators) never validate against plain object schema `b`: `b`
  // requires a property `a` never writes (Object() writes only the names
  // `a` declares or requires, or `{}` alone), or `a` always writes one
  // (required) that `b` forbids (additionalProperties: false, undeclared,
  // no patternProperties). So oneOf branches told apart only by which
  // properties they have can be honoured, as they are written.
  static bool WrittenFails(const Json& a, const Json& b) {
    for (const Json* s : {&a, &b}) {
      for (const char* k : {"allOf", "anyOf", "oneOf", "$ref", "not", "if"}) {
        if (s->contains(k)) return false;
      }
    }
    auto names = [](const Json& s, const char* key) {
      std::set<std::string> out;
      if (!s.contains(key)) return out;
      const Json& v = s[key];
      if (v.is_object()) {
        for (const auto& [name, schema] : v.items()) out.insert(name);
      } else if (v.is_array()) {
        for (const Json& n : v) {
          if (n.is_string()) out.insert(n.get<std::string>());
        }
      }
      return out;
    };
    const std::set<std::string> a_required = names(a, "required");
    std::set<std::string> a_names = names(a, "properties");
    a_names.insert(a_required.begin(), a_required.end());
    const bool a_closed =
        !a_names.empty() ||
        (a.contains("additionalProperties") &&
         a["additionalProperties"] == false) ||
        a.contains("patternProperties") ||
        (a.contains("maxProperties") && a["maxProperties"] == 0);
    if (a_closed) {
      for (const std::string& r : names(b, "required")) {
        if (!a_names.count(r)) return true;
      }
    }
    if (b.contains("additionalProperties") &&
        b["additionalProperties"] == false &&
        !b.contains("patternProperties")) {
      const std::set<std::string> b_declared = names(b, "properties");
      for (const std::string& r : a_required) {
        if (!b_declared.count(r)) return true;
      }
    }
    return false;
  }

  // Two object schemas with a property required by both whose values
  // (const / enum) share nothing.
  bool Discriminated(const Json& a, const Json& b, const std::string& ptr,
                     int depth) const {
    if (!a.contains("properties") || !b.contains("properties")) return false;
    auto required = [](const Json& s, const std::string& name) {
      if (!s.contains("required") || !s["required"].is_array()) return false;
      for (const Json& r : s["required"]) {
        if (r == name) return true;
      }
      return false;
    };
    for (const auto& [name, pa] : a["properties"].items()) {
      if (!b["properties"].contains(name) || !required(a, name) ||
          !required(b, name)) {
        continue;
      }
      absl::StatusOr<Json> xa = Inline(pa, ptr, depth + 1);
      absl::StatusOr<Json> xb = Inline(b["properties"][name], ptr, depth + 1);
      if (!xa.ok() || !xb.ok()) continue;
      const auto va = Values(*xa), vb = Values(*xb);
      if (!va || !vb) continue;
      bool shared = false;
      for (const Json& v : *va) {
        shared = shared || std::find(vb->begin(), vb->end(), v) != vb->end();
      }
      if (!shared) return true;
    }
    return false;
  }

  absl::StatusOr<int> Count(const Json& s, const char* key,
                            const std::string& ptr, int fallback) const {
    if (!s.contains(key)) return fallback;
    const Json& v = s[key];
    if (!v.is_number() || v.get<double>() < 0) {
      return Refuse(key, ptr, "must be a non-negative number");
    }
    const double d = v.get<double>();
    if (d > limits_.max_count) {
      // A larger maximum is kept to the most kvserve writes out (fewer
      // texts, all of them valid).
      if (std::string_view(key).substr(0, 3) == "max") return limits_.max_count;
      return Refuse(key, ptr,
                    absl::StrFormat("is more than the %d kvserve writes out",
                                    limits_.max_count));
    }
    return static_cast<int>(d);
  }

  // Matches `name` against a patternProperties pattern (PCRE2, close to
  // ECMA-262 for the patterns schemas use).
  static absl::StatusOr<bool> PatternMatches(const std::string& pattern,
                                             const std::string& name) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                      pattern.size(), PCRE2_UTF, &error, &offset, nullptr);
    if (code == nullptr) {
      return absl::InvalidArgumentError("the pattern does not compile");
    }
    pcre2_match_data* match =
        pcre2_match_data_create_from_pattern(code, nullptr);
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(name.data()),
                               name.size(), 0, 0, match, nullptr);
    pcre2_match_data_free(match);
    pcre2_code_free(code);
    return rc >= 0;
  }

  absl::StatusOr<std::string> Object(const Json& s, const std::string& ptr,
                                     int depth) {
    const Json empty = Json::object();
    const Json& props = s.contains("properties") && s["properties"].is_object()
                            ? s["properties"]
                            : empty;
    std::vector<std::string> names;
    for (const auto& [name, schema] : props.items()) names.push_back(name);
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) {
        return Refuse("required", ptr, "must be an array of names");
      }
      for (const Json& r : s["required"]) {
        if (!r.is_string()) {
          return Refuse("required", ptr, "must be an array of names");
        }
        required.insert(r.get<std::string>());
      }
    }
    const Json additional = s.contains("additionalProperties")
                                ? s["additionalProperties"]
                                : Json(true);
    // Required properties the schema does not declare: their value is
    // whatever additionalProperties allows.
    for (const std::string& r : required) {
      if (props.contains(r)) continue;
      if (additional == false) {
        return Unsatisfiable("required", ptr,
                             absl::StrCat("names ", QuoteClientText(r),
                                          ", which additionalProperties: "
                                          "false forbids"));
      }
      names.push_back(r);
    }
    if (s.contains("patternProperties")) {
      const Json& patterns = s["patternProperties"];
      if (!patterns.is_object()) {
        return Refuse("patternProperties", ptr, "must be an object");
      }
      for (const auto& [pattern, schema] : patterns.items()) {
        for (const std::string& name : names) {
          absl::StatusOr<bool> m = PatternMatches(pattern, name);
          if (!m.ok()) {
            return Refuse("patternProperties", ptr,
                          absl::StrCat("the pattern ", QuoteClientText(pattern),
                                       " does not compile"));
          }
          if (*m) {
            return Refuse(
                "patternProperties", ptr,
                absl::StrCat("the property ", QuoteClientText(name),
                             " matches the pattern ", QuoteClientText(pattern),
                             ", so both schemas would apply"));
          }
        }
      }
    }
    // Each name's value (an error is kept until the name is written). An
    // optional property nothing validates is left out; a required one
    // leaves nothing that validates.
    std::vector<absl::StatusOr<std::string>> values;
    bool left_out = false;
    {
      std::vector<std::string> kept;
      for (const std::string& name : names) {
        absl::StatusOr<std::string> v = std::string("json-value");
        if (props.contains(name)) {
          v = Visit(props[name],
                    absl::StrCat(ptr, "/properties/", Segment(name)),
                    depth + 1);
        } else if (additional != true) {
          v = Visit(additional, ptr + "/additionalProperties", depth + 1);
        }
        if (!v.ok() && IsUnsatisfiable(v.status())) {
          if (required.count(name)) return v.status();
          left_out = true;
          continue;
        }
        kept.push_back(name);
        values.push_back(std::move(v));
      }
      names = std::move(kept);
    }
    absl::StatusOr<int> min_props = Count(s, "minProperties", ptr, 0);
    if (!min_props.ok()) return min_props.status();
    absl::StatusOr<int> max_props =
        Count(s, "maxProperties", ptr, std::numeric_limits<int>::max());
    if (!max_props.ok()) return max_props.status();

    if (names.empty()) {
      // No declared properties: a map, unless nothing more is allowed (or
      // a property was left out: a map could write it).
      if (additional == false || s.contains("patternProperties") ||
          *max_props == 0 || left_out) {
        if (*min_props > 0) {
          return Refuse("minProperties", ptr,
                        "asks for properties the schema gives no way to "
                        "write");
        }
        return std::string("\"{\" ws \"}\"");
      }
      std::string value = "json-value";
      if (additional != true) {
        absl::StatusOr<std::string> v =
            Visit(additional, ptr + "/additionalProperties", depth + 1);
        if (!v.ok()) return v.status();
        value = *v;
      }
      const std::string kv =
          builder_.Add("kv", absl::StrCat("json-string ws \":\" ws ", value));
      return absl::StrCat("\"{\" ws ", List(kv, *min_props, *max_props),
                          " ws \"}\"");
    }
    // Declared (and required) properties, in order: the first optional
    // ones become required while fewer than minProperties are.
    std::vector<bool> must(names.size());
    int musts = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      must[i] = required.count(names[i]) > 0;
      musts += must[i];
    }
    for (size_t i = 0; i < names.size() && musts < *min_props; ++i) {
      if (!must[i]) {
        must[i] = true;
        ++musts;
      }
    }
    if (musts < *min_props) {
      return Refuse("minProperties", ptr,
                    "is more than the properties the schema declares");
    }
    if (musts > *max_props) {
      return Refuse("maxProperties", ptr,
                    "is fewer than the properties the schema requires");
    }
    if (static_cast<int>(names.size()) > *max_props) {
      // Only the required ones are written.
      std::vector<std::string> kept;
      std::vector<bool> kept_must;
      std::vector<absl::StatusOr<std::string>> kept_values;
      for (size_t i = 0; i < names.size(); ++i) {
        if (must[i]) {
          kept.push_back(names[i]);
          kept_must.push_back(true);
          kept_values.push_back(std::move(values[i]));
        }
      }
      names = std::move(kept);
      must = std::move(kept_must);
      values = std::move(kept_values);
    }
    std::vector<std::string> kvs;
    for (size_t i = 0; i < names.size(); ++i) {
      if (!values[i].ok()) return values[i].status();
      kvs.push_back(
          builder_.Add(absl::StrCat("kv-", names[i]),
                       absl::StrCat(GbnfLiteral(Json(names[i]).dump()),
                                    " ws \":\" ws ", *values[i])));
    }
    // first[i]: the properties from i on when none is written yet; rest[i]:
    // when one is (each after a comma). An optional property may be
    // skipped: its rule falls through to the next one's (linear in the
    // number of properties).
    const size_t n = kvs.size();
    std::vector<std::string> first(n + 1), rest(n + 1);
    first[n] = rest[n] = "\"\"";
    for (size_t i = n; i-- > 0;) {
      const std::string r = builder_.Add(
          "props", absl::StrCat(kSep, " ", kvs[i], " ", rest[i + 1],
                                must[i] ? "" : " | " + rest[i + 1]));
      const std::string f = builder_.Add(
          "props", absl::StrCat(kvs[i], " ", rest[i + 1],
                                must[i] ? "" : " | " + first[i + 1]));
      rest[i] = r;
      first[i] = f;
    }
    return absl::StrCat("\"{\" ws ", first[0], " ws \"}\"");
  }

  // count items of `item` separated by commas, min to max (max may be
  // INT_MAX: unbounded).
  static std::string List(const std::string& item, int min, int max) {
    if (max == 0) return "\"\"";
    const std::string more =
        max == std::numeric_limits<int>::max()
            ? absl::StrFormat("( %s %s )*", kSep, item)
            : absl::StrFormat("( %s %s ){0,%d}", kSep, item, max - 1);
    if (min <= 1) {
      std::string list = absl::StrCat(item, " ", more);
      if (min == 1) {
        if (max != std::numeric_limits<int>::max()) {
          list =
              absl::StrFormat("%s ( %s %s ){0,%d}", item, kSep, item, max - 1);
        }
        return list;
      }
      return absl::StrCat("( ", list, " )?");
    }
    return absl::StrFormat("%s ( %s %s ){%d,%s}", item, kSep, item, min - 1,
                           max == std::numeric_limits<int>::max()
                               ? std::string()
                               : std::to_string(max - 1));
  }

  absl::StatusOr<std::string> Array(const Json& s, const std::string& ptr,
                                    int depth) {
    std::vector<std::string> prefix;
    const Json* rest = nullptr;  // null: any values
    bool rest_allowed = true;
    auto add_prefix = [&](const Json& list, const char* key) -> absl::Status {
      for (size_t i = 0; i < list.size(); ++i) {
        absl::StatusOr<std::string> e =
            Visit(list[i], absl::StrCat(ptr, "/", key, "/", i), depth + 1);
        if (!e.ok()) return e.status();
        prefix.push_back(*e);
      }
      return absl::OkStatus();
    };
    if (s.contains("prefixItems") && s["prefixItems"].is_array()) {
      if (absl::Status st = add_prefix(s["prefixItems"], "prefixItems");
          !st.ok()) {
        return st;
      }
      if (s.contains("items")) rest = &s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {
      if (absl::Status st = add_prefix(s["items"], "items"); !st.ok())
        return st;
      if (s.contains("additionalItems")) rest = &s["additionalItems"];
    } else if (s.contains("items")) {
      rest = &s["items"];
    }
    std::string rest_expr = "json-value";
    if (rest != nullptr) {
      if (*rest == false) {
        rest_allowed = false;
      } else if (*rest != true) {
        absl::StatusOr<std::string> e = Visit(*rest, ptr + "/items", depth + 1);
        if (!e.ok()) return e.status();
        rest_expr = *e;
      }
    }
    absl::StatusOr<int> min = Count(s, "minItems", ptr, 0);
    if (!min.ok()) return min.status();
    absl::StatusOr<int> max =
        Count(s, "maxItems", ptr, std::numeric_limits<int>::max());
    if (!max.ok()) return max.status();
    if (s.contains("uniqueItems") && s["uniqueItems"] == true) {
      if (*min > 1) {
        return Refuse("uniqueItems", ptr,
                      "with minItems above 1 cannot be enforced by a "
                      "grammar");
      }
      *max = std::min(*max, 1);
    }
    const int k = prefix.size();
    if (!rest_allowed) *max = std::min(*max, k);
    if (*min > *max) {
      return Refuse("minItems", ptr, "asks for more items than are allowed");
    }
    constexpr int kUnbounded = std::numeric_limits<int>::max();
    if (k == 0) {
      if (!rest_allowed) return std::string("\"[\" ws \"]\"");
      return absl::StrCat("\"[\" ws ", List(rest_expr, *min, *max),
                          " ws \"]\"");
    }
    // After the prefix: the rest's items, each after a comma.
    std::string tail;
    if (*max > k) {
      tail = absl::StrFormat(
          "( %s %s ){%d,%s}", kSep, rest_expr, std::max(0, *min - k),
          *max == kUnbounded ? std::string() : std::to_string(*max - k));
    }
    // Prefix item i, then what follows it; optional from minItems on.
    std::string seq = tail;
    for (int i = std::min(k, *max) - 1; i >= 0; --i) {
      const std::string piece = absl::StrCat(
          i > 0 ? absl::StrCat(kSep, " ") : std::string(), prefix[i], " ", seq);
      seq = i < *min ? piece : absl::StrCat("( ", piece, " )?");
    }
    return absl::StrCat("\"[\" ws ", seq, " ws \"]\"");
  }

  absl::StatusOr<std::string> String(const Json& s, const std::string& ptr) {
    absl::StatusOr<int> min = Count(s, "minLength", ptr, 0);
    if (!min.ok()) return min.status();
    absl::StatusOr<int> max = Count(s, "maxLength", ptr, -1);  // -1: none
    if (!max.ok()) return max.status();
    if (*max >= 0 && *min > *max) {
      return Unsatisfiable("minLength", ptr, "is more than maxLength");
    }
    // A pattern, or a format's: with length bounds, narrowed to fit.
    std::optional<std::string> pattern;
    const char* keyword = "pattern";
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) {
        return Refuse("pattern", ptr, "must be a string");
      }
      pattern = s["pattern"].get<std::string>();
    } else if (s.contains("format") && s["format"].is_string()) {
      pattern = FormatPattern(s["format"].get<std::string>());
      keyword = "format";
    }
    if (pattern.has_value()) {
      absl::StatusOr<std::string> body = RegexToGbnf(*pattern, *min, *max);
      if (!body.ok()) {
        return Refuse(keyword, ptr, std::string(body.status().message()));
      }
      return absl::StrCat("\"\\\"\" ", *body, " \"\\\"\"");
    }
    if (*min == 0 && *max < 0) return std::string("json-string");
    return absl::StrFormat("\"\\\"\" json-char{%d,%s} \"\\\"\"", *min,
                           *max < 0 ? std::string() : std::to_string(*max));
  }

  // A format's strings (their common form) as a pattern; nullopt for a
  // format that only annotates.
  static std::optional<std::string> FormatPattern(const std::string& f) {
    static const char kDate[] =
        "[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])";
    static const char kTime[] =
        "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?"
        "(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    static const char kHost[] =
        "[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?"
        "(\\.[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?)*";
    static const char kOctet[] =
        "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
    std::string p;
    if (f == "date") p = kDate;
    if (f == "time") p = kTime;
    if (f == "date-time") p = absl::StrCat(kDate, "T", kTime);
    if (f == "uuid") {
      p = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
    }
    if (f == "email") {
      p = "[a-z0-9._+-]{1,32}@[a-z0-9][a-z0-9-]{0,30}"
          "(\\.[a-z0-9][a-z0-9-]{0,30})*\\.[a-z]{2,8}";
    }
    if (f == "hostname") p = kHost;
    if (f == "ipv4") {
      p = absl::StrCat(kOctet, "\\.", kOctet, "\\.", kOctet, "\\.", kOctet);
    }
    if (f == "uri") {
      // scheme://host[:port], then path segments and a query of RFC 3986
      // characters (no '%': an escape needs its two hex digits).
      p = absl::StrCat("[a-z][a-z0-9+.-]{0,10}://", kHost, "(:[0-9]{1,5})?",
                       "(/[a-zA-Z0-9._~!$&'()*+,;=:@-]{0,30}){0,8}",
                       "(\\?[a-zA-Z0-9._~!$&'()*+,;=:@/?-]{0,40})?");
    }
    if (p.empty()) return std::nullopt;
    return absl::StrCat("^", p, "$");
  }

  absl::StatusOr<std::string> Number(const Json& s, const std::string& ptr,
                                     bool integer) {
    if (s.contains("multipleOf")) {
      const Json& m = s["multipleOf"];
      if (!(m.is_number() && m.get<double>() == 1)) {
        return Refuse("multipleOf", ptr, "cannot be enforced by a grammar");
      }
      integer = true;
    }
    // Bounds: [lo, hi], each inclusive or exclusive.
    std::optional<double> lo, hi;
    bool lo_open = false, hi_open = false;
    auto bound = [&](const char* key, std::optional<double>& b, bool& open,
                     bool is_min, bool exclusive) -> absl::Status {
      if (!s.contains(key)) return absl::OkStatus();
      const Json& v = s[key];
      if (v.is_boolean()) {
        // Draft-04: exclusiveMinimum: true makes minimum exclusive.
        if (v.get<bool>() && exclusive) open = true;
        return absl::OkStatus();
      }
      if (!v.is_number()) return Refuse(key, ptr, "must be a number");
      const double d = v.get<double>();
      const bool tighter =
          !b.has_value() || (is_min ? d > *b || (d == *b && exclusive)
                                    : d < *b || (d == *b && exclusive));
      if (tighter) {
        b = d;
        open = exclusive;
      }
      return absl::OkStatus();
    };
    for (auto st : {bound("minimum", lo, lo_open, true, false),
                    bound("exclusiveMinimum", lo, lo_open, true, true),
                    bound("maximum", hi, hi_open, false, false),
                    bound("exclusiveMaximum", hi, hi_open, false, true)}) {
      if (!st.ok()) return st;
    }
    if (!lo.has_value() && !hi.has_value()) {
      return std::string(integer ? "json-integer" : "json-number");
    }
    // The integers within the bounds.
    const double flo = lo.has_value() ? *lo : -static_cast<double>(kMaxInt);
    const double fhi = hi.has_value() ? *hi : static_cast<double>(kMaxInt);
    auto clamp = [](double d) {
      return static_cast<int64_t>(std::clamp(d, -static_cast<double>(kMaxInt),
                                             static_cast<double>(kMaxInt)));
    };
    int64_t ilo = clamp(std::ceil(flo));
    if (lo_open && static_cast<double>(ilo) == flo) ++ilo;
    int64_t ihi = clamp(std::floor(fhi));
    if (hi_open && static_cast<double>(ihi) == fhi) --ihi;
    std::vector<std::string> alternatives;
    if (ilo <= ihi) alternatives.push_back(IntegerRange(ilo, ihi));
    if (!integer) {
      // i.fff lies in [i, i + 1): i > lo (or >= when closed) and i + 1 <=
      // hi; -i.fff lies in (-(i + 1), -i]: -(i + 1) >= lo and -i < hi (or
      // <=).
      const std::string frac = " \".\" [0-9]{1,16}";
      int64_t plo = std::max<int64_t>(0, clamp(std::ceil(flo)));
      if (lo_open && static_cast<double>(plo) == flo) ++plo;
      const int64_t phi = clamp(std::floor(fhi)) - 1;
      if (plo <= phi) alternatives.push_back(IntegerRange(plo, phi) + frac);
      int64_t nlo = std::max<int64_t>(0, clamp(std::ceil(-fhi)));
      if (hi_open && static_cast<double>(nlo) == -fhi) ++nlo;
      const int64_t nhi = clamp(std::floor(-flo)) - 1;
      if (nlo <= nhi) {
        alternatives.push_back("\"-\" " + IntegerRange(nlo, nhi) + frac);
      }
    }
    if (alternatives.empty()) {
      return Refuse(lo.has_value() ? "minimum" : "maximum", ptr,
                    "leaves no number kvserve can write");
    }
    return absl::StrCat("( ", absl::StrJoin(alternatives, " | "), " )");
  }

  const Json& root_;
  const JsonSchemaLimits limits_;
  const absl::Time deadline_;
  const std::string prefix_;
  GbnfBuilder builder_;
  absl::flat_hash_map<std::string, std::string> ref_rules_;
};

}  // namespace

namespace {

absl::StatusOr<std::string> SchemaToGbnf(std::string_view schema_json,
                                         const JsonSchemaLimits& limits,
                                         std::string prefix) {
  if (static_cast<int64_t>(schema_json.size()) > limits.max_schema_bytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the schema is %d bytes, more than the %d allowed",
                        schema_json.size(), limits.max_schema_bytes));
  }
  JsonDepthLimit<Json> depth;
  Json schema = Json::parse(schema_json, depth.callback(),
                            /*allow_exceptions=*/false);
  if (depth.exceeded()) return depth.Error("the schema");
  if (schema.is_discarded()) {
    return absl::InvalidArgumentError("the schema is not JSON");
  }
  return SchemaCompiler(schema, limits, std::move(prefix)).Compile();
}

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(std::string_view schema_json,
                                             const JsonSchemaLimits& limits) {
  return SchemaToGbnf(schema_json, limits, "");
}

absl::StatusOr<std::string> JsonSchemaRules(std::string_view schema_json,
                                            std::string prefix,
                                            const JsonSchemaLimits& limits) {
  return SchemaToGbnf(schema_json, limits, std::move(prefix));
}

absl::StatusOr<std::shared_ptr<const Grammar>> CompileJsonSchema(
    std::string_view schema_json, const JsonSchemaLimits& limits) {
  absl::StatusOr<std::string> gbnf = JsonSchemaToGbnf(schema_json, limits);
  if (!gbnf.ok()) return gbnf.status();
  GrammarLimits g;
  g.max_time = limits.max_time;
  g.max_text_bytes = limits.max_grammar_bytes;
  g.max_repetition = std::max(limits.max_count, 1000);
  g.max_elements = int64_t{4} << 20;
  absl::StatusOr<std::shared_ptr<const Grammar>> grammar =
      CompileGbnf(*gbnf, g);
  if (!grammar.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the schema's grammar does not compile (a bug in kvserve's schema "
        "compiler, or a limit passed): ",
        grammar.status().message()));
  }
  return grammar;
}

}  // namespace kvserve::constrain
