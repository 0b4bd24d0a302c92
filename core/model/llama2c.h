// llama2.c checkpoints (Karpathy's run.c format): a header of 7 int32 (dim,
// hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means an unshared classifier), then f32 weights in run.c's order:
// token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final,
// freq_cis_real and freq_cis_imag (skipped), then wcls when unshared. Matrices
// are row-major [out][in], RoPE rotates adjacent pairs (llama.cpp's "normal").
#ifndef KVSERVE_CORE_MODEL_LLAMA2C_H_
#define KVSERVE_CORE_MODEL_LLAMA2C_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/model/gguf.h"
#include "core/model/gguf_tensor.h"
#include "core/model/weights.h"
#include "core/util/mapped_file.h"

namespace kvserve {

// The file must be exactly as long as its header implies.
absl::StatusOr<std::unique_ptr<ModelWeights>> LoadLlama2cWeights(
    std::shared_ptr<const MappedFile> file, WeightDTypeMode mode);

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_LLAMA2C_H_
