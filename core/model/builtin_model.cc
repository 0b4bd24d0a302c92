#include "core/model/builtin_model.h"

#include <memory>
#include <string>

namespace kvserve {

RandomModelOptions BuiltinModelOptions() {
  RandomModelOptions o;
  o.n_layers = 4;
  o.dim = 256;
  o.n_heads = 8;
  o.n_kv_heads = 2;
  o.hidden_dim = 768;
  o.context_length = 2048;
  o.dtype = "f32";
  o.seed = 0x6b7673657276ULL;
  o.name = "kvserve-builtin";
  return o;
}

absl::StatusOr<LoadedModel> LoadRandomModel(const RandomModelOptions& options,
                                            const std::string& weight_dtype) {
  absl::StatusOr<std::unique_ptr<GgufWriter>> writer = MakeRandomModel(options);
  if (!writer.ok()) return writer.status();
  // The weights may point into the file's bytes: they keep them alive.
  auto bytes = std::make_shared<const std::string>((*writer)->Serialize());
  LoadOptions load;
  load.weight_dtype = weight_dtype;
  absl::StatusOr<LoadedModel> model =
      LoadModelFromFile(MappedFile::FromBytes(*bytes, options.name), load);
  if (model.ok()) model->weights->storage.push_back(bytes);
  return model;
}

}  // namespace kvserve
