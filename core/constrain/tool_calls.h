// A model's reply split into what the API returns: content, reasoning
// (`<think>...</think>`) and tool calls, read in the format the chat
// template taught the model. Pure text in, plain structs out: the HTTP and
// gRPC layers turn them into OpenAI's `message.tool_calls` and
// `reasoning_content` and stream them as deltas.
//
// The formats (ToolCallFormat) are those the common templates emit; the
// template's source decides which (DetectReplyFormat), as llama-server
// decides. A reply is parsed as a whole each time (ParseReply): with
// `partial`, the text may still grow, so a tail that may begin a call's or a
// reasoning block's opener is held back, and a call is given once its name
// is known, with its arguments as written so far. Each partial parse
// extends the previous one (content, reasoning and every call's arguments
// only grow), which ReplyStream turns into deltas, however the text was cut
// into pieces.
//
// Arguments are the JSON text the model wrote, as OpenAI returns them (a
// string the client parses); a call whose arguments are a JSON string gives
// that string's content.
#ifndef KVSERVE_CORE_CONSTRAIN_TOOL_CALLS_H_
#define KVSERVE_CORE_CONSTRAIN_TOOL_CALLS_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvserve::constrain {

enum class ToolCallFormat {
  // {"tool_calls": [{"name", "arguments"}]} or {"response": "..."}: the
  // whole reply is JSON (a template that does not render tools is told so
  // in a system message, GenericToolPrompt).
  kGeneric,
  // Llama 3.x: {"name": ..., "parameters": {...}} as the reply (several
  // separated by ';' or newlines), or after <|python_tag|>, where
  // NAME.call(key="value", ...) also calls a built-in tool.
  kLlama3,
  // Hermes 2 Pro, Qwen 2.5, Qwen 3: <tool_call>{"name", "arguments"}
  // </tool_call>, one block per call.
  kHermes,
  // Mistral: [TOOL_CALLS][{"name", "arguments", "id"}, ...].
  kMistral,
  // DeepSeek R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
  // <｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>...
  // <｜tool▁calls▁end｜>.
  kDeepSeekR1,
  // Command R7B: <|START_ACTION|>[{"tool_call_id", "tool_name",
  // "parameters"}]<|END_ACTION|>.
  kCommandR,
  // Functionary v3.2: >>>NAME\nARGS per call (>>>all\n for text);
  // v3.1 (Llama 3.1): <function=NAME>ARGS</function>.
  kFunctionaryV3,
};

// "generic", "llama3", "hermes", "mistral", "deepseek_r1", "command_r",
// "functionary_v3".
std::string_view ToolCallFormatName(ToolCallFormat format);

// How a template's replies are read.
struct ReplyFormat {
  ToolCallFormat tools = ToolCallFormat::kGeneric;
  // The reply may open with a reasoning block (<think>...</think>, or
  // Command R's <|START_THINKING|>...<|END_THINKING|>).
  bool reasoning = false;
  // The generation prompt already opened the block (DeepSeek R1's ends in
  // "<think>\n"): the reply starts inside it.
  bool reasoning_open = false;
  // The template shows the model `tools`; when not, the tools reach it in
  // GenericToolPrompt.
  bool renders_tools = false;
};

// The format of `template_source`'s tool calls and whether it reasons;
// reasoning_open is left false (RenderChatPrompt's generation prompt tells,
// ReasoningOpenAfter).
ReplyFormat DetectReplyFormat(std::string_view template_source);

// For a template that does not show the model `tools` (tools_json, OpenAI's
// array): the system text that does, and asks for the generic format's
// JSON reply.
std::string GenericToolPrompt(std::string_view tools_json);

// Whether a rendered prompt ends inside an opened reasoning block.
bool ReasoningOpenAfter(std::string_view prompt);

// A function the client offers the model (OpenAI's tools[i].function).
struct ToolSpec {
  std::string name;
  std::string parameters_json;  // a JSON Schema; empty: any object
};

// OpenAI's tool_choice.
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kFunction };
  Mode mode = Mode::kAuto;
  std::string function;  // kFunction: the one to call
};

// OpenAI's limit on the functions one request offers.
inline constexpr int kMaxTools = 128;

// OpenAI's `tools` array as JSON text: [{"type": "function", "function":
// {"name", "description", "parameters"}}], at most kMaxTools, names of 1 to
// 64 letters,
// digits, '_' or '-' (they reach templates and grammars as written),
// unique. INVALID_ARGUMENT naming the field ("`tools[1].function.name`").
absl::StatusOr<std::vector<ToolSpec>> ParseTools(std::string_view tools_json);

// INVALID_ARGUMENT when `choice` asks for what `tools` cannot give:
// "required" without tools, a function not among them.
absl::Status CheckToolChoice(const ToolChoice& choice,
                             const std::vector<ToolSpec>& tools);

struct ToolCall {
  std::string id;  // as the model wrote it (Mistral, Command R); else empty
  std::string name;
  std::string arguments;  // JSON text; partial: as far as written
};

struct ParsedReply {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> calls;
};

struct ParseOptions {
  ReplyFormat format;
  // Tools were offered (and tool_choice is not "none"): calls are looked
  // for. Otherwise all but reasoning is content.
  bool tools = false;
  // Reasoning is returned apart; false: left in the content as written.
  bool split_reasoning = true;
  // Only the first call is kept (parallel_tool_calls false); the text of
  // any other is dropped.
  bool single_call = false;
};

// `text` is the reply as generated, control tokens spelled as their pieces
// (the text a client sees has none). Never fails: what is not a
// well-formed call or reasoning block is content. With `partial`, see the
// file comment.
ParsedReply ParseReply(const ParseOptions& options, std::string_view text,
                       bool partial);

// What a piece of text adds to a reply: new content and reasoning, and for
// each call that grew, its index, its id and name (the first time it
// appears) and the arguments' new text.
struct ReplyDelta {
  struct Call {
    int index = 0;
    std::string id;    // set the first time only
    std::string name;  // set the first time only
    std::string arguments;
  };
  std::string content;
  std::string reasoning;
  std::vector<Call> calls;

  bool empty() const {
    return content.empty() && reasoning.empty() && calls.empty();
  }
  // Adds what `later` added after this (a call's pieces stay in order).
  void Append(const ReplyDelta& later);
};

// A reply fed piece by piece: each Push returns what the piece added, Finish
// what the end adds (held-back text that began no opener). A call without a
// model-written id gets "call_" and 24 random letters and digits when it
// first appears, kept to the end.
class ReplyStream {
 public:
  explicit ReplyStream(ParseOptions options) : options_(options) {}

  ReplyDelta Push(std::string_view piece);
  // A control token (by its piece): read as text when it is one of the
  // format's markers ("[TOOL_CALLS]", "<|python_tag|>"), else dropped, as
  // the text a client sees drops it.
  ReplyDelta PushControl(std::string_view piece);
  ReplyDelta Finish();

  // The reply as sent so far (after Finish: the whole reply, ids included).
  const ParsedReply& sent() const { return sent_; }
  const std::string& text() const { return text_; }

 private:
  ReplyDelta Advance(bool partial);

  const ParseOptions options_;
  std::string text_;
  ParsedReply sent_;
};

// A fresh tool call id: "call_" and 24 random letters and digits.
std::string NewToolCallId();

}  // namespace kvserve::constrain

#endif  // KVSERVE_CORE_CONSTRAIN_TOOL_CALLS_H_
