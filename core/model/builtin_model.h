// The built-in model: a small Llama-architecture decoder (GQA, SwiGLU, RoPE,
// untied output) with deterministic random weights and the byte-level
// vocabulary, so the server runs with no model file. It is the model maker's
// output (`kvmodel make` with BuiltinModelOptions()), loaded from memory
// through the GGUF loader. Its text is nonsense; its forward pass is real.
#ifndef KVSERVE_CORE_MODEL_BUILTIN_MODEL_H_
#define KVSERVE_CORE_MODEL_BUILTIN_MODEL_H_

#include "absl/status/statusor.h"
#include "core/model/gguf_random_model.h"
#include "core/model/loader.h"

namespace kvserve {

// 4 layers, dim 256, 8 query heads over 2 KV heads of 32, hidden 768,
// vocabulary 259 (byte-level), context 2048, f32.
RandomModelOptions BuiltinModelOptions();

// A random model made in memory and loaded as a GGUF file would be.
// weight_dtype: auto|f32|bf16, as LoadOptions.
absl::StatusOr<LoadedModel> LoadRandomModel(
    const RandomModelOptions& options,
    const std::string& weight_dtype = "auto");

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_BUILTIN_MODEL_H_
