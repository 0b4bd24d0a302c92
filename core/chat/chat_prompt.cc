#include "core/chat/chat_prompt.h"

#include <utility>

#include "absl/strings/match.h"

namespace kvserve {

absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplate(
    std::string source, const Tokenizer& tokenizer,
    ChatTemplateOptions options) {
  auto piece = [&tokenizer](int32_t id) {
    return id >= 0 ? tokenizer.Piece(id) : std::string();
  };
  return ChatTemplate::Create(std::move(source), piece(tokenizer.bos_id()),
                              piece(tokenizer.eos_id()), options);
}

absl::StatusOr<ChatPrompt> RenderChatPrompt(const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer,
                                            const ChatTemplateInput& input) {
  absl::StatusOr<jinja::SpannedText> text = chat_template.RenderSpanned(input);
  if (!text.ok()) return text.status();
  ChatPrompt prompt;
  prompt.text = std::move(text->text);
  EncodeOptions options;
  options.parse_special = true;
  std::vector<ByteRange> template_text;
  if (!chat_template.options().special_tokens_in_content) {
    template_text.reserve(text->literal.size());
    for (const jinja::TextRange& r : text->literal) {
      template_text.push_back({r.begin, r.end});
    }
    options.special_ranges = &template_text;
  }
  const int32_t bos = tokenizer.bos_id();
  if (bos >= 0 && absl::StartsWith(prompt.text, tokenizer.Piece(bos))) {
    options.add_bos = false;
  }
  prompt.token_ids = tokenizer.Encode(prompt.text, options);
  return prompt;
}

}  // namespace kvserve
