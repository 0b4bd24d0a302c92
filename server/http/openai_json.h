// The JSON of the HTTP API: OpenAI's /v1/chat/completions, /v1/completions
// and /v1/models, llama-server's /tokenize, /detokenize and /apply-template,
// and kvserve's /sessions. Requests are parsed into core's types
// (GenerateParams, ChatMessage, ...) and responses built from them; nothing
// here touches a socket, so all of it is unit-tested.
//
// Parsing rules, the same for every field: absent and null are the same
// (the default); a value of the wrong JSON type is INVALID_ARGUMENT naming
// the field ("`max_tokens` must be an integer, got string"); unknown fields
// are ignored, as OpenAI's SDKs send fields we do not use.
//
// Errors are OpenAI's shape, {"error": {"message", "type", "param", "code"}},
// with the HTTP status from HttpStatus(), the one place absl codes become
// HTTP statuses.
#ifndef KVSERVE_SERVER_HTTP_OPENAI_JSON_H_
#define KVSERVE_SERVER_HTTP_OPENAI_JSON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/chat/chat_template.h"
#include "core/constrain/tool_calls.h"
#include "core/engine/requests.h"
#include "core/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace kvserve::http {

// Ordered: object keys keep the order the client sent them in (a tool
// definition reaches the chat template as written), and responses list
// their fields in the order they are built.
using Json = nlohmann::ordered_json;

// --- Errors ---------------------------------------------------------------

// The `code` of an unknown model (as vLLM and OpenAI answer), attached to a
// NOT_FOUND with WithReason (core/util/status_reason.h).
inline constexpr char kReasonModelNotFound[] = "model_not_found";

// The HTTP status of a failed call: INVALID_ARGUMENT, OUT_OF_RANGE 400;
// UNAUTHENTICATED 401; PERMISSION_DENIED 403; NOT_FOUND 404;
// ALREADY_EXISTS, FAILED_PRECONDITION (a busy session), ABORTED (a
// preempted request) 409; RESOURCE_EXHAUSTED 429; UNAVAILABLE 503;
// CANCELLED 499 (nginx's "client closed request"); anything else 500.
int HttpStatus(absl::StatusCode code);

// {"error": {...}} for a failed call: `type` from the HTTP status, `code`
// the status's reason (ReasonOf) when it has one, else the absl code in
// lower case ("invalid_argument").
Json ErrorJson(const absl::Status& status);
// The same for an error made by the HTTP layer itself (413, unknown route).
Json ErrorJson(int http_status, absl::string_view message,
               absl::string_view code);

// Serializes `json`; invalid UTF-8 in a string (a token's raw bytes) becomes
// U+FFFD instead of failing.
std::string Dump(const Json& json);

// The request body as a JSON object. Malformed JSON is INVALID_ARGUMENT
// naming the line, column and byte; anything but an object also.
absl::StatusOr<Json> ParseBody(absl::string_view body);

// --- Generation -----------------------------------------------------------

enum class Endpoint { kChatCompletions, kCompletions };

// One /v1/chat/completions or /v1/completions request.
struct GenerationRequest {
  // prompt: ChatInput (chat) or text or token ids (completions; the first
  // of a list of prompts); owner is left empty (the caller's, set by the
  // server); session_id from the body's `session_id`.
  GenerateParams params;
  // Completions: the list's other prompts, each run as params.prompt is.
  std::vector<Input> more_prompts;
  // Choices per prompt (`n`): prompt p's choice j has index p * n + j.
  int n = 1;
  std::string model;       // as requested; empty: not given
  std::string tools_json;  // chat: the `tools` array as JSON; empty: none
  std::vector<constrain::ToolSpec> tools;  // chat: the functions offered
  constrain::ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  // llama-server's reasoning_format "none": reasoning stays in the content.
  bool reasoning_inline = false;
  // Set by the server (UseTools, server/convert.h): how the replies are
  // read; nullopt: as plain text.
  std::optional<constrain::ParseOptions> parse;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;       // report logprobs (params.logprobs >= 0)
  bool echo = false;  // completions: the prompt's text precedes the answer
};

// `default_max_tokens` when neither max_tokens nor max_completion_tokens is
// given. OpenAI's defaults: temperature 1, top_p 1, a random seed. More
// than kMaxChoices choices in all (n times the prompts) is
// INVALID_ARGUMENT, as is a stop list longer than 16 or a stop string empty
// or longer than 256 bytes (the gRPC API's limits).
absl::StatusOr<GenerationRequest> ParseChatRequest(const Json& body,
                                                   int default_max_tokens);
absl::StatusOr<GenerationRequest> ParseCompletionRequest(
    const Json& body, int default_max_tokens);

