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

namespace kvserve {

namespace jinja {
class Template;
}  // namespace jinja

struct ChatTemplateInput {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  // A JSON array of tool definitions, handed to the template as objects;
  // empty: tools = None.
  std::string tools_json;
  // strftime_now's clock; unset: the current time.
  std::optional<absl::Time> now;
};

class ChatTemplate {
 public:
  // Parses `source` once. A syntax error is INVALID_ARGUMENT naming the
  // line, the column and the construct. bos_token/eos_token are the
  // vocabulary's pieces (empty when it has none).
  static absl::StatusOr<std::unique_ptr<ChatTemplate>> Create(
      std::string source, std::string bos_token, std::string eos_token);
  ~ChatTemplate();

  // The prompt text. raise_exception(msg) is INVALID_ARGUMENT with exactly
  // `msg` as its message; any other failure (a malformed tool_calls_json, an
  // undefined operation, a limit reached) is INVALID_ARGUMENT naming the
  // template construct and its line.
  absl::StatusOr<std::string> Render(const ChatTemplateInput& input) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token,
               std::unique_ptr<jinja::Template> parsed);

  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  std::unique_ptr<jinja::Template> parsed_;
};

// The template used for a model that has none (ChatML:
// "<|im_start|>role\ncontent<|im_end|>\n", then "<|im_start|>assistant\n"
// when add_generation_prompt).
extern const char kChatMlTemplate[];

}  // namespace kvserve

#endif  // KVSERVE_CORE_CHAT_CHAT_TEMPLATE_H_
