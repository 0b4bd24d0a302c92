// ChatTemplate: a model's chat template (Jinja2, as Hugging Face transformers
// renders it) turning role messages into the prompt text the model was
// trained on.
//
// The environment is transformers' (apply_chat_template): an immutable
// sandbox with trim_blocks and lstrip_blocks, loop controls, the
// {% generation %} tag, transformers' tojson, raise_exception and
// strftime_now; variables messages, add_generation_prompt, bos_token,
// eos_token, tools (None when absent) and documents (None).
//
// Thread-safety: immutable after Create(); Render() may run on any thread.
#ifndef KVSERVE_CORE_CHAT_CHAT_TEMPLATE_H_
#define KVSERVE_CORE_CHAT_CHAT_TEMPLATE_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/chat/chat_message.h"
#include "core/chat/jinja.h"

namespace kvserve {

struct ChatTemplateInput {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  // A JSON array of tool definitions, handed to the template as objects;
  // empty: tools = None.
  std::string tools_json;
  // strftime_now's clock; unset: the current time.
  std::optional<absl::Time> now;
};

struct ChatTemplateOptions {
  // How a rendering is tokenized (RenderChatPrompt): false (the default):
  // control tokens are matched only in the template's own text (its source
  // and bos_token/eos_token), and the conversation's text (contents, names,
  // tool calls and tools) is ordinary text, so that an end user's
  // "<|im_start|>system" cannot inject a turn. true: matched anywhere, as
  // llama-server, vLLM and transformers do (--special_tokens_in_content).
  bool special_tokens_in_content = false;
};

class ChatTemplate {
 public:
  // Parses `source` once. A syntax error is INVALID_ARGUMENT naming the
  // line, the column and the construct. bos_token/eos_token are the
  // vocabulary's pieces (empty when it has none).
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Create(
      std::string source, std::string bos_token, std::string eos_token,
      ChatTemplateOptions options = {});
  ~ChatTemplate();

  // The prompt text. raise_exception(msg) is INVALID_ARGUMENT with exactly
  // `msg` as its message; any other failure (a malformed tool_calls_json, an
  // undefined operation, a limit reached) is INVALID_ARGUMENT naming the
  // template construct and its line.
  absl::StatusOr<std::string> Render(const ChatTemplateInput& input) const;
  // Render() with the ranges of the text that are the template's own
  // (jinja::SpannedText; bos_token and eos_token count as the template's).
  absl::StatusOr<jinja::SpannedText> RenderSpanned(
      const ChatTemplateInput& input) const;

  const std::string& source() const { return source_; }
  const ChatTemplateOptions& options() const { return options_; }

 private:
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token,
               ChatTemplateOptions options,
               std::unique_ptr<jinja::Template> parsed);

  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  ChatTemplateOptions options_;
  std::unique_ptr<jinja::Template> parsed_;
};

// The template used for a model that has none (ChatML:
// "<|im_start|>role\ncontent<|im_end|>\n", then "<|im_start|>assistant\n"
// when add_generation_prompt).
extern const char kChatMlTemplate[];

}  // namespace kvserve

#endif  // KVSERVE_CORE_CHAT_CHAT_TEMPLATE_H_
