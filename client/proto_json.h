// How kvctl prints API messages: as one-line JSON objects (nlohmann::json,
// keys in the .proto's field order) or as "name: value" lines for people.
//
// JSON: field names as in the .proto (snake_case), integers (also 64-bit) as
// numbers, enums by name, Timestamps as RFC 3339 strings, repeated fields as
// arrays. Proto3 scalars are always written, zero included (scripts rely on
// every field being there); fields with presence only when set. Floats are
// written with a float's own precision (-3.0565696, not -3.0565695762634277);
// NaN and infinities, which JSON cannot represent, become null.
#ifndef KVSERVE_CLIENT_PROTO_JSON_H_
#define KVSERVE_CLIENT_PROTO_JSON_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "kvserve/v1/inference.pb.h"
#include "nlohmann/json.hpp"

namespace kvserve {

// Objects keep their keys in insertion order.
using Json = nlohmann::ordered_json;

// `json` on one line, no trailing newline. Never throws: invalid UTF-8 in a
// string becomes U+FFFD, so the output is always valid JSON.
std::string DumpJson(const Json& json);
// Appends `text` as a quoted JSON string literal, as DumpJson writes it
// (for JSON lines built by hand, e.g. bench/util).
void AppendJsonString(absl::string_view text, std::string* out);

// The double that prints as the shortest decimal that reads back as `value`.
double JsonFloat(float value);

Json ProtoToJson(const google::protobuf::Message& message);

// `generate --json`: one {"token_id", "text"[, "logprob", "top_logprobs"]}
// object per token, then {"finish_reason", "usage", "timings"[,
// "session_id"][, "text"][, "reply": {"content", "reasoning", "tool_calls":
// [{"id", "name", "arguments"}]}]} with finish_reason as FinishReasonName
// gives it.
Json TokenToJson(const v1::GeneratedToken& token);

// Chat messages from a JSON array of {role, content, name, tool_call_id,
// tool_calls} objects (content a string or null; tool_calls any JSON,
// carried as its text). INVALID_ARGUMENT naming the message and field.
absl::StatusOr<std::vector<v1::ChatMessage>> ChatMessagesFromJson(
    const Json& json);
Json FinalToJson(const v1::GenerateFinal& final_message);

// The fields as "name: value" lines; nested messages as "outer.inner:
// value", repeated fields space-separated on one line (empty ones left out).
std::string ProtoToText(const google::protobuf::Message& message,
                        absl::string_view prefix = "");

}  // namespace kvserve

#endif  // KVSERVE_CLIENT_PROTO_JSON_H_
