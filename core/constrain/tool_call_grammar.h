// The grammar of a reply that calls tools: the format's markers around
// each call, the function's name, and arguments that validate against the
// function's `parameters` (JSON Schema, json_schema.h). With it, even a
// model that has never seen the tools writes calls that ParseReply
// (tool_calls.h) reads and whose arguments validate.
#ifndef KVSERVE_CORE_CONSTRAIN_TOOL_CALL_GRAMMAR_H_
#define KVSERVE_CORE_CONSTRAIN_TOOL_CALL_GRAMMAR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/constrain/grammar.h"
#include "core/constrain/tool_calls.h"

namespace kvserve::constrain {

struct ToolCallConstraint {
  std::shared_ptr<const Grammar> grammar;  // null: the reply is free
  // Non-empty: the grammar is lazy, switched on at the first of these
  // (GenerateParams::grammar_triggers).
  std::vector<std::string> triggers;
};

// The constraint for `choice`: kRequired, calls of any of `tools`;
// kFunction, calls of that one; several when `parallel`, else one. A
// reasoning format's reply thinks first (<think>...</think>, opened by the
// prompt when format.reasoning_open). kAuto: in the generic format (whose
// whole reply is JSON) calls or {"response": "..."}; in the others the
// reply is free until it writes a call's opener, and the call then follows
// the grammar (a lazy grammar). kNone: none. INVALID_ARGUMENT naming the
// tool whose parameters cannot be honoured (JsonSchemaToGbnf's refusals).
// REQUIRES: kFunction names one of `tools`.
absl::StatusOr<ToolCallConstraint> ToolCallGrammar(
    const ReplyFormat& format, const std::vector<ToolSpec>& tools,
    const ToolChoice& choice, bool parallel);

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_TOOL_CALL_GRAMMAR_H_
