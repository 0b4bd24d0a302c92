// Fuzzes the chat-template interpreter (core/chat/jinja.h, chat_template.h).
//
// Byte 0 picks the mode:
//   even: the rest, up to a NUL, is a template (Template::Parse, then Render
//         with small RenderOptions limits, so that no input hangs); after
//         the NUL, a JSON object is the context (else a fixed one with
//         messages, bos_token, ...).
//   odd:  byte 1 picks a real model's template (../shared/templates/*.jinja,
//         or ChatML), the rest are the messages, tools and flags of a
//         ChatTemplate::Render (FuzzedDataProvider).
// Promises checked: every failure is INVALID_ARGUMENT; output stays within
// max_output_bytes.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "core/chat/chat_template.h"
#include "core/chat/jinja.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_util.h"

namespace kvserve {
namespace {

constexpr const char* kTemplateFiles[] = {
    "Qwen-Qwen2.5-7B-Instruct.jinja",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "google-gemma-2-2b-it.jinja",
    "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "microsoft-Phi-3.5-mini-instruct.jinja",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja",
};

std::vector<std::unique_ptr<ChatTemplate>>& ChatTemplates() {
  static std::vector<std::unique_ptr<ChatTemplate>> templates;
  return templates;
}

const nlohmann::ordered_json& DefaultContext() {
  static const nlohmann::ordered_json context = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "Hi <b>"},
                       {"role": "assistant", "content": "Hello",
                        "tool_calls": [{"type": "function", "function":
                          {"name": "f", "arguments": {"x": 1}}}]},
                       {"role": "tool", "content": "42", "name": "f"}],
          "add_generation_prompt": true, "bos_token": "<s>",
          "eos_token": "</s>", "tools": null, "documents": null,
          "n": 3, "f": 1.5, "s": "abc", "l": [3, 1, 2], "d": {"b": 1, "a": 2}})");
  return context;
}

void FuzzTemplate(std::string_view input) {
  const size_t nul = input.find('\0');
  const std::string_view source = input.substr(0, nul);
  absl::StatusOr<std::unique_ptr<jinja::Template>> t =
      jinja::Template::Parse(source);
  if (!t.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(t.status()), "Parse: %s",
               t.status().ToString().c_str());
    return;
  }
  nlohmann::ordered_json context = DefaultContext();
  if (nul != std::string_view::npos) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(
        input.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) context = std::move(j);
  }
  jinja::RenderOptions options;
  options.max_output_bytes = 1 << 16;
  options.max_steps = 20'000;
  options.max_depth = 64;
  options.now = absl::FromUnixSeconds(1'700'000'000);
  absl::StatusOr<std::string> out = (*t)->Render(context, options);
  if (!out.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(out.status()), "Render: %s",
               out.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(static_cast<int64_t>(out->size()) <= options.max_output_bytes,
             "output of %zu bytes", out->size());
}

void FuzzChat(const uint8_t* data, size_t size) {
  FuzzedDataProvider p(data, size);
  const ChatTemplate& t =
      *ChatTemplates()[p.ConsumeIntegral<uint8_t>() % ChatTemplates().size()];
  static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
  ChatTemplateInput input;
  input.add_generation_prompt = p.ConsumeBool();
  input.now = absl::FromUnixSeconds(1'700'000'000);
  if (p.ConsumeBool()) input.tools_json = p.ConsumeRandomLengthString(256);
  for (int n = p.ConsumeIntegralInRange(0, 8); n > 0; --n) {
    ChatMessage m;
    const uint8_t role = p.ConsumeIntegral<uint8_t>();
    m.role = role < 240 ? kRoles[role % 4] : p.ConsumeRandomLengthString(16);
    m.content = p.ConsumeRandomLengthString(256);
    const uint8_t extras = p.ConsumeIntegral<uint8_t>();
    if (extras & 1) m.name = p.ConsumeRandomLengthString(16);
    if (extras & 2) m.tool_call_id = p.ConsumeRandomLengthString(16);
    if (extras & 4) m.tool_calls_json = p.ConsumeRandomLengthString(256);
    input.messages.push_back(std::move(m));
  }
  absl::StatusOr<std::string> out = t.Render(input);
  if (!out.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(out.status()), "Render: %s",
               out.status().ToString().c_str());
  }
}

}  // namespace
}  // namespace kvserve

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using namespace kvserve;
  auto add = [](std::string source, const char* what) {
    absl::StatusOr<std::unique_ptr<ChatTemplate>> t =
        ChatTemplate::Create(std::move(source), "<s>", "</s>");
    FUZZ_CHECK(t.ok(), "%s: %s", what, t.status().ToString().c_str());
    ChatTemplates().push_back(*std::move(t));
  };
  add(kChatMlTemplate, "ChatML");
  for (const char* file : kTemplateFiles) {
    std::optional<std::string> source =
        fuzz::ReadWholeFile(fuzz::SharedPath(std::string("templates/") + file));
    if (source.has_value()) add(*std::move(source), file);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if ((data[0] & 1) == 0) {
    kvserve::FuzzTemplate(kvserve::fuzz::AsView(data + 1, size - 1));
  } else {
    kvserve::FuzzChat(data + 1, size - 1);
  }
  return 0;
}
