#include "server/model_source.h"

#include "core/model/builtin_model.h"
#include "core/tokenizer/tokenizer_factory.h"

namespace kvserve {

absl::StatusOr<LoadedModel> LoadServedModel(const std::string& model_path,
                                            const std::string& tokenizer_path,
                                            const std::string& weight_dtype) {
  if (!model_path.empty()) {
    return LoadModel(LoadOptions{.model_path = model_path,
                                 .tokenizer_path = tokenizer_path,
                                 .weight_dtype = weight_dtype});
  }
  if (!tokenizer_path.empty()) {
    return absl::InvalidArgumentError(
        "--tokenizer needs --model (the built-in model has its own)");
  }
  if (weight_dtype != "auto" && weight_dtype != "f32") {
    return absl::InvalidArgumentError(
        "the built-in model has f32 weights: --weight_dtype must be auto or "
        "f32 without --model");
  }
  LoadedModel served;
  served.weights = MakeBuiltinModel();
  auto tokenizer = CreateTokenizer(ByteLevelVocab());
  if (!tokenizer.ok()) return tokenizer.status();
  served.tokenizer = *std::move(tokenizer);
  return served;
}

}  // namespace kvserve
