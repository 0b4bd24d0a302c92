// A depth limit for client-supplied JSON, checked on the text before any
// parser or recursive walk sees it. nlohmann's parser is iterative, but
// dump(), copies and conversions recurse: a value nested 100,000 deep
// overflowed the stack of whatever walked it first. Header-only, with no
// dependency, so kvctl (which does not link core) checks its files the
// same way.
#ifndef KVSERVE_CORE_UTIL_JSON_DEPTH_H_
#define KVSERVE_CORE_UTIL_JSON_DEPTH_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace kvserve {

// The template layer's limit on a value's nesting (jinja::kMaxValueDepth).
inline constexpr int kMaxJsonDepth = 512;

struct JsonTooDeep {
  // The key of the top-level object member in which the limit was passed;
  // empty when the text is not an object or no key was open.
  std::string top_key;
};

// Scans `text` (valid JSON or not) without recursion: nullopt when no
// array or object nests deeper than `max_depth`, else where it did.
// Brackets inside strings do not count.
inline std::optional<JsonTooDeep> CheckJsonDepth(
    std::string_view text, int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  size_t string_start = 0;
  std::string_view last_top_string;  // the last string closed at depth 1
  std::string_view top_key;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
        if (depth == 1) {
          last_top_string = text.substr(string_start, i - string_start);
        }
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        string_start = i + 1;
        break;
      case ':':
        if (depth == 1) top_key = last_top_string;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          return JsonTooDeep{std::string(top_key)};
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        if (depth == 0) top_key = {};
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_JSON_DEPTH_H_
