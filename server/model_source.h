// The model the server serves: the built-in one, or a file.
#ifndef KVSERVE_SERVER_MODEL_SOURCE_H_
#define KVSERVE_SERVER_MODEL_SOURCE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/chat/chat_template.h"
#include "core/model/loader.h"

namespace kvserve {

// Empty `model_path`: the built-in model. Otherwise a GGUF or llama2.c file
// (the latter with `tokenizer_path`). weight_dtype: auto|f32|bf16. no_mmap:
// read the file into memory instead of mapping it (LoadOptions::no_mmap;
// the built-in model is in memory either way).
absl::StatusOr<LoadedModel> LoadServedModel(const std::string& model_path,
                                            const std::string& tokenizer_path,
                                            const std::string& weight_dtype,
                                            bool no_mmap = false);

struct ServedChatTemplate {
  std::unique_ptr<ChatTemplate> chat_template;
  // "file" (--chat_template), "gguf" (the model's tokenizer.chat_template)
  // or "chatml" (neither).
  std::string origin;
};

// The template chat turns render with: the file `path` when set, else the
// model's own, else ChatML; `options` say how its renderings are tokenized
// (--special_tokens_in_content). A template that does not parse is
// INVALID_ARGUMENT naming where it came from and the error's line.
absl::StatusOr<ServedChatTemplate> LoadChatTemplate(
    const std::string& path, const LoadedModel& model,
    ChatTemplateOptions options = {});

}  // namespace kvserve

#endif  // KVSERVE_SERVER_MODEL_SOURCE_H_
