// Minimal JSON output for kvctl (no JSON library is among our dependencies).
// Strings are escaped per RFC 8259; invalid UTF-8 becomes U+FFFD, so the
// output is always valid JSON in valid UTF-8.
#ifndef KVSERVE_CLIENT_JSON_WRITER_H_
#define KVSERVE_CLIENT_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace kvserve {

// Appends `text` as a quoted JSON string literal.
void AppendJsonString(absl::string_view text, std::string* out);
std::string JsonString(absl::string_view text);
// The shortest JSON number that reads back as `value` (a float's own
// precision for floats); NaN and infinities (not representable) become null.
std::string JsonNumber(double value);
std::string JsonNumber(float value);

// One JSON object, keys in insertion order, written on one line.
class JsonObject {
 public:
  JsonObject& AddString(absl::string_view key, absl::string_view value);
  JsonObject& AddInt(absl::string_view key, int64_t value);
  JsonObject& AddUint(absl::string_view key, uint64_t value);
  JsonObject& AddDouble(absl::string_view key, double value);
  JsonObject& AddFloat(absl::string_view key, float value);
  JsonObject& AddBool(absl::string_view key, bool value);
  JsonObject& AddObject(absl::string_view key, const JsonObject& value);
  // `json` must already be valid JSON (an array, a nested value, ...).
  JsonObject& AddRaw(absl::string_view key, absl::string_view json);

  bool empty() const { return body_.empty(); }
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void AddKey(absl::string_view key);

  std::string body_;
};

// A message as one JSON object: field names as in the .proto, integers
// (also 64-bit) as numbers, enums by name, Timestamps as RFC 3339 strings,
// repeated fields as arrays. Proto3 scalars are always written; fields with
// presence only when set.
std::string ProtoToJson(const google::protobuf::Message& message);
// The same fields as "name: value" lines for people; nested messages as
// "outer.inner: value", repeated fields space-separated on one line.
std::string ProtoToText(const google::protobuf::Message& message,
                        absl::string_view prefix = "");

}  // namespace kvserve

#endif  // KVSERVE_CLIENT_JSON_WRITER_H_
