// What the engine admits: request parameters, the queue's and the
// prompt's limits, and the chat rendering the front ends ask for under the
// same limit. Kept apart from the loop (engine.cc).
#include <algorithm>
#include <memory>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/chat/chat_prompt.h"
#include "core/engine/engine.h"
#include "core/util/status_macros.h"
#include "core/util/status_reason.h"

namespace kvserve {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kEos:
      return "eos";
    case FinishReason::kContextFull:
      return "context_full";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "unknown";
}

absl::Status ValidateGenerateParams(const GenerateParams& p, int vocab_size) {
  if (!p.generate) return absl::OkStatus();
  if (p.max_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_tokens must be positive, got %d", p.max_tokens));
  }
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "logprobs must be in [0, %d], got %d", kMaxTopLogprobs, p.logprobs));
  }
  if (absl::Status s = ValidateSamplingOptions(p.sampling); !s.ok()) return s;
  return ValidatePenaltyOptions(p.sampling.penalties, vocab_size);
}

absl::Status ValidateGenerateCall(const GenerateCall& call, int vocab_size) {
  KVSERVE_RETURN_IF_ERROR(ValidateGenerateParams(call.params(), vocab_size));
  const auto& choices = call.choices();
  if (choices.empty()) return absl::OkStatus();
  if (static_cast<int>(choices.size()) + 1 > kMaxChoices) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "n must be in [1, %d], got %d", kMaxChoices, choices.size() + 1));
  }
  if (!call.params().generate) {
    return absl::InvalidArgumentError(
        "an Append has no choices: n > 1 needs a Generate");
  }
  for (const auto& choice : choices) {
    if (!choice->params().generate || !choice->choices().empty()) {
      return absl::InvalidArgumentError(
          "a choice must be a Generate without choices of its own");
    }
    KVSERVE_RETURN_IF_ERROR(
        ValidateGenerateParams(choice->params(), vocab_size));
  }
  return absl::OkStatus();
}

absl::Status Engine::QueueStatusLocked() const {
  if (draining_ || stopping_) {
    return absl::UnavailableError("the server is shutting down");
  }
  const int64_t queued = queued_.load();
  if (queued < options_.max_queued_requests) return absl::OkStatus();
  return WithReason(
      absl::ResourceExhaustedError(absl::StrFormat(
          "request queue is full: %d requests wait (--max_queued_requests=%d) "
          "behind at most %d running (--max_running=%d)",
          queued, options_.max_queued_requests, options_.max_running,
          options_.max_running)),
      kReasonQueueFull);
}

namespace {

absl::Status PromptBytesStatus(int64_t bytes, int64_t max_prompt_bytes) {
  if (bytes <= max_prompt_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "the prompt's text is %d bytes, more than --max_prompt_bytes=%d", bytes,
      max_prompt_bytes));
}

}  // namespace

absl::Status Engine::CheckPromptBytes(const Input& input) const {
  if (const auto* text = std::get_if<std::string>(&input)) {
    return PromptBytesStatus(text->size(), max_prompt_bytes_);
  }
  if (const auto* chat = std::get_if<ChatInput>(&input)) {
    return CheckChatBytes(chat->messages, chat->tools_json);
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckChatBytes(const std::vector<ChatMessage>& messages,
                                    std::string_view tools_json) const {
  int64_t bytes = tools_json.size();
  for (const ChatMessage& m : messages) {
    bytes += m.role.size() + m.content.size() + m.name.size() +
             m.tool_call_id.size() + m.tool_calls_json.size();
  }
  return PromptBytesStatus(bytes, max_prompt_bytes_);
}

absl::StatusOr<ChatPrompt> Engine::ApplyChatTemplate(
    const ChatTemplateInput& input) const {
  KVSERVE_RETURN_IF_ERROR(CheckChatBytes(input.messages, input.tools_json));
  return RenderChatPrompt(*chat_template_, *tokenizer_, WithToolPrompt(input));
}

ChatTemplateInput Engine::WithToolPrompt(ChatTemplateInput input) const {
  if (reply_format_.renders_tools || input.tools_json.empty()) return input;
  const std::string prompt = constrain::GenericToolPrompt(input.tools_json);
  std::vector<ChatMessage>& m = input.messages;
  if (!m.empty() && m[0].role == "system" && template_takes_system_) {
    m[0].content = prompt + "\n\n" + m[0].content;
  } else if (template_takes_system_) {
    m.insert(m.begin(), ChatMessage{.role = "system", .content = prompt});
  } else {
    auto user = std::find_if(m.begin(), m.end(), [](const ChatMessage& c) {
      return c.role == "user";
    });
    if (user != m.end()) user->content = prompt + "\n\n" + user->content;
  }
  return input;
}

std::shared_ptr<void> Engine::TakeQueuePlaceLocked() {
  queued_.fetch_add(1);
  return std::shared_ptr<void>(nullptr,
                               [this](void*) { queued_.fetch_sub(1); });
}

}  // namespace kvserve
