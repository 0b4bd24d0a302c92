#include "core/chat/chat_template.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/chat/jinja.h"
#include "core/util/json_depth.h"
#include "nlohmann/json.hpp"

namespace kvserve {

const char kChatMlTemplate[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' "
    "+ message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

namespace {

// A JSON array field of the input (tool_calls, tools) as template objects.
absl::StatusOr<nlohmann::ordered_json> ParseJsonField(std::string_view json,
                                                      std::string_view where) {
  // The copies and the conversion to template values recurse: nothing
  // deeper than the limit is kept.
  JsonDepthLimit<nlohmann::ordered_json> limit;
  nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(
      json, limit.callback(), /*allow_exceptions=*/false);
  if (limit.exceeded()) return limit.Error(where);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError(std::string(where) +
                                      " is not valid JSON");
  }
  return parsed;
}

// Tool calls as transformers' callers (vLLM, llama-server) hand them to a
// template: a call's `function.arguments` given as a JSON string (as
// OpenAI's API sends it) becomes the value it encodes; a string that is not
// JSON stays a string. The value sits 3 levels down, so it may nest 3 less.
void ParseArgumentStrings(nlohmann::ordered_json& calls) {
  if (!calls.is_array()) return;
  for (nlohmann::ordered_json& call : calls) {
    if (!call.is_object()) continue;
    auto function = call.find("function");
    if (function == call.end() || !function->is_object()) continue;
    auto arguments = function->find("arguments");
    if (arguments == function->end() || !arguments->is_string()) continue;
    JsonDepthLimit<nlohmann::ordered_json> limit(kMaxJsonDepth - 3);
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(
        arguments->get_ref<const std::string&>(), limit.callback(),
        /*allow_exceptions=*/false);
    if (!parsed.is_discarded() && !limit.exceeded()) {
      *arguments = std::move(parsed);
    }
  }
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos_token,
                           std::string eos_token, ChatTemplateOptions options,
                           std::unique_ptr<jinja::Template> parsed)
    : source_(std::move(source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      options_(options),
      parsed_(std::move(parsed)) {}

ChatTemplate::~ChatTemplate() = default;

absl::StatusOr<std::unique_ptr<ChatTemplate>> ChatTemplate::Create(
    std::string source, std::string bos_token, std::string eos_token,
    ChatTemplateOptions options) {
  absl::StatusOr<std::unique_ptr<jinja::Template>> parsed =
      jinja::Template::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: ", parsed.status().message()));
  }
  return std::unique_ptr<ChatTemplate>(
      new ChatTemplate(std::move(source), std::move(bos_token),
                       std::move(eos_token), options, *std::move(parsed)));
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const ChatTemplateInput& input) const {
  absl::StatusOr<jinja::SpannedText> text = RenderSpanned(input);
  if (!text.ok()) return text.status();
  return std::move(text->text);
}

absl::StatusOr<jinja::SpannedText> ChatTemplate::RenderSpanned(
    const ChatTemplateInput& input) const {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < input.messages.size(); ++i) {
    const ChatMessage& m = input.messages[i];
    nlohmann::ordered_json message = nlohmann::ordered_json::object();
    message["role"] = m.role;
    if (m.content_null) {
      message["content"] = nullptr;
    } else {
      message["content"] = m.content;
    }
    if (!m.name.empty()) message["name"] = m.name;
    if (!m.tool_call_id.empty()) message["tool_call_id"] = m.tool_call_id;
    if (!m.tool_calls_json.empty()) {
      absl::StatusOr<nlohmann::ordered_json> calls = ParseJsonField(
          m.tool_calls_json, absl::StrCat("messages[", i, "].tool_calls"));
      if (!calls.ok()) return calls.status();
      ParseArgumentStrings(*calls);
      message["tool_calls"] = *std::move(calls);
    }
    messages.push_back(std::move(message));
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = std::move(messages);
  context["add_generation_prompt"] = input.add_generation_prompt;
  context["bos_token"] = bos_token_;
  context["eos_token"] = eos_token_;
  if (input.tools_json.empty()) {
    context["tools"] = nullptr;
  } else {
    absl::StatusOr<nlohmann::ordered_json> tools =
        ParseJsonField(input.tools_json, "tools");
    if (!tools.ok()) return tools.status();
    context["tools"] = *std::move(tools);
  }
  context["documents"] = nullptr;
  jinja::RenderOptions options;
  options.now = input.now;
  options.literal_variables = {"bos_token", "eos_token"};
  absl::StatusOr<jinja::SpannedText> text =
      parsed_->RenderSpanned(context, options);
  if (!text.ok()) {
    if (jinja::IsRaisedException(text.status())) return text.status();
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: ", text.status().message()));
  }
  return text;
}

}  // namespace kvserve
