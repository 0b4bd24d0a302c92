// Model: the Llama decoder's forward pass over one engine step.
//
// A step is a list of chunks, one per sequence: consecutive new tokens at
// positions [start_pos, start_pos + tokens.size()) whose K/V the pass writes
// into the sequence's BlockTable before attending over it. Every weight
// matrix is read once per step for all chunks (one matmul with m = total
// tokens). Per layer:
//   RMSNorm -> Q,K,V projections (+ biases, where the weights have them)
//   -> RoPE (config.rope_style: adjacent pairs or split halves) -> write
//   K,V -> GQA attention (within config.sliding_window, if any) -> output
//   projection -> residual -> RMSNorm -> SwiGLU MLP -> residual.
// The supported families (llama, qwen2, phi3) differ only in that data.
//
// Thread-safety: not thread-safe; owned by the engine thread. Parallelises
// internally with OpenMP (oneDNN and the attention kernels).
#ifndef KVSERVE_CORE_MODEL_MODEL_H_
#define KVSERVE_CORE_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/attention/gqa_attention.h"
#include "core/dnnl/linear.h"
#include "core/kv/block_table.h"
#include "core/model/weights.h"

namespace kvserve {

struct SeqChunk {
  // REQUIRES: kv->num_tokens() >= start_pos + tokens.size(); the blocks for
  // the new positions are writable (BlockTable::Extend made them so).
  BlockTable* kv = nullptr;
  int64_t start_pos = 0;
  absl::Span<const int32_t> tokens;
  // Compute the logits after this chunk's last token.
  bool want_logits = false;
};

struct ModelOptions {
  // The most tokens one step may carry: every matmul is probed at 1 and at
  // this many rows when the model is created.
  int64_t max_batch_tokens = 512;
  // LinearOptions::gemv_max_rows for every matrix (< 0: the default).
  int64_t gemv_max_rows = -1;
  // Steps of single-token chunks whose matrices all run on our kernels
  // run as one parallel region with spin barriers (core/util/team.h)
  // instead of a region per operation. false: always the per-operation
  // path (for benchmarks and tests comparing the two).
  bool decode_in_team = true;
  // llama.cpp's values to the bit (its x86 CPU backend's float order):
  // attention in its order (AttentionPath::kLlamaOrder; f32 KV caches only,
  // INVALID_ARGUMENT otherwise) and the block formats' kernels in theirs at
  // every row count (LinearOptions::llama_order). Without it, decode and
  // prompts of fewer than 8 tokens still compute the kernels' part in
  // llama.cpp's order. Slower: see gqa_attention.h and linear.h.
  bool llama_order = false;
};

class Model {
 public:
  // REQUIRES: weights and pool outlive the model; pool's geometry matches
  // the weights' config. UNIMPLEMENTED (naming dtype, shape and ISA) when a
  // weight matrix cannot be computed on this CPU.
  static absl::StatusOr<std::unique_ptr<Model>> Create(
      const ModelWeights* weights, const BlockPool* pool,
      const ModelOptions& options = {});

  // Runs one step. Returns [number of chunks with want_logits][vocab_size]
  // logits, rows in chunk order; valid until the next call.
  // INVALID_ARGUMENT for a token id outside the vocabulary or a position
  // past the context length; INTERNAL if a oneDNN primitive fails (no
  // exception leaves the model) or a logits row holds a NaN or an infinity
  // (naming the sequence's position: corrupt weights, never passed on).
  absl::StatusOr<absl::Span<const float>> Forward(
      absl::Span<const SeqChunk> chunks);

  const ModelConfig& config() const { return weights_->config; }
  const ModelWeights& weights() const { return *weights_; }

 private:
  // Q, K and V are one matmul (weights stacked along n), gate and up
  // another: fewer, larger calls per layer.
  struct LayerLinears {
    std::unique_ptr<Linear> wqkv, wo, w_gate_up, w_down;
  };
  Model(const ModelWeights* weights, std::unique_ptr<GqaAttention> attention);
  absl::Status CreateLinears(int64_t max_rows);
  absl::StatusOr<absl::Span<const float>> ForwardSteps(
      absl::Span<const SeqChunk> chunks);
  // INTERNAL unless every value of the logits rows is finite (one pass).
  absl::Status CheckLogits(absl::Span<const SeqChunk> chunks,
                           absl::Span<const float> logits) const;
  // Whether this step (m rows, n_logits of them wanted) can run as one
  // team; DecodeInTeam runs it (embeddings and angles already computed).
  bool DecodesInTeam(absl::Span<const SeqChunk> chunks, int64_t m,
                     int n_logits) const;
  void DecodeInTeam(absl::Span<const SeqChunk> chunks, int64_t m);

  void Embed(int32_t token, float* out) const;
  void RopeInPlace(float* x, int n_heads, const float* cos_sin) const;
  // Row `row` of qkv_: the layer's biases added, RoPE on q and k, q copied
  // to q_, k and v written to `kv` at position `pos` of `layer`.
  void RotateAndStoreKv(int layer, int64_t row, BlockTable& kv, int64_t pos);

  const ModelWeights* weights_;
  ModelOptions options_;
  std::unique_ptr<GqaAttention> attention_;
  std::vector<LayerLinears> layers_;
  std::unique_ptr<Linear> output_;
  float theta_scale_ = 1.0f;  // RoPE: rope_theta^(−2 / rotary_dim)
  // Per layer: the q, k, v biases side by side, [q_dim + 2 * kv_dim]; empty
  // for a layer without biases.
  std::vector<std::vector<float>> qkv_bias_;

  // Scratch, resized per step. m = tokens in the step.
  std::vector<float> x_;        // [m][dim] residual stream
  std::vector<float> xb_;       // [m][dim] normed input / projection output
  std::vector<float> qkv_;      // [m][q_dim + 2 * kv_dim]: q, k, v
  std::vector<float> q_;        // [m][q_dim]
  std::vector<float> att_;      // [m][q_dim]
  std::vector<float> gate_up_;  // [m][2 * hidden_dim]: gate, up
  std::vector<float> hidden_;   // [m][hidden_dim]
  std::vector<float> cos_sin_;  // [m][rotary_dim / 2][2]
  std::vector<float> last_;     // [n_logits][dim]
  std::vector<float> logits_;   // [n_logits][vocab_size]
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_MODEL_MODEL_H_
