// A Llama-architecture GGUF with deterministic random weights, for benchmarks
// and tests that need a model of a given size without downloads (the model
// maker, tools/kvmodel.cc). The file follows llama.cpp's conventions
// (general.*, llama.*, tokenizer.ggml.* keys; token_embd/blk.N.*/output
// tensor names; 1-D norms in F32), so other GGUF readers accept it.
//
// Weights: token_embd ~ U with std 1; every projection W[rows][cols] ~ U with
// std 1/sqrt(cols) (wo and ffn_down further scaled by 1/sqrt(2 n_layers)), so
// activations stay O(1) at any size; norms are 1. Each tensor's values depend
// only on (seed, tensor name, index): the same for every dtype, rounded.
#ifndef KVSERVE_CORE_MODEL_GGUF_RANDOM_MODEL_H_
#define KVSERVE_CORE_MODEL_GGUF_RANDOM_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/gguf_writer.h"

namespace kvserve {

struct RandomModelOptions {
  int n_layers = 2;
  int dim = 64;
  int n_heads = 4;
  int n_kv_heads = 2;
  int hidden_dim = 172;
  int context_length = 512;
  // Tensor types of the matrices: one type ("f32", "f16", "bf16", "q8_0",
  // "q4_k", ...) or a mix ("q4_k_m", "q5_k_m"); see core/model/type_mix.h.
  // Quantized types are produced by the formats' reference quantizers.
  std::string dtype = "f32";
  // A GGUF whose tokenizer.* keys are copied; empty = the byte-level vocab.
  std::string vocab_from;
  // Pieces appended to the vocabulary as control tokens, in order (ids from
  // the old vocab_size up), e.g. {"<|im_start|>", "<|im_end|>"}; the
  // embedding and output matrices get a row for each. Each must be
  // non-empty and not already a piece.
  std::vector<std::string> special_tokens;
  // A piece of the final vocabulary (special_tokens included) whose id is
  // written as tokenizer.ggml.eot_token_id; empty = the key is left out
  // (or copied from vocab_from).
  std::string eot_token;
  // Written as tokenizer.chat_template (replacing vocab_from's); empty =
  // left out (or copied from vocab_from).
  std::string chat_template;
  uint64_t seed = 1;
  std::string name = "kvmodel-random";
};

// Validates the options and prepares the writer (tensor data is produced
// when the writer writes).
absl::StatusOr<std::unique_ptr<GgufWriter>> MakeRandomModel(
    const RandomModelOptions& options);

// The value MakeRandomModel stores at `index` of a matrix named `name` with
// unit standard deviation, before scaling and rounding (for tests).
float RandomModelUnitValue(uint64_t seed, const std::string& name,
                           uint64_t index);

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_GGUF_RANDOM_MODEL_H_
