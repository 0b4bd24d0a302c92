// The grammar of a reply that calls tools: the format's markers around
// each call, the function's name, and arguments that validate against the
// function's `parameters` (JSON Schema, json_schema.h). With it, even a
// model that has never seen the tools writes calls that ParseReply
// (tool_calls.h) reads and whose arguments validate.
#ifndef KVSERVE_CORE_CONSTRAIN_TOOL_CALL_GRAMMAR_H_
#define KVSERVE_CORE_CONSTRAIN_TOOL_CALL_GRAMMAR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/constrain/grammar.h"
#include "core/constrain/tool_calls.h"

namespace kvserve::constrain {

// The grammar for `choice`: kRequired, calls of any of `tools`; kFunction,
// calls of that one; several when `parallel`, else one. kAuto in the
// generic format (whose whole reply is JSON): calls or {"response":
// "..."}. nullptr (free text) for kNone and for kAuto in the other formats.
// A reasoning format's reply thinks first (<think>...</think>, opened by
// the prompt when format.reasoning_open). INVALID_ARGUMENT naming the tool
// whose parameters cannot be honoured (JsonSchemaToGbnf's refusals).
// REQUIRES: kFunction names one of `tools`.
absl::StatusOr<std::shared_ptr<const Grammar>> ToolCallGrammar(
    const ReplyFormat& format, const std::vector<ToolSpec>& tools,
    const ToolChoice& choice, bool parallel);

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_TOOL_CALL_GRAMMAR_H_
