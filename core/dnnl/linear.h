// Linear: y = x Wᵀ for a weight matrix W [n][k] (row-major, as stored in
// model files), in the format the file stores it.
//
// Several matrices with the same k can be fused into one Linear (W = the
// matrices stacked along n, e.g. Wq;Wk;Wv, possibly of different types, as
// in Q4_K_M files): one call computes them all, and y's row is their
// outputs side by side.
//
// Two implementations, chosen by Create:
//  - oneDNN (dnnl_linear.cc) when every matrix is f32, or every matrix is
//    bf16 and oneDNN has bf16 matmuls here (AVX-512 BF16): the weights are
//    reordered once into the blocked layout oneDNN's matmul prefers.
//  - block formats (block_linear.cc) for everything else (F16, BF16 below
//    AVX-512, Q8_0, Q4_K, ..., and mixes): the weights stay in their GGUF
//    bytes. Up to gemv_max_rows rows (per weight type: every row count for
//    Q8_0, Q4_0, Q5_0, IQ4_NL, Q4_K, Q5_K, Q6_K; 64 for Q4_1, Q5_1, Q2_K,
//    Q3_K; 32 for F16, BF16), our matrix-vector kernels read the blocks
//    directly against the activations quantized once per call
//    (core/quant); above, panels of rows are dequantized into a per-call
//    f32 buffer and multiplied by a oneDNN sgemm.
//
// Create probes the oneDNN primitives of m = 1 and m = max_rows, so a
// dtype or shape that cannot run on this CPU fails at load with a message
// naming dtype, shape and ISA, never in a request. No dnnl::error leaves
// this class: Forward returns INTERNAL with its message.
//
// Thread-safety: not thread-safe (one engine thread calls Forward).
#ifndef KVSERVE_CORE_DNNL_LINEAR_H_
#define KVSERVE_CORE_DNNL_LINEAR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/quant/weight_tensor.h"
#include "core/util/team.h"

namespace kvserve {

struct LinearOptions {
  // The most rows one Forward call gets (the engine's max_batch_tokens).
  int64_t max_rows = 512;
  // Block formats: up to this many rows the matrix-vector kernels run;
  // above, dequantized panels and a oneDNN sgemm (`bench/decode_bench
  // --prefill_paths` measures the crossover). < 0: the default, the least
  // of the stacked matrices' types' (block_linear.cc).
  int64_t gemv_max_rows = -1;
  // Block formats: ggml's float order at every row count (llama.cpp's
  // values to the bit): no activation-lane kernels and no dequantized
  // panels (gemv_max_rows is then unlimited). Prompts and batches are
  // slower (1.2-2.6x their matrix time at 8-512 rows).
  bool llama_order = false;
};

class Linear {
 public:
  // REQUIRES: the tensors' bytes outlive this object (they are read in
  // place). INVALID_ARGUMENT when weights is empty or its tensors differ in
  // cols; UNIMPLEMENTED when a type or shape cannot be computed here.
  static absl::StatusOr<std::unique_ptr<Linear>> Create(
      absl::Span<const WeightTensor> weights, const LinearOptions& options);
  static absl::StatusOr<std::unique_ptr<Linear>> Create(
      const WeightTensor& weight, const LinearOptions& options) {
    return Create(absl::Span<const WeightTensor>(&weight, 1), options);
  }
  virtual ~Linear() = default;

  // x: [m][k] f32, y: [m][n] f32 (overwritten). REQUIRES: 1 <= m.
  virtual absl::Status Forward(const float* x, int64_t m, float* y) = 0;

  // Whether ForwardInTeam can compute m rows (our matrix-vector kernels
  // can; oneDNN primitives cannot run inside another parallel region).
  virtual bool RunsInTeam(int64_t /*m*/) const { return false; }
  // Forward by the members of `team`, each computing its share of y's
  // columns; the caller syncs the team before reading y. Called by every
  // member with the same arguments. REQUIRES: RunsInTeam(m).
  virtual void ForwardInTeam(const float* /*x*/, int64_t /*m*/, float* /*y*/,
                             const Team& /*team*/) {}

  int64_t in_features() const { return k_; }
  int64_t out_features() const { return n_; }
  // The implementation and the types, e.g. "onednn f32 [n x k]" or
  // "blocks q4_K+q6_K [n x k]", for logs and tests.
  virtual std::string Describe() const = 0;

 protected:
  Linear(int64_t n, int64_t k) : n_(n), k_(k) {}
  const int64_t n_, k_;
};

namespace linear_internal {
// The row count of the oneDNN primitive that computes m rows: m itself up
// to 16 (decode batches), above it m rounded up to a multiple of
// max(16, 2^(bit_width(m - 1) - 4)), eight sizes an octave: at most 12.5%
// padding rows above 128 rows (more below, where reading the weights, not
// the rows, dominates a step's time). Primitives are made per
// row count and kept; one per distinct m grew a server by ~200 KiB for
// every new batch size the scheduler made, up to max_rows sizes (the soak,
// tests/soak/, saw 95 new sizes in 25 s). With these sizes a matrix holds
// at most 39 primitives up to 512 rows. The rows past m are computed on
// zeros in thread-local buffers and dropped.
int64_t PrimitiveRows(int64_t m);

// The input of a `rows`-row primitive for m rows of k floats: x itself
// when rows == m, else x's rows and then zeros, copied into *buf (which
// grows as needed).
const float* PaddedInput(const float* x, int64_t m, int64_t rows, int64_t k,
                         std::vector<float>* buf);
// Where a `rows`-row primitive writes n outputs per row: y itself when
// rows == m, else *buf (grown), of which the caller copies m rows to y.
float* PaddedOutput(float* y, int64_t m, int64_t rows, int64_t n,
                    std::vector<float>* buf);

// Memory for a copy of weights: from kHugePageBytes on 2 MiB-aligned and
// advised onto transparent huge pages where the kernel allows, which
// streams them ~7% faster at m = 1 (fewer TLB misses); 64-byte aligned
// below. nullptr when the allocation fails.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;
std::shared_ptr<void> WeightBuffer(size_t bytes);
// Releases the page-cache pages of a file mapping that has been copied
// (reordered, repacked) and will not be read again, so a model costs its
// copy once, not twice. Advice only: anonymous memory without swap stays.
void ReleasePages(const void* p, int64_t bytes);

// The two implementations (dnnl_linear.cc, block_linear.cc). Both may
// return UNIMPLEMENTED; neither throws.
absl::StatusOr<std::unique_ptr<Linear>> CreateDnnlLinear(
    absl::Span<const WeightTensor> weights, const LinearOptions& options);
absl::StatusOr<std::unique_ptr<Linear>> CreateBlockLinear(
    absl::Span<const WeightTensor> weights, const LinearOptions& options);
}  // namespace linear_internal

}  // namespace kvserve

#endif  // KVSERVE_CORE_DNNL_LINEAR_H_
