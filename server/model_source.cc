#include "server/model_source.h"

#include "absl/strings/str_format.h"
#include "core/chat/chat_prompt.h"
#include "core/model/builtin_model.h"
#include "core/util/file.h"

namespace kvserve {

absl::StatusOr<LoadedModel> LoadServedModel(const std::string& model_path,
                                            const std::string& tokenizer_path,
                                            const std::string& weight_dtype,
                                            bool no_mmap) {
  if (!model_path.empty()) {
    return LoadModel(LoadOptions{.model_path = model_path,
                                 .tokenizer_path = tokenizer_path,
                                 .weight_dtype = weight_dtype,
                                 .no_mmap = no_mmap});
  }
  if (!tokenizer_path.empty()) {
    return absl::InvalidArgumentError(
        "--tokenizer needs --model (the built-in model has its own)");
  }
  return LoadRandomModel(BuiltinModelOptions(), weight_dtype);
}

absl::StatusOr<ServedChatTemplate> LoadChatTemplate(
    const std::string& path, const LoadedModel& model,
    ChatTemplateOptions options) {
  ServedChatTemplate served;
  std::string source;
  if (!path.empty()) {
    absl::StatusOr<std::string> text = ReadSmallFile(path, 1 << 20);
    if (!text.ok()) {
      return absl::Status(
          text.status().code(),
          absl::StrFormat("--chat_template: %s", text.status().message()));
    }
    source = *std::move(text);
    served.origin = "file";
  } else if (!model.chat_template.empty()) {
    source = model.chat_template;
    served.origin = "gguf";
  } else {
    source = kChatMlTemplate;
    served.origin = "chatml";
  }
  absl::StatusOr<std::unique_ptr<ChatTemplate>> parsed =
      CreateChatTemplate(source, *model.tokenizer, options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the chat template (%s) does not parse: %s",
        served.origin == "file"   ? path
        : served.origin == "gguf" ? "the model's tokenizer.chat_template"
                                  : "ChatML",
        parsed.status().message()));
  }
  served.chat_template = *std::move(parsed);
  return served;
}

}  // namespace kvserve
