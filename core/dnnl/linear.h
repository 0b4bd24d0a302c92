// Linear: y = x Wᵀ for a weight matrix W [n][k] (row-major, as stored in
// model files), computed by a oneDNN matmul. f32 weights run f32×f32→f32;
// bf16 weights run bf16×bf16→f32 (x is converted to bf16 first, since
// oneDNN 2.6 has no f32×bf16 matmul on CPU).
//
// Primitives are created on first use for each row count m and cached.
// Thread-safety: not thread-safe (one engine thread calls Forward).
#ifndef KVSERVE_CORE_DNNL_LINEAR_H_
#define KVSERVE_CORE_DNNL_LINEAR_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "core/model/weights.h"
#include "dnnl.hpp"

namespace kvserve {

class Linear {
 public:
  // REQUIRES: weight outlives this object.
  explicit Linear(const WeightTensor& weight);

  // x: [m][k] f32, y: [m][n] f32 (overwritten).
  void Forward(const float* x, int64_t m, float* y);

  int64_t in_features() const { return weight_.cols; }
  int64_t out_features() const { return weight_.rows; }

 private:
  struct Cached {
    dnnl::matmul primitive;
    dnnl::memory::desc src_md, dst_md;
  };
  Cached& PrimitiveFor(int64_t m);

  WeightTensor weight_;
  dnnl::memory weight_mem_;
  absl::flat_hash_map<int64_t, Cached> cache_;
  std::vector<uint16_t> x_bf16_;  // scratch for bf16 weights
};

// f32 <-> bf16 (round to nearest even; NaN stays NaN).
uint16_t F32ToBf16(float f);
float Bf16ToF32(uint16_t h);
void ConvertF32ToBf16(const float* src, int64_t n, uint16_t* dst);

}  // namespace kvserve

#endif  // KVSERVE_CORE_DNNL_LINEAR_H_
