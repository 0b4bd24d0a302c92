// The built-in model: a small Llama-architecture decoder (GQA, SwiGLU, RoPE,
// untied output) with deterministic random weights, so the server runs with
// no model file. Its text is nonsense; its forward pass is the real one.
#ifndef KVSERVE_CORE_MODEL_BUILTIN_MODEL_H_
#define KVSERVE_CORE_MODEL_BUILTIN_MODEL_H_

#include <cstdint>
#include <memory>

#include "core/model/weights.h"

namespace kvserve {

// 4 layers, dim 256, 8 query heads over 2 KV heads of 32, hidden 768,
// vocabulary 259 (ByteLevelVocab), context 2048.
ModelConfig BuiltinModelConfig();

// Weights for `config` drawn from a fixed-seed generator: the same seed
// gives the same bytes on every machine. Matrices are uniform with variance
// 1/fan_in; norm weights are 1. `dtype` is the matrices' dtype.
std::unique_ptr<ModelWeights> MakeRandomWeights(const ModelConfig& config,
                                                DType dtype, uint64_t seed);

std::unique_ptr<ModelWeights> MakeBuiltinModel();

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_BUILTIN_MODEL_H_
