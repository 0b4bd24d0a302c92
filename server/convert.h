// Conversions between the API's protobuf messages and core's plain types.
// They check only what core has no rule for: the number and length of stop
// strings and the range of a TTL (INVALID_ARGUMENT). The ranges of
// max_tokens and the sampling parameters are the engine's to check
// (ValidateGenerateParams, core/engine/engine.h), when the request runs.
#ifndef KVSERVE_SERVER_CONVERT_H_
#define KVSERVE_SERVER_CONVERT_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/constrain/tool_calls.h"
#include "core/engine/engine.h"
#include "core/engine/requests.h"
#include "kvserve/v1/inference.pb.h"

namespace kvserve {

ChatMessage FromProto(const v1::ChatMessage& message);
Input FromProto(const v1::Input& input);

// A Generate request; max_tokens is default_max_tokens when unset, the
// seed random when unset. INVALID_ARGUMENT for more than 16 stop strings or
// one that is empty or longer than 256 bytes.
absl::StatusOr<GenerateParams> FromProto(const v1::GenerateRequest& request,
                                         int default_max_tokens);
// A Generate's constraint compiled; null when it asks for none.
// INVALID_ARGUMENT naming the field for one that does not compile.
absl::StatusOr<std::shared_ptr<const constrain::Grammar>> FromProto(
    const v1::Constraint& constraint);
// Each choice's params of a Generate (GenerateRequest.n; ChoiceParams):
// INVALID_ARGUMENT when n is outside [0, kMaxChoices].
absl::StatusOr<std::vector<GenerateParams>> ChoicesFromProto(
    const v1::GenerateRequest& request, int default_max_tokens);

// The longest TTL: 100 years of 365 days. Longer ones are refused, not
// clamped, so that a session never comes back with a TTL other than the one
// it was given (the session log keeps it as int64 nanoseconds, which end at
// 292 years).
inline constexpr int64_t kMaxTtlSeconds = int64_t{100} * 365 * 24 * 3600;

// nullopt when unset (no TTL); INVALID_ARGUMENT when set and not positive,
// or above kMaxTtlSeconds.
absl::StatusOr<std::optional<absl::Duration>> TtlFromProto(bool has_ttl,
                                                           int64_t ttl_seconds);

// A chat Generate's tools (OpenAI's tools, tool_choice,
// parallel_tool_calls; HTTP and gRPC alike), put to use in the served
// template's `format`: the constraint the choice asks for
// (constrain::ToolCallGrammar) set on `params` (INVALID_ARGUMENT beside a
// constraint of the client's when a call is required; with "auto" the
// client's rules), and how the replies are read: nullopt when as plain
// text (no tools or "none", and no reasoning to split).
absl::StatusOr<std::optional<constrain::ParseOptions>> UseTools(
    const constrain::ReplyFormat& format,
    const std::vector<constrain::ToolSpec>& tools,
    const constrain::ToolChoice& choice, bool parallel, bool reasoning_inline,
    GenerateParams& params);

// The tools of a gRPC Generate (prompt.messages.tools_json, tool_choice,
// parallel_tool_calls, reasoning_inline) put to use on every choice
// (UseTools). INVALID_ARGUMENT naming the field for bad tools. REQUIRES:
// `choices` as ChoicesFromProto made them (choice i is ChoiceParams(choice
// 0, i)).
absl::StatusOr<std::optional<constrain::ParseOptions>> ToolsFromProto(
    const v1::GenerateRequest& request, const constrain::ReplyFormat& format,
    std::vector<GenerateParams>& choices);

void ToProto(const constrain::ReplyDelta& delta, v1::ReplyDelta* out);
void ToProto(const constrain::ParsedReply& reply, v1::Reply* out);

void ToProto(const SessionInfo& info, v1::Session* out);
void ToProto(const Usage& usage, v1::Usage* out);
void ToProto(const GeneratedToken& token, const Tokenizer& tokenizer,
             v1::GeneratedToken* out);
void ToProto(const GenerateResult& result, v1::GenerateFinal* out);

}  // namespace kvserve

#endif  // KVSERVE_SERVER_CONVERT_H_
