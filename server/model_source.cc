#include "server/model_source.h"

#include "core/model/builtin_model.h"
#include "core/tokenizer/tokenizer_factory.h"

namespace kvserve {

absl::StatusOr<ServedModel> LoadServedModel(const std::string& model_path,
                                            const std::string& tokenizer_path,
                                            const std::string& weight_dtype) {
  if (weight_dtype != "auto" && weight_dtype != "f32" &&
      weight_dtype != "bf16") {
    return absl::InvalidArgumentError(
        "--weight_dtype must be auto, f32 or bf16, got \"" + weight_dtype +
        "\"");
  }
  if (!model_path.empty() || !tokenizer_path.empty()) {
    return absl::UnimplementedError("loading model files is not built yet");
  }
  ServedModel served;
  served.weights = MakeBuiltinModel();
  auto tokenizer = CreateTokenizer(ByteLevelVocab());
  if (!tokenizer.ok()) return tokenizer.status();
  served.tokenizer = *std::move(tokenizer);
  return served;
}

}  // namespace kvserve
