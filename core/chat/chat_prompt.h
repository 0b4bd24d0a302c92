// A conversation turned into the model's prompt: rendered with the chat
// template, then tokenized with the vocabulary's control tokens matched as
// whole tokens where the template's own text has them (or anywhere, with
// ChatTemplateOptions::special_tokens_in_content). Shared by the engine's
// chat turns, the gRPC ApplyChatTemplate and the HTTP API, so that all three
// give the same ids.
#ifndef KVSERVE_CORE_CHAT_CHAT_PROMPT_H_
#define KVSERVE_CORE_CHAT_CHAT_PROMPT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/chat/chat_template.h"
#include "core/tokenizer/tokenizer.h"

namespace kvserve {

struct ChatPrompt {
  std::string text;
  std::vector<int32_t> token_ids;
};

// Parses `source` with the vocabulary's BOS and EOS pieces as bos_token and
// eos_token (empty when it has none).
absl::StatusOr<std::unique_ptr<ChatTemplate>> CreateChatTemplate(
    std::string source, const Tokenizer& tokenizer,
    ChatTemplateOptions options = {});

// Control and user-defined tokens are matched in the template's own text
// (ChatTemplate::RenderSpanned) unless the template's options say anywhere;
// the conversation's text is encoded as ordinary text (byte-level BPE still
// matches user-defined tokens there, as everywhere: bpe_tokenizer.h). BOS is
// added when the vocabulary asks for it and the rendering does not already
// begin with the BOS piece (templates that print bos_token get one BOS, not
// two). Errors are the template's (ChatTemplate::Render).
absl::StatusOr<ChatPrompt> RenderChatPrompt(const ChatTemplate& chat_template,
                                            const Tokenizer& tokenizer,
                                            const ChatTemplateInput& input);

}  // namespace kvserve

#endif  // KVSERVE_CORE_CHAT_CHAT_PROMPT_H_
