#include "core/chat/chat_prompt.h"

#include <utility>

#include "absl/strings/match.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplate(
    std::string source, const Tokenizer& tokenizer) {
  auto piece = [&tokenizer](int32_t id) {
    return id >= 0 ? tokenizer.Piece(id) : std::string();
  };
  return ChatTemplate::Create(std::move(source), piece(tokenizer.bos_id()),
                              piece(tokenizer.eos_id()));
}

absl::StatusOr<ChatPrompt> RenderChatPrompt(const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer,
                                            const ChatTemplateInput& input) {
  absl::StatusOr<std::string> text = chat_template.Render(input);
  if (!text.ok()) return text.status();
  ChatPrompt prompt;
  prompt.text = *std::move(text);
  EncodeOptions options;
  options.parse_special = true;
  const int32_t bos = tokenizer.bos_id();
  if (bos >= 0 && absl::StartsWith(prompt.text, tokenizer.Piece(bos))) {
    options.add_bos = false;
  }
  prompt.token_ids = tokenizer.Encode(prompt.text, options);
  return prompt;
}

}  // namespace kvserve
