// Linear: y = x Wᵀ for a weight matrix W [n][k] (row-major, as stored in
// model files), computed by a oneDNN matmul. f32 weights run f32×f32→f32;
// bf16 weights run bf16×bf16→f32 (x is converted to bf16 first, since
// oneDNN 2.6 has no f32×bf16 matmul on CPU).
//
// Several matrices with the same k can be fused into one Linear (W = the
// matrices stacked along n, e.g. Wq;Wk;Wv): one matmul reads them all, and
// y's row is their outputs side by side. Matrices of mixed dtypes are
// stacked in f32 (bf16 widens exactly).
//
// The weights are reordered once, at construction, into the blocked layout
// oneDNN's matmul prefers (the same for every row count m on AVX-512), so no
// call repacks them; the copy is owned by the Linear (on transparent huge
// pages when 2 MiB or larger). Primitives are created
// on first use for each m and cached: fixed-m primitives beat one
// runtime-m primitive (which oneDNN 2.6 runs with its plain-layout gemm)
// by 1.4x at m = 1.
//
// Create probes the primitives of m = 1 and m = max_rows, so a dtype or
// shape oneDNN cannot run on this CPU (e.g. bf16 below AVX-512) fails at
// load with a message naming dtype, shape and ISA, never in a request. No
// dnnl::error leaves this class: Forward returns INTERNAL with its message.
//
// Thread-safety: not thread-safe (one engine thread calls Forward).
#ifndef KVSERVE_CORE_DNNL_LINEAR_H_
#define KVSERVE_CORE_DNNL_LINEAR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/model/weights.h"
#include "dnnl.hpp"

namespace kvserve {

class Linear {
 public:
  // REQUIRES: the tensors' bytes outlive this object (when oneDNN wants the
  // plain layout a single tensor is read in place). INVALID_ARGUMENT when
  // weights is empty or its tensors differ in cols; UNIMPLEMENTED when
  // oneDNN has no matmul for the dtype and shape at m = 1 or max_rows.
  static absl::StatusOr<std::unique_ptr<Linear>> Create(
      absl::Span<const WeightTensor> weights, int64_t max_rows);
  static absl::StatusOr<std::unique_ptr<Linear>> Create(
      const WeightTensor& weight, int64_t max_rows) {
    return Create(absl::Span<const WeightTensor>(&weight, 1), max_rows);
  }

  // x: [m][k] f32, y: [m][n] f32 (overwritten). REQUIRES: m >= 1.
  absl::Status Forward(const float* x, int64_t m, float* y);

  int64_t in_features() const { return k_; }
  int64_t out_features() const { return n_; }
  DType dtype() const { return dtype_; }

 private:
  struct Cached {
    dnnl::matmul primitive;
    dnnl::memory::desc src_md, dst_md;
    // The weights in the layout this primitive was created for.
    dnnl::memory weights;
  };
  Linear() = default;
  // Both may throw dnnl::error; Create and Forward catch it.
  void Init(absl::Span<const WeightTensor> weights);
  Cached& PrimitiveFor(int64_t m);
  std::string Describe() const;  // "[n x k] dtype" for errors

  DType dtype_ = DType::kF32;
  int64_t n_ = 0, k_ = 0;
  // The weights, in the layout oneDNN chose for m = 1 (plain "ba" when it
  // wants no other); its buffer is owned by this memory object.
  dnnl::memory weights_;
  std::shared_ptr<void> weights_buffer_;  // weights_'s bytes, when ours
  absl::flat_hash_map<int64_t, Cached> cache_;
  // The weights in other layouts, made on demand for an m whose primitive
  // refuses weights_'s (none on AVX-512 CPUs).
  std::vector<dnnl::memory> other_layouts_;
  std::vector<std::shared_ptr<void>> other_buffers_;
  std::vector<uint16_t> x_bf16_;  // scratch for bf16 weights
};

}  // namespace kvserve

#endif  // KVSERVE_CORE_DNNL_LINEAR_H_
