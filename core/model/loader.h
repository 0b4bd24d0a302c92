// Loading a model file into weights and a tokenizer. The format is detected
// by content: GGUF by its "GGUF" magic, otherwise a llama2.c checkpoint (7
// int32 header + f32 weights, whose tokenizer is a separate file).
//
// Errors are InvalidArgument/NotFound/Unimplemented statuses naming the file
// and what is wrong where (key, tensor, byte offset); a malformed file never
// causes a crash or an out-of-bounds read. Every tensor must lie inside the
// file and hold finite values (checked at load: MaterializeTensor).
#ifndef KVSERVE_CORE_MODEL_LOADER_H_
#define KVSERVE_CORE_MODEL_LOADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/gguf.h"
#include "core/model/gguf_tensor.h"
#include "core/model/weights.h"
#include "core/tokenizer/tokenizer.h"
#include "core/util/mapped_file.h"

namespace kvserve {

struct LoadOptions {
  std::string model_path;
  // llama2.c only (its tokenizer.bin); must be empty for GGUF, which carries
  // its own vocabulary.
  std::string tokenizer_path;
  // "auto" (every matrix as stored), "f32" or "bf16" (converted once).
  std::string weight_dtype = "auto";
  // false: the file is mapped (MappedFile::Open), and must not be modified
  // or truncated while the weights are in use (a truncated mapping raises
  // SIGBUS at the next forward pass). true: it is read into anonymous
  // memory (MappedFile::Read): a copy at load and the file's size in
  // resident memory, but the weights no longer depend on the file.
  bool no_mmap = false;
};

struct LoadedModel {
  std::unique_ptr<ModelWeights> weights;
  std::unique_ptr<Tokenizer> tokenizer;
  // The model's chat template (GGUF key tokenizer.chat_template, a Jinja
  // template as the model's authors wrote it); empty when the file has none,
  // and for llama2.c checkpoints.
  std::string chat_template;
};

absl::StatusOr<LoadedModel> LoadModel(const LoadOptions& options);

// As LoadModel, with the model file's bytes already mapped (tests feed
// in-memory variants this way); options.model_path and no_mmap are ignored.
absl::StatusOr<LoadedModel> LoadModelFromFile(
    std::shared_ptr<const MappedFile> file, const LoadOptions& options);

// The weights of a GGUF of architecture llama, qwen2 or phi3 (config from
// the <arch>.* keys, tensors by llama.cpp's names, shapes checked against
// the config). The families differ only in data: RoPE style (per
// architecture, as llama.cpp's llama_model_rope_type), optional q/k/v
// biases, a fused attn_qkv or an ffn_up holding gate and up (then wq/wk/wv
// and w_gate/w_up are views of their rows), a tied output, and
// <arch>.attention.sliding_window. UNIMPLEMENTED, naming the key or tensor,
// for what the forward pass does not compute: another architecture (the
// message lists the supported ones), rope.scaling.type other than none,
// rope.scaling.factor, attn_factor or soft-capping keys with non-neutral
// values, LongRoPE factors, biases other than q/k/v, or any tensor it does
// not read.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadGgufWeights(
    const GgufFile& gguf, WeightDTypeMode mode);

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_LOADER_H_
