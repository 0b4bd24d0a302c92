// A depth limit for client-supplied JSON, kept by nlohmann's parser itself.
// The parser is iterative, but dump(), copies and conversions recurse: a
// value nested 100,000 deep overflowed the stack of whatever walked it
// first. The parser callback sees each array's and object's depth, so a
// value past the limit is discarded as it is read (the parse goes on
// without recursion) and the caller refuses the input. Header-only, so
// kvctl (which does not link core) checks its files the same way.
//
//   JsonDepthLimit<Json> limit;
//   Json json = Json::parse(text, limit.callback());
//   if (limit.exceeded()) return limit.Error("`tools`");
#ifndef KVSERVE_CORE_UTIL_JSON_DEPTH_H_
#define KVSERVE_CORE_UTIL_JSON_DEPTH_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace kvserve {

// The template layer's limit on a value's nesting (jinja::kMaxValueDepth).
inline constexpr int kMaxJsonDepth = 512;

// `what` nested past the limit, as INVALID_ARGUMENT.
inline absl::Status JsonTooDeepError(std::string_view what,
                                     int max_depth = kMaxJsonDepth) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s nests arrays and objects deeper than %d levels", what, max_depth));
}

// BasicJson: nlohmann::json or nlohmann::ordered_json. The top level is
// depth 1. Not thread-safe; one parse at a time.
template <typename BasicJson>
class JsonDepthLimit {
 public:
  explicit JsonDepthLimit(int max_depth = kMaxJsonDepth)
      : max_depth_(max_depth) {}

  // For BasicJson::parse; the limit must outlive the parse.
  typename BasicJson::parser_callback_t callback() {
    return [this](int depth, typename BasicJson::parse_event_t event,
                  BasicJson& parsed) {
      using Event = typename BasicJson::parse_event_t;
      // nlohmann's depth counts the containers around the value: 0 for
      // the top level.
      if (event == Event::object_start || event == Event::array_start) {
        if (depth >= max_depth_) {
          exceeded_ = true;
          return false;  // discarded, and so is everything inside it
        }
      } else if (event == Event::key && depth == 1 && !exceeded_) {
        top_key_ = parsed.template get<std::string>();
      }
      return true;
    };
  }

  bool exceeded() const { return exceeded_; }
  // The key of the top-level object member in which the limit was passed;
  // empty when the top level is not an object.
  const std::string& top_key() const { return top_key_; }
  absl::Status Error(std::string_view what) const {
    return JsonTooDeepError(what, max_depth_);
  }

 private:
  const int max_depth_;
  bool exceeded_ = false;
  std::string top_key_;
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_UTIL_JSON_DEPTH_H_
