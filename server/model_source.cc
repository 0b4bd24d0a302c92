#include "server/model_source.h"

#include "core/model/builtin_model.h"

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

}  // namespace kvserve