// A chat `messages` array. content: a string, null or a list of
// {"type": "text", "text"} parts (joined with "\n", as vLLM does; other
// part types are INVALID_ARGUMENT); tool_calls: kept as JSON text.
absl::StatusOr<std::vector<ChatMessage>> ParseMessages(const Json& messages);

// NOT_FOUND with kReasonModelNotFound unless `requested` is empty or the
// served model's name.
absl::Status CheckModel(absl::string_view requested, absl::string_view served);

// "stop" for a stop string and an end of generation, "length" for
// max_tokens and a full context; a cancelled request also says "stop".
// "tool_calls" instead of "stop" when the reply called tools.
absl::string_view OpenAiFinishReason(FinishReason reason,
                                     bool called_tools = false);

// A streamed chat chunk's delta for what a piece added to the reply:
// content, reasoning_content, and tool_calls as OpenAI streams them (index,
// id, type and name first, argument fragments after).
Json ReplyDeltaJson(const constrain::ReplyDelta& delta);

// One generated token's logprob, with its text (the token's bytes after the
// previous token, made valid UTF-8) and those of the alternatives.
struct TokenLogprobEntry {
  struct Alternative {
    std::string bytes;  // raw, possibly not valid UTF-8
    float logprob;
  };
  std::string bytes;
  float logprob = 0;
  std::vector<Alternative> top;
  int64_t text_offset = 0;  // completions: offset in the completion text
};

// REQUIRES: token.logprobs.has_value().
TokenLogprobEntry MakeLogprobEntry(const Tokenizer& tokenizer, int32_t prev_id,
                                   const GeneratedToken& token,
                                   int64_t text_offset);

// What every response object of one request shares.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
};

// A fresh id: `prefix` and 32 random hex digits.
std::string NewResponseId(absl::string_view prefix);

// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details:
// {cached_tokens}}.
Json UsageJson(const Usage& usage);

// One choice of a finished generation.
struct ChoiceOutput {
  std::string text;
  // The reply read into content, reasoning and tool calls (chat, when
  // parsed); `text` is then unused.
  std::optional<constrain::ParsedReply> reply{};
  FinishReason finish_reason = FinishReason::kLength;
  // nullopt when not asked for.
  std::optional<std::vector<TokenLogprobEntry>> logprobs;
};

// The non-streaming response: "chat.completion" or "text_completion", with
// choices[i] as the choice of index i.
Json CompletionJson(const ResponseMeta& meta,
                    const std::vector<ChoiceOutput>& choices,
                    const Usage& usage);

// One streamed chunk of choice `index`: "chat.completion.chunk" (`delta` as
// given) or "text_completion" (delta's "content" becomes "text").
// finish_reason: empty = null. include_usage adds "usage": null, as OpenAI
// does on every chunk but the usage one.
Json ChunkJson(const ResponseMeta& meta, int index, const Json& delta,
               const std::optional<std::vector<TokenLogprobEntry>>& logprobs,
               absl::string_view finish_reason, bool include_usage);
// The final chunk of stream_options.include_usage: empty choices, usage.
Json UsageChunkJson(const ResponseMeta& meta, const Usage& usage);

// --- Models ---------------------------------------------------------------

Json ModelJson(absl::string_view name, int64_t created, int max_context);
Json ModelListJson(absl::string_view name, int64_t created, int max_context);

// --- llama-server's tokenizer routes ---------------------------------------

struct TokenizeRequest {
  std::string content;
  EncodeOptions options;  // add_special: BOS and the dummy prefix
  bool with_pieces = false;
};
// parse_special defaults to false (llama-server's default is true): text
// cannot forge control tokens unless it asks to.
absl::StatusOr<TokenizeRequest> ParseTokenizeRequest(const Json& body);
// {"tokens": [ids]} or, with pieces, {"tokens": [{"id", "piece"}]}: a piece
// is a string when its bytes are valid UTF-8, else a list of byte values
// (as llama-server answers).
Json TokenizeJson(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                  bool with_pieces);

// The `tokens` of /detokenize; INVALID_ARGUMENT for an id outside the
// vocabulary.
absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(const Json& body,
                                                            int32_t vocab_size);
// The text of `ids` (valid UTF-8).
std::string Detokenize(const Tokenizer& tokenizer,
                       const std::vector<int32_t>& ids);

// /apply-template: {messages, add_generation_prompt (default true), tools}.
absl::StatusOr<ChatTemplateInput> ParseApplyTemplateRequest(const Json& body);

// --- Sessions --------------------------------------------------------------

// POST /sessions' optional {ttl_seconds}: nullopt when absent;
// INVALID_ARGUMENT when not a positive integer.
absl::StatusOr<std::optional<absl::Duration>> ParseCreateSessionRequest(
    const Json& body);

}  // namespace kvserve::http

#endif  // KVSERVE_SERVER_HTTP_OPENAI_JSON_H_
